"""Terminus 2 driven by the scripted stand-in model (the LLM room's test double)."""

from __future__ import annotations

from rsr_async.config import HarnessConfig
from rsr_async.harness import Terminus2
from rsr_async.harness.fakes import FakeShell, FakeShellSandbox
from rsr_async.llm.scripted import ScriptedModel
from rsr_async.schema import EpisodeSpec, JobKey, Task

INSTRUCTION = "Write the word hello into /app/out.txt and the word bye into /app/bye.txt."
SOLUTION = "#!/bin/bash\necho hello > /app/out.txt\n\necho bye > /app/bye.txt\n"


async def test_the_scripted_model_plays_the_protocol_to_the_end() -> None:
    model = ScriptedModel({INSTRUCTION: SOLUTION})
    task = Task(name="hello", path="/tasks/hello", instruction=INSTRUCTION)
    solved, failed = 0, 0
    for seed in range(16):
        spec = EpisodeSpec(key=JobKey(stage="t", task="hello", attempt=seed), task=task, seed=seed)
        sandbox = FakeShellSandbox(FakeShell())
        outcome = await Terminus2(HarnessConfig()).run(spec, sandbox, model)
        # Every scripted episode ends by claiming and confirming completion.
        assert outcome.end_reason == "completed", (seed, outcome.error)
        replies = [m for m in outcome.trajectory.messages if m.origin == "model"]
        assert [m.task_complete for m in replies[-2:]] == [True, True]
        assert outcome.trajectory.messages[-2].origin == "harness"  # the confirmation request
        wrote = sandbox.current.files.get("/app/out.txt")
        if model.solves(INSTRUCTION, "terminus2", seed=seed):
            solved += 1
            assert wrote == "hello\n", seed
            assert sandbox.current.files.get("/app/bye.txt") == "bye\n", seed
        else:
            failed += 1
    assert solved and failed  # both paths were exercised


async def test_the_scripted_model_claims_early_under_rsrt_and_recovers_after_failed() -> None:
    from rsr_async.harness import Rsrt
    from rsr_async.tasks.verifier import Verification

    model = ScriptedModel({INSTRUCTION: SOLUTION})
    task = Task(name="hello", path="/tasks/hello", instruction=INSTRUCTION)
    recovered = 0
    for seed in range(24):
        sandbox = FakeShellSandbox(FakeShell())

        async def grader(box: object, task: Task, *, key: str, sandbox: FakeShellSandbox = sandbox) -> Verification:
            ok = sandbox.current.files.get("/app/bye.txt") == "bye\n"
            return Verification(reward=1.0 if ok else 0.0)

        spec = EpisodeSpec(key=JobKey(stage="t", task="hello", attempt=seed), task=task, seed=seed,
                           harness="rsrt")
        outcome = await Rsrt(HarnessConfig(max_turns=30), grader=grader).run(spec, sandbox, model)
        claims = [m for m in outcome.trajectory.messages if m.content.startswith("[rsrt] completion claim")]
        if len(claims) >= 2 and claims[-1].content.endswith("passed"):
            recovered += 1
            assert outcome.verification is not None and outcome.verification.passed
    assert recovered  # an early claim was rejected and then fixed
