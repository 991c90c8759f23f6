"""`run` grades a task whose agent leaves an HTTP server running for the tests (issue 27):
Harbor's shared verifier mode keeps the agent's processes alive through the tests. Real
containers, the real CLI, the scripted stand-in typing the task's solution."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rsr_async.engine.store import Store
from rsr_async.tasks import BUNDLED_SUITE
from tests.conftest import run_cli_env

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]


def test_run_grades_the_server_the_agent_left_running(tmp_path: Path) -> None:
    listing = tmp_path / "tasks.txt"
    listing.write_text(f"{BUNDLED_SUITE / 'serve-status-page'}\n")
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "rsr_async", "run", "--dataset", str(listing), "--attempts", "2",
         "--concurrency", "2", "--run-dir", str(run_dir), "--progress", "none"],
        env=run_cli_env(), capture_output=True, text=True, timeout=540,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["episodes"] == 2 and summary["infra_errors"] == 0
    with Store.open_readonly(run_dir / "run.db") as store:
        results = list(store.results(stage="discover"))
    started = [r for r in results if r.trajectory and any(
        "http.server 8080" in m.content for m in r.trajectory.messages if m.origin == "model")]
    assert started, "the stand-in never started the server: nothing here tests the grading"
    for result in started:  # the server it left running answered the tests
        assert result.status == "succeeded", (result.error, result.verifier_output[-500:])
        assert "port_8080_listens: PASS" in result.verifier_output
