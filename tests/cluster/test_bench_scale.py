"""``bench scale`` end to end in tiny configurations: the one JSON document it prints has
issue 17's fields, they agree with one another, and the bench leaves no Ray process and
no container behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

NEEDED = 100 * 512 / 300


@pytest.fixture
def ray_tmpdir() -> Iterator[Path]:
    """A Ray temp root of the bench's own (short: Ray's socket paths must fit in 107
    bytes): every process of its private Ray instances names it on its command line."""
    path = Path(tempfile.mkdtemp(prefix="rsr-rt-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _processes_naming(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found


def _bench(ray_tmpdir: Path, out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmpdir)}
    proc = subprocess.run(
        [sys.executable, "-m", "rsr_async", "bench", "scale", "--repeat", "1", "--json", str(out), *args],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text())
    assert json.loads(proc.stdout) == result  # stdout is the one JSON document, as written
    assert _processes_naming(str(ray_tmpdir)) == []  # its Ray instances stopped with it
    return proc, result


@pytest.mark.slow
def test_dispatch_capacity_is_reported_against_what_a_cluster_needs(tmp_path: Path, ray_tmpdir: Path) -> None:
    proc, result = _bench(ray_tmpdir, tmp_path / "scale.json", "--jobs", "1000", "--concurrency", "256",
                          "--episodes", "0")
    assert result["needed_jobs_per_s"] == round(NEEDED, 1)
    assert result["dispatch_jobs_per_s"] == pytest.approx(1e6 / result["head_cpu_us_per_job"], rel=1e-3)
    assert result["capacity_ratio"] == pytest.approx(result["dispatch_jobs_per_s"] / NEEDED, abs=0.006)
    assert result["achieved_capacity_ratio"] == pytest.approx(result["achieved_jobs_per_s"] / NEEDED, abs=0.006)
    missed = result["capacity_ratio"] < 10
    assert result["floors_missed"] == (["capacity_ratio"] if missed else [])
    assert result["floors_met"] is not missed and proc.returncode == (1 if missed else 0)

    dispatch = result["dispatch"]
    assert dispatch["actors"] == 2 and dispatch["jobs"] == 1000
    runs = dispatch["runs"]
    assert [len(runs["ray"]), len(runs["in_process"])] == [1, 1]
    for run in runs["ray"] + runs["in_process"]:
        assert run["jobs"] == 1000 and run["jobs_per_s"] == pytest.approx(1000 / run["wall_s"], rel=0.01)
        assert 0 < run["head_loop_cpu_us_per_job"] <= run["head_cpu_us_per_job"]
        assert run["mean_batch"] > 1  # batched, not one call a job
    assert runs["ray"][0]["head_cpu_us_per_job"] == result["head_cpu_us_per_job"]  # one run: its own median
    assert runs["ray"][0]["actors_cpu_us_per_job"] >= 0 and "actors_cpu_us_per_job" not in runs["in_process"][0]
    assert result["episodes"] is None and result["ray_overhead_s_per_episode"] is None
    assert result["hosts"]["measured"] is False and "bench hosts" in result["hosts"]["how"]


@pytest.mark.docker
@pytest.mark.slow
def test_the_same_episodes_with_and_without_ray(tmp_path: Path, ray_tmpdir: Path) -> None:
    _, result = _bench(ray_tmpdir, tmp_path / "scale.json", "--jobs", "200", "--concurrency", "64",
                       "--episodes", "2")
    episodes = result["episodes"]
    assert episodes["tasks"] == ["word-frequency", "merge-intervals"] and episodes["attempts"] == 1
    assert "test double" in episodes["model"]
    assert episodes["same_outcomes"] is True  # the same work, graded the same, both ways
    assert episodes["containers_left"] == 0
    for run in episodes["runs"]["plain"] + episodes["runs"]["ray"]:
        assert run["episodes"] == 2 and run["infra_errors"] == 0
        assert 0 <= run["mean_handover_s"] < run["mean_episode_s"] <= run["span_s"] <= run["wall_s"]
    median = episodes["median"]
    assert episodes["ray_overhead_s_per_episode"] == pytest.approx(
        median["ray"]["mean_episode_s"] - median["plain"]["mean_episode_s"], abs=0.002)
    assert result["ray_overhead_s_per_episode"] == episodes["ray_overhead_s_per_episode"]
    assert result["ray_fixed_overhead_s"] == episodes["ray_fixed_overhead_s"]
    assert result["ray_handover_s_per_episode"] == episodes["ray_handover_s_per_episode"]
    assert median["ray"]["outside_episodes_s"] > median["plain"]["outside_episodes_s"]  # Ray's start-up
