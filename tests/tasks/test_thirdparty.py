"""Published third-party tasks, from a folder kept out of git (``RSR_THIRDPARTY_TASKS``;
``tests/tasks/thirdparty/README.md`` says why and which were checked): each loads,
validates with its own oracle, and runs through the CLI with no infrastructure error.
Without the variable those checks are skipped, saying so. The bundled multi-step task
runs through the CLI here in any case."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rsr_async.engine.store import Store
from rsr_async.sandbox import SandboxPool
from rsr_async.sandbox.compose import task_compose
from rsr_async.tasks import BUNDLED_SUITE, is_task_dir, load_task, validate
from tests.conftest import run_cli_env

OUT_OF_TREE = "RSR_THIRDPARTY_TASKS"
"""Names a folder of third-party task directories kept out of git."""
needs_out_of_tree = pytest.mark.skipif(
    not os.environ.get(OUT_OF_TREE),
    reason=f"{OUT_OF_TREE} is not set: no out-of-tree third-party tasks to check (see tests/tasks/thirdparty/README.md)",
)


def out_of_tree_tasks() -> list[Path]:
    """The task directories directly inside the ``RSR_THIRDPARTY_TASKS`` folder."""
    root = Path(os.environ[OUT_OF_TREE])
    assert root.is_dir(), f"{OUT_OF_TREE}={root}: not a directory"
    tasks = sorted(path for path in root.iterdir() if is_task_dir(path))
    assert tasks, f"{OUT_OF_TREE}={root}: no task directory (task.toml or task.yaml) in it"
    return tasks


def run_through_cli(tmp_path: Path, tasks: list[Path], attempts: int) -> tuple[dict[str, object], Path]:
    """``python -m rsr_async run`` over ``tasks`` with the scripted stand-in: its summary
    and run directory, after asserting it exited 0."""
    listing = tmp_path / "tasks.txt"
    listing.write_text("".join(f"{p}\n" for p in tasks))
    run_dir = tmp_path / "run"
    # Published tasks often set storage_mb, which this host's storage driver cannot cap.
    out = subprocess.run(
        [sys.executable, "-m", "rsr_async", "run", "--dataset", str(listing), "--run-dir", str(run_dir),
         "--progress", "none", "--attempts", str(attempts), "--concurrency", "4",
         "--set", "sandbox.allow_uncapped_storage=true"],
        env=run_cli_env(), capture_output=True, text=True, timeout=800,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads((run_dir / "summary.json").read_text()), run_dir


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_multi_step_task_runs_through_the_cli_with_no_infrastructure_error(tmp_path: Path) -> None:
    summary, run_dir = run_through_cli(tmp_path, [BUNDLED_SUITE / "log-triage-steps"], 2)
    assert summary["episodes"] == 2 and summary["infra_errors"] == 0, summary
    with Store.open_readonly(run_dir / "run.db") as store:
        results = list(store.results(stage="discover"))
    assert len(results) == 2
    for result in results:
        assert result.status in ("succeeded", "failed"), (str(result.key), result.error)
        assert result.steps, str(result.key)  # every step that ran was graded
        assert all(s.reward is not None for s in result.steps), (str(result.key), result.steps)


@needs_out_of_tree
def test_out_of_tree_tasks_load() -> None:
    for path in out_of_tree_tasks():
        task = load_task(path)
        task_compose(task)  # a compose file outside the subset is refused here, by key


@needs_out_of_tree
@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_out_of_tree_tasks_validate_with_their_oracles(pool: SandboxPool) -> None:
    rows = await validate([load_task(path) for path in out_of_tree_tasks()], pool, concurrency=2)
    for row in rows:
        assert row.ok, (row.name, row.problems, row.oracle_output[-2000:], row.nop_output[-2000:])
        assert (row.oracle_reward, row.nop_reward) == (1.0, 0.0), row.name


@needs_out_of_tree
@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_out_of_tree_tasks_run_through_the_cli_with_no_infrastructure_error(tmp_path: Path) -> None:
    tasks = out_of_tree_tasks()
    summary, run_dir = run_through_cli(tmp_path, tasks, 1)
    assert summary["episodes"] == len(tasks) and summary["infra_errors"] == 0, summary
    with Store.open_readonly(run_dir / "run.db") as store:
        results = list(store.results(stage="discover"))
    assert len(results) == len(tasks)
    for result in results:
        assert result.status in ("succeeded", "failed"), (str(result.key), result.error)
