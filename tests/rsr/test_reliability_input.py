"""One bad task may never cost the others (issue 15): the loader refuses it with its name,
the embedded simulator's scripted stand-in skips what it cannot read and is handed exactly
the tasks the loader accepted, and the run goes on with the good ones."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rsr_async.engine.store import Store
from rsr_async.llm.scripted import load_solutions
from rsr_async.llm.sim.server import READY_LINE
from rsr_async.rsr.commands import TASK_LIST, write_task_list
from rsr_async.tasks import BUNDLED_SUITE, load_dataset
from tests.conftest import run_cli_env

GOOD = ["word-frequency", "merge-intervals"]
BAD = {"bad-encoding": "not valid UTF-8", "instruction-is-a-dir": "Is a directory"}


def _dataset(root: Path) -> Path:
    """2 good bundled tasks, 1 whose instruction is not UTF-8, 1 whose instruction.md is a
    directory (both bad ones keep a reference solution, so the stand-in would read them)."""
    for name in GOOD:
        shutil.copytree(BUNDLED_SUITE / name, root / name)
    encoding = root / "bad-encoding"
    shutil.copytree(BUNDLED_SUITE / GOOD[0], encoding)
    (encoding / "instruction.md").write_bytes(b"Count the words \xff\xfe in /app/input.txt\n")
    directory = root / "instruction-is-a-dir"
    shutil.copytree(BUNDLED_SUITE / GOOD[1], directory)
    (directory / "instruction.md").unlink()
    (directory / "instruction.md").mkdir()
    for bad in BAD:  # the dataset's names come from the directories
        toml = root / bad / "task.toml"
        toml.write_text(toml.read_text().replace(f'"rsr-async/{GOOD[0]}"', f'"rsr-async/{bad}"')
                        .replace(f'"rsr-async/{GOOD[1]}"', f'"rsr-async/{bad}"'))
    return root


def test_the_loader_skips_both_bad_tasks_by_name(tmp_path: Path) -> None:
    dataset = load_dataset([_dataset(tmp_path / "tasks")])
    assert [t.name for t in dataset] == sorted(GOOD)
    errors = sorted(str(e) for e in dataset.errors)
    assert len(errors) == 2
    for error, (name, _why) in zip(errors, sorted(BAD.items()), strict=True):
        assert name in error and "instruction.md" in error


def test_the_stand_in_skips_tasks_it_cannot_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = _dataset(tmp_path / "tasks")
    with caplog.at_level(logging.WARNING, logger="rsr_async.llm.scripted"):
        solutions = load_solutions(root)
    good = {(root / n / "instruction.md").read_text().strip() for n in GOOD}
    assert set(solutions) == good
    warned = " ".join(r.getMessage() for r in caplog.records)
    for name in BAD:
        assert f"skipped task {root / name}" in warned


def test_the_stand_in_reads_exactly_the_task_list(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "tasks")
    dataset = load_dataset([root])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    listing = write_task_list(dataset.tasks, run_dir)
    assert listing == run_dir / TASK_LIST
    assert listing.read_text().splitlines() == [str((root / n).resolve()) for n in sorted(GOOD)]
    only_one = tmp_path / "one.list"
    only_one.write_text(f"{root / GOOD[0]}\n\n")
    assert list(load_solutions(only_one)) == [(root / GOOD[0] / "instruction.md").read_text().strip()]
    assert len(load_solutions(listing)) == 2


def test_the_sim_server_starts_with_bad_tasks_in_its_directory(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "tasks")
    process = subprocess.Popen(
        [sys.executable, "-m", "rsr_async", "sim-server", "--port", "0", "--tasks", str(root)],
        env=run_cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith(READY_LINE), process.stderr.read() if process.stderr else ""
    finally:
        process.terminate()
        _out, err = process.communicate(timeout=30)
    for name in BAD:
        assert name in err
    assert "Traceback" not in err


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_run_with_bad_tasks_runs_the_good_ones(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "tasks")
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "rsr_async", "run", "--dataset", str(root), "--run-dir", str(run_dir),
         "--attempts", "1", "--progress", "none"],
        env=run_cli_env(), capture_output=True, text=True, timeout=840,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning: skipped a malformed task")]
    assert len(warnings) == 2, out.stderr[-4000:]
    for name in BAD:
        assert any(name in line for line in warnings)
    assert "Traceback" not in out.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["episodes"] == 2 and summary["tasks"] == 2
    with Store.open_readonly(run_dir / "run.db") as store:
        rows = store.rows(stage="discover")
    assert sorted(r.task for r in rows) == sorted(GOOD)
    assert {r.status for r in rows} <= {"succeeded", "failed"}  # never an infra error
