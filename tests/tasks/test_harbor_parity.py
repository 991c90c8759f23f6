"""Our loader's view of every Harbor-format directory against Harbor 0.25.0's own
``Task``, recorded by ``scripts/record_harbor_tasks.py`` (``fixtures/harbor_tasks.json``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsr_async.errors import TaskError
from rsr_async.tasks import BUNDLED_SUITE, load_task
from rsr_async.tasks.loader import HARBOR_AGENT_TIMEOUT_S

ROOT = Path(__file__).resolve().parents[2]
RECORDING = json.loads((ROOT / "tests/tasks/fixtures/harbor_tasks.json").read_text())
TASKS = RECORDING["tasks"]
LOADED = sorted(name for name, row in TASKS.items() if "error" not in row and not row["steps"])

# Where we part from Harbor on purpose, each with the reason.
BARE_NAMES = {"tests/tasks/fixtures/harbor/full-harbor"}
"""Harbor 0.25 requires "org/name"; the bare [task].name of older tasks still loads here."""
MULTI_STEP = {name for name, row in TASKS.items() if "error" not in row and row["steps"]}
"""Harbor runs [[steps]]; so do we (their loop: tests/rsr/test_steps_harbor.py)."""


def test_recording_is_harbor_0_25_and_covers_the_bundled_suite() -> None:
    assert RECORDING["harbor"] == "0.25.0"
    # Harbor loads its own format; a bundled terminal-bench task is not Harbor's to load.
    bundled = {f"rsr_async/tasks/bundled/{p.name}" for p in Path(BUNDLED_SUITE).iterdir()
               if (p / "task.toml").is_file()}
    assert bundled and bundled <= set(TASKS)
    assert MULTI_STEP == {"tests/tasks/fixtures/multistep/two-steps", "rsr_async/tasks/bundled/log-triage-steps"}


def test_every_bundled_task_is_valid_for_harbor_0_25() -> None:
    bundled = {name: row for name, row in TASKS.items() if name.startswith("rsr_async/tasks/bundled/")}
    refused = {name: row["error"] for name, row in bundled.items() if "error" in row}
    assert refused == {}
    for name, row in bundled.items():
        assert row["name"] == f"rsr-async/{name.rsplit('/', 1)[1]}"


@pytest.mark.parametrize("rel", LOADED)
def test_our_view_matches_harbors(rel: str) -> None:
    harbor = TASKS[rel]
    task = load_task(ROOT / rel)
    assert task.name == harbor["short_name"]
    assert task.qualified_name == harbor["name"]
    assert task.instruction == harbor["instruction"].strip()
    expected_agent = harbor["agent_timeout_sec"]
    # Harbor leaves an unset agent timeout unbounded; an episode here always has a limit.
    assert task.agent_timeout_s == (HARBOR_AGENT_TIMEOUT_S if expected_agent is None else expected_agent)
    assert task.verifier_timeout_s == harbor["verifier_timeout_sec"]
    assert task.build_timeout_s == harbor["build_timeout_sec"]
    assert task.cpus == harbor["cpus"]
    assert task.memory_mb == harbor["memory_mb"]
    assert task.storage_mb == harbor["storage_mb"]
    assert task.workdir == harbor["workdir"]
    assert task.docker_image == harbor["docker_image"]
    assert task.env == harbor["env"] and task.verifier_env == harbor["verifier_env"]
    assert task.category == harbor["metadata"].get("category", "")
    assert task.difficulty == harbor["metadata"].get("difficulty", "")
    assert list(task.tags) == harbor["metadata"].get("tags", [])


@pytest.mark.parametrize("rel", sorted(name for name, row in TASKS.items() if "error" in row))
def test_what_harbor_refuses_we_refuse(rel: str) -> None:
    if rel in BARE_NAMES:
        assert "org/name" in TASKS[rel]["error"]
        task = load_task(ROOT / rel)
        assert task.name == task.qualified_name == Path(rel).name
        return
    with pytest.raises(TaskError) as info:
        load_task(ROOT / rel)
    assert info.value.task == Path(rel).name


@pytest.mark.parametrize("rel", sorted(MULTI_STEP))
def test_multi_step_tasks_load_their_steps_as_harbor_does(rel: str) -> None:
    harbor = TASKS[rel]
    task = load_task(ROOT / rel)
    assert [s.name for s in task.steps] == [s["name"] for s in harbor["steps"]]
    for ours, theirs in zip(task.steps, harbor["steps"], strict=True):
        assert ours.instruction == theirs["instruction"].strip()
        # A step without its own agent timeout takes the task's (ours always has one).
        expected = theirs["agent_timeout_sec"] or harbor["agent_timeout_sec"] or HARBOR_AGENT_TIMEOUT_S
        assert ours.agent_timeout_s == expected
    assert harbor["instruction"] == "" and task.instruction == task.steps[0].instruction
