"""`python -m rsr_async eval` end to end: the real CLI in a subprocess, two real simulator
servers over HTTP standing in for two checkpoints (there is no GPU here: their answers
come from the scripted stand-in, a test double, and the table must say so), real Docker
sandboxes, real SQLite stores; then the same command again, which must run nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import msgspec
import pytest

from rsr_async.analysis.checkpoints import SCRIPTED_LABEL
from rsr_async.analysis.outcomes import OUTCOME_DEFINITIONS, outcomes
from rsr_async.analysis.runs import store_rollouts
from rsr_async.engine.store import Store
from rsr_async.llm.sim.server import READY_LINE
from rsr_async.rsr.runtime import run_id_for
from rsr_async.tasks import BUNDLED_SUITE
from tests.conftest import run_cli_env

# A fresh machine builds the three tasks' images inside the first run: allow for it.
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]

BENCHMARKS = {
    "alpha": ["csv-sales-summary", "word-frequency"],  # csv-sales-summary gives partial credit
    "beta": ["markdown-toc"],  # partial credit too
}
RUNS = 2


@pytest.fixture
def datasets(tmp_path: Path) -> dict[str, Path]:
    """Two benchmark directories holding copies of a few bundled tasks."""
    out = {}
    for bench, names in BENCHMARKS.items():
        for name in names:
            shutil.copytree(BUNDLED_SUITE / name, tmp_path / "benchmarks" / bench / name)
        out[bench] = tmp_path / "benchmarks" / bench
    return out


def _wait_ready(proc: subprocess.Popen[bytes], log: Path, deadline_s: float = 60.0) -> str:
    """The URL a sim-server prints once it listens (it picked a free port itself)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if line.startswith(READY_LINE):
                return line[len(READY_LINE):].strip()
        assert proc.poll() is None, f"sim-server exited with {proc.returncode}"
        time.sleep(0.1)
    raise AssertionError(f"sim-server did not report its URL within {deadline_s} s")


@pytest.fixture
def checkpoints(tmp_path: Path, datasets: dict[str, Path]) -> Iterator[dict[str, str]]:
    """Two simulator stand-ins for two checkpoints: different seeds (so they solve different
    tasks); one reports the stand-in's own model name, the other a name without
    "scripted" (the eval must still see that it is the simulator). Both are killed when
    the test ends, whatever happens."""
    servers = {"ckpt-a": ("scripted-stand-in", 11), "ckpt-b": ("sim-ckpt-b", 22)}
    urls = {}
    with ExitStack() as stack:
        for name, (model, seed) in servers.items():
            log = tmp_path / f"{name}.log"
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "rsr_async", "sim-server", "--port", "0",
                     "--host", "127.0.0.1", "--model-path", model, "--set", f"sim.seed={seed}",
                     "--tasks", str(tmp_path / "benchmarks")],
                    env=run_cli_env(), stdout=out, stderr=subprocess.STDOUT,
                )
            stack.callback(_stop, proc)
            urls[name] = _wait_ready(proc, log)
        yield urls


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)


def _labelled_containers(run_dir: Path) -> list[str]:
    return subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=rsr_async.run={run_id_for(run_dir)}"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()


def _remove_containers(run_dirs: list[Path]) -> None:
    """Whatever the run left (only on a failed test: the passing path asserts none)."""
    for run_dir in run_dirs:
        if ids := _labelled_containers(run_dir):
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, timeout=120)


def _episodes(run_dir: Path) -> dict[str, tuple[str, int, float | None]]:
    """key -> (status, tries, finished_at) of every job of a checkpoint's store."""
    with Store.open_readonly(run_dir) as store:
        return {r.key: (r.status, r.tries, r.finished_at) for r in store.rows()}


def test_eval_two_checkpoints_then_resume(tmp_path: Path, datasets: dict[str, Path],
                                          checkpoints: dict[str, str]) -> None:
    eval_dir = tmp_path / "eval"
    run_dirs = [eval_dir / name for name in checkpoints]
    cmd = [sys.executable, "-m", "rsr_async", "eval",
           *(a for name, url in checkpoints.items() for a in ("--model", f"{name}={url}")),
           *(a for path in datasets.values() for a in ("--dataset", str(path))),
           "--runs", str(RUNS), "--concurrency", "4", "--progress", "none",
           "--run-dir", str(eval_dir)]
    try:
        out = subprocess.run(cmd, env=run_cli_env(), capture_output=True, text=True, timeout=420)
        assert out.returncode == 0, out.stderr[-3000:]
        markdown = (eval_dir / "eval.md").read_text()
        assert out.stdout == markdown  # the table printed is the table written
        assert f"ckpt-b: {SCRIPTED_LABEL} (served by the rsr_async simulator)" in markdown
        assert "| ckpt-a (scripted stand-in) | ckpt-b (scripted stand-in) |" in markdown
        assert SCRIPTED_LABEL in out.stderr
        for run_dir in run_dirs:
            assert _labelled_containers(run_dir) == []

        data = json.loads((eval_dir / "eval.json").read_text())
        assert list(data) == ["harness", "runs", "checkpoints", "benchmarks", "notes", "definitions"]
        assert (data["harness"], data["runs"], data["definitions"]) == ("terminus2", RUNS, OUTCOME_DEFINITIONS)
        assert [(c["name"], c["url"], c["model"], c["scripted"], c["simulator"], c["run_dir"])
                for c in data["checkpoints"]] == [
            ("ckpt-a", checkpoints["ckpt-a"], "scripted-stand-in", True, True, str(run_dirs[0])),
            ("ckpt-b", checkpoints["ckpt-b"], "sim-ckpt-b", True, True, str(run_dirs[1])),
        ]
        assert [(b["name"], b["tasks"]) for b in data["benchmarks"]] == list(BENCHMARKS.items())

        # Every figure is outcomes() over the stores themselves; each store holds its
        # checkpoint's own episodes: R runs of every task, plain Terminus 2, its model.
        for name, run_dir in zip(checkpoints, run_dirs, strict=True):
            with Store.open_readonly(run_dir) as store:
                rows = store.rows()
                rollouts = [msgspec.structs.replace(r, harness=name) for r in store_rollouts(store)]
                models = {r.model for r in store.results(status=("succeeded", "failed"))}
            assert sorted(r.key for r in rows) == sorted(
                f"discover/{task}/terminus2/a{i}/-/e-1"
                for tasks in BENCHMARKS.values() for task in tasks for i in range(RUNS)
            )
            assert models == {data["checkpoints"][list(checkpoints).index(name)]["model"]}
            for bench in data["benchmarks"]:
                [expected] = outcomes(rollouts, bench["tasks"], k=RUNS, groups=[name])
                assert bench["outcomes"][name] == msgspec.to_builtins(expected)
                assert expected.rollouts + expected.infra_errors + expected.cancelled == RUNS * len(bench["tasks"])
        # The partial-credit tasks were seen as such (csv-sales-summary, markdown-toc).
        assert all(b["outcomes"][n]["partial_credit_tasks"] == 1
                   for b in data["benchmarks"] for n in checkpoints)

        # The same command again resumes: nothing runs, the table is the same.
        before = {d.name: _episodes(d) for d in run_dirs}
        again = subprocess.run(cmd, env=run_cli_env(), capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        assert {d.name: _episodes(d) for d in run_dirs} == before
        assert again.stderr.count("0 episodes run now, 6 in all") == 2
        assert json.loads((eval_dir / "eval.json").read_text()) == data
        assert again.stdout == markdown
    finally:
        _remove_containers(run_dirs)
