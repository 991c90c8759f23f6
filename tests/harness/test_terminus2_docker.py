"""Terminus 2 against a real Docker sandbox: real pty shell, real early-return waits."""

from __future__ import annotations

import json
import time
import uuid

import anyio
import pytest

from rsr_async.config import HarnessConfig, SandboxConfig
from rsr_async.harness import Terminus2
from rsr_async.harness.fakes import ReplayModel
from rsr_async.sandbox import SandboxPool
from rsr_async.schema import EpisodeSpec, JobKey, Task

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def act(*commands: tuple[str, float], done: bool = False) -> str:
    cmds = [{"keystrokes": k, "duration": d} for k, d in commands]
    return json.dumps({"analysis": "a", "plan": "p", "commands": cmds, "task_complete": done})


async def test_an_episode_in_a_real_container() -> None:
    task = Task(
        name="harness-docker",
        path="/nonexistent",
        instruction="Write hello to /app/out.txt.",
        docker_image=SandboxConfig().base_image,
    )
    spec = EpisodeSpec(key=JobKey(stage="test", task=task.name), task=task, deadline_s=120)
    model = ReplayModel(
        [
            act(("mkdir -p /app && cd /app && echo hello > out.txt && cat out.txt\n", 5.0)),
            act(("sleep 1; echo slept\n", 30.0)),  # done after ~1 s: the wait must end early
            act(("sleep 100\n", 0.5), ("C-c", 0.5)),
            act(done=True),
            act(done=True),
        ]
    )
    run_id = f"test-harness-{uuid.uuid4().hex[:8]}"
    with anyio.fail_after(180):
        async with SandboxPool(SandboxConfig(), run_id=run_id) as pool:
            async with pool.sandbox(task, key=str(spec.key)) as sandbox:
                started = time.monotonic()
                outcome = await Terminus2(HarnessConfig()).run(spec, sandbox, model)
                elapsed = time.monotonic() - started
                check = await sandbox.run("cat /app/out.txt", time_limit=30)
    assert outcome.end_reason == "completed", outcome.error
    assert check.output.strip() == "hello"
    observations = [m.content for m in outcome.trajectory.messages if m.origin == "env"]
    assert observations[0].startswith("New Terminal Output:\nroot@sandbox:/# ")
    assert "hello" in observations[0]
    assert "slept" in observations[1]
    assert "^C" in observations[2] or "Current Terminal Screen:" in observations[2]
    assert elapsed < 25, f"waits did not end early: {elapsed:.1f} s for ~3 s of commands"
    first = outcome.trajectory.messages[0].content
    assert "Current terminal state:\nCurrent Terminal Screen:\n" in first
