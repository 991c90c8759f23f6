"""Crash and signal behaviour of a real process running the engine.

"Exactly once" means: every job ends with exactly one final row in the store, and a job
whose result was committed before the crash is never executed again. A job that was
running (or had finished but not yet been committed) when the process was killed runs
again once on resume.
"""

from __future__ import annotations

import collections
import signal
import subprocess
import time
from pathlib import Path

import pytest

from rsr_async.engine import Store
from rsr_async.errors import StoreError
from tests.conftest import PYTHON, REPO, run_cli_env

DRIVER = REPO / "tests" / "engine" / "crash_driver.py"
N = 300


def _start(run_dir: Path, log: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, str(DRIVER), str(run_dir), str(log), str(N), *extra],
        env=run_cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_rows(run_dir: Path, status: str, at_least: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if (run_dir / "run.db").exists():
            try:
                store = Store.open_readonly(run_dir)
            except StoreError:  # created a moment ago, not written yet
                time.sleep(0.05)
                continue
            try:
                if store.counts()[status] >= at_least:
                    return
            finally:
                store.close()
        time.sleep(0.05)
    raise AssertionError(f"no {at_least} {status} rows within 30 s")


@pytest.mark.slow
def test_sigkill_mid_run_then_rerun_completes_every_job_exactly_once(tmp_path: Path) -> None:
    run_dir, log = tmp_path / "run", tmp_path / "executed.log"
    proc = _start(run_dir, log)
    _wait_for_rows(run_dir, "succeeded", 60, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)

    store = Store.open_readonly(run_dir)
    committed = {k for k, s in store.statuses().items() if s == "succeeded"}
    left_running = {k for k, s in store.statuses().items() if s == "running"}
    store.close()
    before = collections.Counter(log.read_text().split())
    assert 60 <= len(committed) < N
    assert left_running, "the kill should catch jobs in flight"

    rerun = _start(run_dir, log)
    out, err = rerun.communicate(timeout=60)
    assert rerun.returncode == 0, err
    assert f"skipped {len(committed)}" in out

    after = collections.Counter(log.read_text().split())
    store = Store.open_readonly(run_dir)
    rows = store.rows()
    store.close()
    assert len(rows) == N and {r.status for r in rows} == {"succeeded"}
    assert len({r.key for r in rows}) == N
    for key in committed:  # stored before the kill: never executed again
        assert after[key] == before[key] == 1, key
    for key in {r.key for r in rows} - committed:  # at most once before, exactly once after
        assert after[key] - before[key] == 1, key
        assert before[key] <= 1, key
    # jobs left `running` were executed before the kill and again after it
    assert all(after[k] == 2 for k in left_running)


@pytest.mark.slow
def test_two_sigints_cancel_running_jobs_and_leave_the_store_consistent(tmp_path: Path) -> None:
    run_dir, log = tmp_path / "run", tmp_path / "executed.log"
    proc = _start(run_dir, log, "--latency", "5", "10", "--grace", "60")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    _wait_for_rows(run_dir, "running", 16, proc)
    proc.send_signal(signal.SIGINT)  # drain: nothing new starts
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)  # cancel what is running
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (out, err)

    store = Store.open_readonly(run_dir)
    counts = store.counts()
    cancelled = list(store.results(status="cancelled"))
    store.close()
    assert counts["running"] == 0
    assert counts["cancelled"] == 16
    assert counts["pending"] == N - 16
    for result in cancelled:
        assert result.trajectory is not None and result.trajectory.messages  # the partial one
        assert result.end_reason == "cancelled"


@pytest.mark.slow
def test_one_sigint_drains_within_the_grace_period(tmp_path: Path) -> None:
    run_dir, log = tmp_path / "run", tmp_path / "executed.log"
    proc = _start(run_dir, log, "--latency", "0.5", "1.0", "--grace", "30")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    _wait_for_rows(run_dir, "succeeded", 5, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (out, err)
    store = Store.open_readonly(run_dir)
    counts = store.counts()
    store.close()
    assert counts["running"] == counts["cancelled"] == 0  # the running ones finished
    assert counts["succeeded"] + counts["pending"] == N
    assert counts["pending"] > 0
