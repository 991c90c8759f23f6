"""A task whose instruction loads (under the 1 MiB limit) but cannot fit the model's
context is a permanent error of the task, not the model's failure (issue 30): stored
``failed`` with a ``permanent:`` error and end reason ``error``, never retried, named in
the summary and left out of pass@k. Real run: CLI subprocess, embedded simulator over
HTTP, Docker sandboxes, SQLite."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rsr_async.engine.store import Store
from rsr_async.errors import is_permanent_error
from rsr_async.tasks import BUNDLED_SUITE
from rsr_async.tasks.loader import MAX_INSTRUCTION_BYTES
from tests.conftest import run_cli_env

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

GOOD = "word-frequency"
HUGE = "huge-instruction"


def _dataset(root: Path) -> Path:
    shutil.copytree(BUNDLED_SUITE / GOOD, root / GOOD)
    shutil.copytree(BUNDLED_SUITE / "merge-intervals", root / HUGE)
    toml = root / HUGE / "task.toml"
    toml.write_text(toml.read_text().replace('"rsr-async/merge-intervals"', f'"rsr-async/{HUGE}"'))
    # ~60k words: far past the simulator's 32768-token context, well under the load limit.
    text = "Merge the intervals in /app/input.txt. " + "Read this note carefully. " * 12_000
    assert len(text.encode()) < MAX_INSTRUCTION_BYTES
    (root / HUGE / "instruction.md").write_text(text)
    return root


def test_an_instruction_that_cannot_fit_is_the_tasks_permanent_error(tmp_path: Path) -> None:
    dataset = _dataset(tmp_path / "tasks")
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "rsr_async", "run", "--dataset", str(dataset), "--run-dir", str(run_dir),
         "--progress", "none", "--attempts", "2", "--concurrency", "4"],
        env=run_cli_env(), capture_output=True, text=True, timeout=540,
    )
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    with Store.open_readonly(run_dir) as store:
        rows = store.rows(stage="discover")
    huge = [r for r in rows if r.task == HUGE]
    good = [r for r in rows if r.task == GOOD]
    assert len(huge) == 2 and len(good) == 2
    for row in huge:
        assert row.status == "failed" and row.end_reason == "error", row
        assert is_permanent_error(row.error) and "task prompt does not fit" in (row.error or ""), row.error
    assert all(r.status in ("succeeded", "failed") and not is_permanent_error(r.error) for r in good)
    solved = sum(r.status == "succeeded" for r in good)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["permanent_errors"] == 2 and HUGE in summary["permanent_error_tasks"]
    # The unattemptable task is no sample: the model's failures and pass@1 are the good
    # task's alone (counted in, its 2 episodes would be 2 more failures and halve pass@1).
    assert summary["failed"] == len(good) - solved, summary
    assert summary["pass_at_1"] == pytest.approx(solved / len(good)), summary
