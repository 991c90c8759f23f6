"""Sandbox faults end to end through `python -m rsr_async run` (issue 15): real Docker,
real store, real summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rsr_async.analysis.runs import store_rollouts
from rsr_async.engine.signals import EXIT_PERMANENT_ONLY
from rsr_async.engine.store import Store
from rsr_async.errors import PERMANENT_PREFIX
from rsr_async.rsr.runtime import run_id_for
from tests.conftest import run_cli_env

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]

_TOML = """version = "1.0"
[task]
name = "{name}"
[verifier]
timeout_sec = 30
[agent]
timeout_sec = 60
[environment]
build_timeout_sec = 120
{environment}
"""


def _task(root: Path, name: str, *, environment: str = "", dockerfile: str | None = None) -> Path:
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(_TOML.format(name=name, environment=environment))
    (task / "instruction.md").write_text("Create /app/done.\n")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n[ -e /app/done ] && echo 1 > /logs/verifier/reward.txt"
        " || echo 0 > /logs/verifier/reward.txt\n"
    )
    if dockerfile is not None:
        (task / "environment").mkdir()
        (task / "environment" / "Dockerfile").write_text(dockerfile)
    return task


def _labelled(run_dir: Path) -> list[str]:
    return subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=rsr_async.run={run_id_for(run_dir)}"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()


def test_permanent_errors_are_tried_once_stored_apart_and_named(tmp_path: Path) -> None:
    bad_ref = _task(tmp_path / "tasks", "bad-reference",
                    environment='docker_image = "UPPER/Case:bad tag"')
    bad_build = _task(tmp_path / "tasks", "failing-dockerfile",
                      dockerfile="ARG BASE_IMAGE=rsr-base:bookworm\nFROM ${BASE_IMAGE}\nRUN false\n")
    dataset = tmp_path / "tasks.txt"
    dataset.write_text(f"{bad_ref}\n{bad_build}\n")
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "rsr_async", "run", "--dataset", str(dataset),
           "--run-dir", str(run_dir), "--progress", "none", "--attempts", "1"]
    out = subprocess.run(cmd, env=run_cli_env(), capture_output=True, text=True, timeout=300)
    # Not 4 ("rerun to retry"): rerunning cannot help a task that is wrong; and not 0:
    # nothing was graded, so the run has its own code (5).
    assert out.returncode == EXIT_PERMANENT_ONLY, out.stderr[-3000:]
    with Store.open_readonly(run_dir / "run.db") as store:
        rows = {row.task: row for row in store.rows(stage="discover")}
        rollouts = store_rollouts(store)
    # The analysis never takes them for samples of the model either.
    assert len(rollouts) == 2 and not any(r.graded for r in rollouts)
    assert set(rows) == {"bad-reference", "failing-dockerfile"}
    for row in rows.values():
        assert row.status == "failed" and row.end_reason == "error", row
        assert row.tries == 1, f"{row.task} was retried: {row.tries} tries"
        assert row.reward is None
        assert (row.error or "").startswith(PERMANENT_PREFIX), row.error
    assert "invalid reference format" in (rows["bad-reference"].error or "")
    assert "ImageBuildError" in (rows["failing-dockerfile"].error or "")
    events = (run_dir / "events.jsonl").read_text().splitlines()
    assert not [e for e in events if json.loads(e).get("event") == "retry"]

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["permanent_errors"] == 2
    assert sum(h["permanent_errors"] for h in summary["harnesses"].values()) == 2
    assert sum(h["episodes"] for h in summary["harnesses"].values()) == summary["episodes"] == 2
    assert summary["failed"] == 0 and summary["infra_errors"] == 0  # not the model's failure
    assert summary["pass_at_k_tasks"] == 0  # no samples: pass@k is not computed over them
    assert set(summary["permanent_error_tasks"]) == {"bad-reference", "failing-dockerfile"}
    assert "invalid reference format" in summary["permanent_error_tasks"]["bad-reference"]
    assert "permanent errors" in out.stderr and "failing-dockerfile" in out.stderr
    assert _labelled(run_dir) == []

    # A resume does not try them again either.
    again = subprocess.run(cmd, env=run_cli_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == EXIT_PERMANENT_ONLY, again.stderr[-3000:]  # still nothing graded
    with Store.open_readonly(run_dir / "run.db") as store:
        assert all(row.tries == 1 for row in store.rows(stage="discover"))
    assert json.loads((run_dir / "summary.json").read_text())["episodes_this_run"] == 0
    assert _labelled(run_dir) == []
