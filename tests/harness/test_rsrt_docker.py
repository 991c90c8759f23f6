"""RSRT against real Docker: hidden tests run on a throwaway copy of the sandbox, the
agent hears one fixed sentence on failure and keeps working, and an agent that searches
its whole filesystem after a failed claim finds no tests, reward or verifier output."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import anyio
import pytest

from rsr_async.config import HarnessConfig, SandboxConfig
from rsr_async.harness import Rsrt
from rsr_async.harness.fakes import ReplayModel
from rsr_async.harness.protocol import render
from rsr_async.rsr.episode import SnapshotGrader
from rsr_async.sandbox import SandboxPool
from rsr_async.sandbox.pool import LABEL_RUN, SNAPSHOT_REPOSITORY
from rsr_async.schema import EpisodeSpec, JobKey, Task

pytestmark = pytest.mark.docker

MARKER = "HIDDEN-TEST-MARKER-7f3a"
# The agent's search. Its hits are prefixed with "HIT" built from a variable, so the
# command line echoed on the terminal never contains the prefix itself.
SEARCH = (
    "H=HI; { ls -d /tests /logs/verifier 2>/dev/null; "
    "find / -xdev \\( -name 'reward.txt' -o -name 'reward.json' -o -name 'test.sh' \\) 2>/dev/null; "
    f"grep -rl {MARKER[:6]}-TEST-MARKER / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev 2>/dev/null; "
    "} | sed \"s/^/${H}T:/\"; echo SEARCH-DONE\n"
)


def act(keys: str = "", done: bool = False, duration: float = 0.5) -> str:
    commands = [{"keystrokes": keys, "duration": duration}] if keys else []
    return json.dumps({"analysis": "a", "plan": "p", "commands": commands, "task_complete": done})


def hidden_task(tmp_path: Path) -> Task:
    tests = tmp_path / "tests"
    tests.mkdir(parents=True)
    (tests / "test.sh").write_text(
        f"echo {MARKER} > /logs/verifier/output.log\n"
        f"echo '# {MARKER}' >> /tests/test.sh\n"
        "if grep -qx ok /app/out.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
        f"echo {MARKER}\n"
    )
    return Task(name="rsrt-hidden", path=str(tmp_path), instruction="Write ok into /app/out.txt.",
                docker_image=SandboxConfig().base_image, tests_dir=str(tests),
                verifier_timeout_s=30, agent_timeout_s=60)


def _snapshot_images(run_id: str) -> list[str]:
    """Committed snapshot images of this test's run (other runs may commit meanwhile)."""
    return subprocess.run(
        ["docker", "images", "-q", "--filter", f"label=rsr_async.run={run_id}", SNAPSHOT_REPOSITORY],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()


def _labelled(run_id: str) -> list[str]:
    return subprocess.run(["docker", "ps", "-aq", "--filter", f"label={LABEL_RUN}={run_id}"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.split()


async def test_a_failed_claim_leaves_nothing_to_find_and_the_agent_recovers(tmp_path: Path) -> None:
    task = hidden_task(tmp_path / "task")
    key = JobKey(stage="discover", task=task.name, harness="rsrt")
    spec = EpisodeSpec(key=key, task=task, harness="rsrt", deadline_s=120)
    model = ReplayModel([
        act("mkdir -p /app && echo wrong > /app/out.txt\n"),
        act(done=True), act(done=True),          # claim 1: the hidden tests fail
        act(SEARCH, duration=60.0),              # look everywhere (ends early once done)
        act("echo ok > /app/out.txt\n"),
        act(done=True), act(done=True),          # claim 2: pass
    ])
    run_id = f"test-rsrt-{uuid.uuid4().hex[:8]}"
    async with SandboxPool(SandboxConfig(api_timeout_s=60.0), run_id=run_id) as pool:
        grader = SnapshotGrader(pool, anyio.CapacityLimiter(1))
        async with pool.sandbox(task, key=str(key)) as sandbox:
            outcome = await Rsrt(HarnessConfig(), grader=grader).run(spec, sandbox, model)
            # The agent's own container: still no tests, reward or verifier output.
            left = await sandbox.run("ls -d /tests /logs/verifier 2>&1; echo rc=$?", time_limit=30)
            assert "rc=2" in left.output, left.output
        assert await pool.containers() == []
    assert _snapshot_images(run_id) == []  # no committed copy was made, or it is gone
    assert _labelled(run_id) == []

    assert outcome.end_reason == "completed", outcome.error
    assert outcome.verification is not None and outcome.verification.passed
    assert MARKER in outcome.verification.output  # it ran, in the copy
    messages = outcome.trajectory.messages
    records = [m.content for m in messages if m.origin == "harness" and m.role == "system"]
    assert records == [
        "[rsrt] completion claim 1 at turn 2: hidden tests failed",
        "[rsrt] completion claim 2 at turn 6: hidden tests passed",
    ]
    failed = render("rsrt_failed")
    assert [m.content for m in messages if m.content == failed and m.origin == "harness"] == [failed]
    # What the model was shown after the failed claim: the sentence, nothing about the tests.
    after_claim = model.calls[3].messages[-1]["content"]
    assert after_claim.endswith(failed) and MARKER not in after_claim
    search_result = model.calls[4].messages[-1]["content"]
    assert "SEARCH-DONE" in search_result and "HIT:" not in search_result, search_result
    assert all(MARKER not in call.messages[-1]["content"] for call in model.calls)
