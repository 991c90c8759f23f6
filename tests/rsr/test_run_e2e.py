"""`python -m rsr_async run` end to end: real containers, real HTTP, real SQLite, real
subprocesses (including a SIGKILL mid-run)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsr_async.engine.store import Store
from rsr_async.rsr.runtime import run_id_for
from rsr_async.tasks import BUNDLED_SUITE
from tests.conftest import run_cli_env

# A fresh machine builds the tasks' images inside these runs: allow for it.
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

TASKS = ["word-frequency", "merge-intervals", "csv-sales-summary", "fix-app-config",
         "markdown-toc", "normalize-line-endings"]


def _dataset(tmp_path: Path, names: list[str]) -> Path:
    listing = tmp_path / "tasks.txt"
    listing.write_text("# a few bundled tasks\n" + "".join(f"{BUNDLED_SUITE / n}\n" for n in names))
    return listing


def _run_cmd(dataset: Path, run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rsr_async", "run", "--dataset", str(dataset),
            "--run-dir", str(run_dir), "--progress", "none", *extra]


def _labelled_containers(run_dir: Path) -> list[str]:
    """Containers still labelled with this run's id (the run id derives from the run dir)."""
    return subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=rsr_async.run={run_id_for(run_dir)}"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()


def _final_rows(db: Path) -> dict[str, tuple[str, float]]:
    """key -> (status, finished_at) of jobs with a final status, read without the engine."""
    if not db.exists():
        return {}
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        rows = con.execute(
            "SELECT key, status, finished_at FROM jobs WHERE status IN ('succeeded', 'failed')"
        ).fetchall()
    except sqlite3.OperationalError:
        return {}
    finally:
        con.close()
    return {key: (status, finished) for key, status, finished in rows}


def _check_summary_agrees_with_store(run_dir: Path, episodes: int, tasks: int) -> dict[str, object]:
    summary = json.loads((run_dir / "summary.json").read_text())
    with Store.open_readonly(run_dir / "run.db") as store:
        counts = store.counts(stage="discover")
        rows = store.rows(stage="discover")
        results = list(store.results(stage="discover"))
    assert len(rows) == episodes
    assert summary["episodes"] == episodes == sum(counts[s] for s in ("succeeded", "failed", "infra_error", "cancelled"))
    assert summary["succeeded"] == counts["succeeded"]
    assert summary["infra_errors"] == counts["infra_error"] == 0
    assert summary["tasks"] == tasks
    solved = {r.task for r in rows if r.status == "succeeded"}
    assert summary["solved_tasks"] == len(solved)
    assert summary["prompt_tokens"] == sum(r.usage.prompt_tokens for r in results) > 0
    assert 0 < summary["cached_share"] < 1
    for result in results:  # every stored episode has its verifier's verdict and trajectory
        assert result.reward is not None and result.trajectory is not None
        assert result.trajectory.messages[0].origin == "task"
        assert (result.status == "succeeded") == (result.reward >= 1.0)
    return summary


def test_run_completes_stores_and_cleans_up(tmp_path: Path) -> None:
    dataset = _dataset(tmp_path, TASKS[:4])
    run_dir = tmp_path / "run"
    out = subprocess.run(_run_cmd(dataset, run_dir, "--attempts", "2", "--concurrency", "8"),
                         env=run_cli_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "scripted stand-in model" in out.stderr and "TEST DOUBLE" in out.stderr
    summary = _check_summary_agrees_with_store(run_dir, episodes=8, tasks=4)
    assert summary["peak_sandboxes"] >= 2
    assert _labelled_containers(run_dir) == []
    # Rerunning the same command resumes: nothing is left to do, nothing runs again.
    before = _final_rows(run_dir / "run.db")
    again = subprocess.run(_run_cmd(dataset, run_dir, "--attempts", "2", "--concurrency", "8"),
                           env=run_cli_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _final_rows(run_dir / "run.db") == before
    assert json.loads((run_dir / "summary.json").read_text())["episodes_this_run"] == 0
    # A changed setting that changes what is measured is refused, naming the key; nothing
    # stored is touched.
    changed = subprocess.run(
        _run_cmd(dataset, run_dir, "--attempts", "2", "--set", "harness.max_turns=7"),
        env=run_cli_env(), capture_output=True, text=True, timeout=600,
    )
    assert changed.returncode == 1, changed.stderr[-3000:]
    assert "started with another config" in changed.stderr and "harness.max_turns" in changed.stderr
    assert "Traceback" not in changed.stderr
    assert _final_rows(run_dir / "run.db") == before


def test_sigkill_midway_then_rerun_finishes_the_rest_once(tmp_path: Path) -> None:
    dataset = _dataset(tmp_path, TASKS)
    run_dir = tmp_path / "run"
    cmd = _run_cmd(dataset, run_dir, "--attempts", "3", "--concurrency", "4")
    proc = subprocess.Popen(cmd, env=run_cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    db = run_dir / "run.db"
    try:
        deadline = time.monotonic() + 300
        while len(_final_rows(db)) < 4:
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no job finished within 300 s"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the run and its simulator subprocess
        proc.wait(timeout=60)
    before = _final_rows(db)
    assert 4 <= len(before) < 18, "kill midway: some but not all jobs finished"

    out = subprocess.run(cmd, env=run_cli_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    after = _final_rows(db)
    assert len(after) == 18
    for key, row in before.items():  # nothing finished before the kill ran again
        assert after[key] == row, key
    summary = _check_summary_agrees_with_store(run_dir, episodes=18, tasks=6)
    assert summary["episodes_this_run"] == 18 - len(before)
    assert _labelled_containers(run_dir) == []  # the killed run's containers were swept


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def sim_server() -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rsr_async", "sim-server", "--port", str(port),
         "--tasks", str(BUNDLED_SUITE)],
        env=run_cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert str(port) in first, first + (proc.stderr.read() if proc.stderr else "")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_run_against_a_separate_sim_server_over_http(tmp_path: Path, sim_server: str) -> None:
    dataset = _dataset(tmp_path, TASKS[:3])
    run_dir = tmp_path / "run"
    out = subprocess.run(_run_cmd(dataset, run_dir, "--llm-url", sim_server, "--concurrency", "3"),
                         env=run_cli_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "TEST DOUBLE" not in out.stderr  # it used the given server, not the embedded one
    summary = _check_summary_agrees_with_store(run_dir, episodes=3, tasks=3)
    assert summary["scripted_model"] is True  # the server says it is the stand-in
    assert _labelled_containers(run_dir) == []
