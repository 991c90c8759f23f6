"""StateM with a custom workflow in a real container: intercepted `statem` commands,
blocking checks run in the sandbox (exit code, file), checklist, bad moves, and every
statem line and its output recorded as harness text."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from rsr_async.config import HarnessConfig, SandboxConfig
from rsr_async.harness import Statem, Workflow, load_workflow
from rsr_async.harness.fakes import ReplayModel
from rsr_async.sandbox import SandboxPool
from rsr_async.schema import EpisodeSpec, JobKey, Task

pytestmark = pytest.mark.docker

CUSTOM = """
start = "triage"
[states.triage]
prompt = "Triage the report."
next = ["fix"]
checklist = ["reproduced"]
[[states.triage.checks]]
file = "/app/state"
[states.fix]
prompt = "Fix it."
next = ["closed"]
[[states.fix.checks]]
run = "grep -qx fixed /app/state"
description = "the state file says fixed"
[states.closed]
prompt = "All done."
"""


def act(*keys: str, done: bool = False) -> str:
    commands = [{"keystrokes": k, "duration": 0.3} for k in keys]
    return json.dumps({"analysis": "a", "plan": "p", "commands": commands, "task_complete": done})


def test_the_default_workflow_loads_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    default = load_workflow()
    assert default.start == "understand"
    assert list(default.states) == ["understand", "plan", "implement", "verify", "done"]
    bad = tmp_path / "bad.toml"
    bad.write_text('start = "a"\n[states.a]\nprompt = "x"\nnext = ["nowhere"]\n')
    with pytest.raises(Exception, match="unknown state 'nowhere'"):
        load_workflow(bad)


async def test_a_custom_workflow_is_driven_from_the_shell(tmp_path: Path) -> None:
    path = tmp_path / "custom.toml"
    path.write_text(CUSTOM)
    workflow: Workflow = load_workflow(path)
    task = Task(name="statem-custom", path=str(tmp_path), instruction="Fix the report.",
                docker_image=SandboxConfig().base_image, agent_timeout_s=60)
    key = JobKey(stage="discover", task=task.name, harness="statem")
    model = ReplayModel([
        act("statem cur\n", "statem goto fix\n"),                        # blocked: nothing done
        act("mkdir -p /app && echo seen > /app/state\n", "statem check reproduced\n",
            "statem goto fix\n", "statem goto closed\n"),                # moves; then blocked by run check
        act("echo fixed > /app/state\n", "statem goto closed\n", "statem frobnicate\n",
            "statem history\n"),
        act(done=True), act(done=True),
    ])
    async with SandboxPool(SandboxConfig(api_timeout_s=60.0), run_id=f"test-statem-{uuid.uuid4().hex[:8]}") as pool:
        async with pool.sandbox(task, key=str(key)) as sandbox:
            outcome = await Statem(HarnessConfig(), workflow=workflow).run(
                EpisodeSpec(key=key, task=task, harness="statem", deadline_s=60), sandbox, model)
        assert await pool.containers() == []
    assert outcome.end_reason == "completed", outcome.error
    first = model.calls[0].messages[-1]["content"]
    assert "statem goto STATE" in first and "Current state: triage" in first
    seen = [call.messages[-1]["content"] for call in model.calls[1:4]]
    assert "cannot leave triage yet" in seen[0] and "'reproduced' is not ticked" in seen[0]
    assert "file /app/state exists" in seen[0]
    assert "Moved to fix." in seen[1] and "check failed: the state file says fixed" in seen[1]
    assert "Moved to closed." in seen[2] and "unknown command 'frobnicate'" in seen[2]
    assert "1. triage\n2. fix\n3. closed" in seen[2]
    # Every statem line and its output is harness text; the env observations hold none.
    harness = [m.content for m in outcome.trajectory.messages if m.origin == "harness"]
    assert sum(text.startswith("$ statem ") for text in harness) == 8
    env = [m.content for m in outcome.trajectory.messages if m.origin in ("env", "task")]
    assert not any("Moved to" in text or "statem goto STATE" in text for text in env)
