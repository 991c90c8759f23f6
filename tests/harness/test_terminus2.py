"""Terminus 2 end to end in-process: the loop against FakeShell and scripted models."""

from __future__ import annotations

import json

import anyio
import pytest

from rsr_async.config import HarnessConfig
from rsr_async.errors import (
    ConfigError,
    ContextLengthError,
    InfraError,
    LLMServerError,
    ShellClosedError,
)
from rsr_async.harness import EpisodeOutcome, Terminus2, get_harness
from rsr_async.harness.fakes import FakeShell, FakeShellSandbox, ReplayModel
from rsr_async.llm.base import ChatMessage, Completion
from rsr_async.schema import Command, EpisodeSpec, JobKey, Task, Trajectory, Usage

INSTRUCTION = "Write the word hello into /app/out.txt."


def act(*commands: str | tuple[str, float], done: bool = False, **extra: object) -> str:
    """A proper Terminus 2 reply."""
    cmds = [
        {"keystrokes": c, "duration": 0.1} if isinstance(c, str) else {"keystrokes": c[0], "duration": c[1]}
        for c in commands
    ]
    return json.dumps({"analysis": "a", "plan": "p", "commands": cmds, "task_complete": done, **extra})


def spec(**overrides: object) -> EpisodeSpec:
    task = Task(name="hello", path="/tasks/hello", instruction=INSTRUCTION)
    fields: dict[str, object] = {
        "key": JobKey(stage="discover", task="hello", harness="terminus2"),
        "task": task,
        "temperature": 0.7,
        "seed": 11,
    }
    fields.update(overrides)
    return EpisodeSpec(**fields)  # type: ignore[arg-type]


def usage(prompt: int, completion: int = 50) -> Usage:
    return Usage(prompt_tokens=prompt, completion_tokens=completion, requests=1)


def completion(text: str, prompt_tokens: int = 1000, finish: str = "stop") -> Completion:
    return Completion(text=text, finish_reason=finish, usage=usage(prompt_tokens))  # type: ignore[arg-type]


async def play(
    replies: list[str | Completion | BaseException],
    *,
    shell: FakeShell | None = None,
    config: HarnessConfig | None = None,
    context_length: int = 32768,
    **spec_overrides: object,
) -> tuple[EpisodeOutcome, ReplayModel, FakeShell, list[int]]:
    model = ReplayModel(replies, context_length=context_length)
    sandbox = FakeShellSandbox(shell or FakeShell())
    checkpoints: list[int] = []

    def checkpoint(trajectory: Trajectory) -> None:
        checkpoints.append(len(trajectory.messages))

    harness = Terminus2(config or HarnessConfig())
    outcome = await harness.run(spec(**spec_overrides), sandbox, model, checkpoint=checkpoint)
    return outcome, model, sandbox.shells[0], checkpoints


def origins(outcome: EpisodeOutcome) -> list[str]:
    return [m.origin for m in outcome.trajectory.messages]


def last_user(messages: tuple[ChatMessage, ...]) -> str:
    assert messages[-1]["role"] == "user"
    return messages[-1]["content"]


# ---------------------------------------------------------------- the happy path


async def test_solve_then_confirm_completes_with_every_message_tagged() -> None:
    outcome, model, shell, checkpoints = await play(
        [
            act("echo hello > /app/out.txt\n", "cat /app/out.txt\n"),
            act(done=True),
            act(done=True),
        ]
    )
    assert outcome.end_reason == "completed" and outcome.error is None
    assert outcome.turns == 3
    assert shell.files["/app/out.txt"] == "hello\n"
    assert origins(outcome) == ["task", "model", "env", "model", "harness", "model"]
    first = outcome.trajectory.messages[0].content
    assert "Task Description:\n" + INSTRUCTION in first
    assert "Current terminal state:\nCurrent Terminal Screen:\nroot@sandbox:/app# " in first
    # The observation is the new output, and the model saw it in the next call.
    observation = outcome.trajectory.messages[2].content
    assert observation.startswith("New Terminal Output:\nroot@sandbox:/app# echo hello > /app/out.txt\n")
    assert "cat /app/out.txt\nhello\n" in observation
    assert last_user(model.calls[1].messages) == observation
    assert "Are you sure you want to mark the task as complete?" in last_user(model.calls[2].messages)
    # Model messages carry usage, commands and the claim; the outcome sums the usage.
    replies = [m for m in outcome.trajectory.messages if m.origin == "model"]
    assert all(m.usage is not None and m.usage.requests == 1 for m in replies)
    assert replies[0].commands == (
        Command(keystrokes="echo hello > /app/out.txt\n", duration=0.1),
        Command(keystrokes="cat /app/out.txt\n", duration=0.1),
    )
    assert [m.task_complete for m in replies] == [False, True, True]
    assert outcome.usage == outcome.trajectory.usage() and outcome.usage.requests == 3
    assert [m.turn for m in outcome.trajectory.messages] == [0, 0, 1, 1, 2, 2]
    times = [m.at for m in outcome.trajectory.messages]
    assert times == sorted(times)
    assert checkpoints == [2, 4]  # after each turn that did not end the episode
    assert not shell.alive  # closed once the agent is done
    assert outcome.trajectory.model == "replay" and outcome.trajectory.harness == "terminus2"


async def test_calls_are_routed_and_history_is_append_only() -> None:
    outcome, model, _, _ = await play(
        [act("ls\n"), act("pwd\n"), act(done=True), act(done=True)], affinity="runbook-7"
    )
    assert outcome.end_reason == "completed"
    assert {c.affinity for c in model.calls} == {"runbook-7"}
    assert {(c.temperature, c.seed) for c in model.calls} == {(0.7, 11)}
    for before, after in zip(model.calls, model.calls[1:], strict=False):
        assert after.messages[: len(before.messages)] == before.messages
    _, model, _, _ = await play([act(done=True), act(done=True)])
    assert model.calls[0].affinity == "discover/hello/terminus2/a0/-/e-1"


async def test_guidance_is_a_private_message_before_the_task_prompt() -> None:
    outcome, model, _, _ = await play([act(done=True), act(done=True)], guidance="1. Look.\n2. Write.")
    assert origins(outcome)[:2] == ["private", "task"]
    sent = model.calls[0].messages
    assert sent[0]["role"] == "system" and sent[0]["content"].endswith("1. Look.\n2. Write.")
    assert sent[1]["role"] == "user" and INSTRUCTION in sent[1]["content"]


# ---------------------------------------------------------------- confirmation


async def test_completion_needs_two_consecutive_claims() -> None:
    outcome, model, shell, _ = await play(
        [
            act("echo one\n", done=True),  # claim: runs its commands, then asks to confirm
            act("echo two\n"),  # not confirmed: back to work
            act(done=True),  # claims again: asks again
            act(done=True),  # confirmed
        ]
    )
    assert outcome.end_reason == "completed" and outcome.turns == 4
    assert shell.sent == ["echo one\n", "echo two\n"]
    prompts = [last_user(c.messages) for c in model.calls[1:]]
    assert "Are you sure" in prompts[0] and "echo one\none\n" in prompts[0]
    assert "Are you sure" not in prompts[1] and prompts[1].startswith("New Terminal Output:")
    assert "Are you sure" in prompts[2]
    assert origins(outcome)[1:] == ["model", "harness", "model", "env", "model", "harness", "model"]


async def test_the_confirming_reply_still_runs_its_commands() -> None:
    outcome, _, shell, _ = await play([act(done=True), act("echo last\n", done=True)])
    assert outcome.end_reason == "completed"
    assert shell.sent == ["echo last\n"]


# ---------------------------------------------------------------- parse errors and warnings


async def test_a_parse_error_runs_nothing_and_asks_for_a_proper_reply() -> None:
    outcome, model, shell, _ = await play(
        ["I would run echo hi now.", act("echo hi\n"), act(done=True), act(done=True)]
    )
    assert outcome.end_reason == "completed"
    assert shell.sent == ["echo hi\n"]
    feedback = last_user(model.calls[1].messages)
    assert feedback.startswith("Previous response had parsing errors:\nERROR: No valid JSON found")
    assert feedback.endswith("Please fix these issues and provide a proper JSON response.")
    bad = outcome.trajectory.messages[1]
    assert bad.origin == "model" and bad.commands == ()
    assert outcome.trajectory.messages[2].origin == "harness"


async def test_warnings_are_prepended_to_the_next_observation() -> None:
    outcome, model, _, _ = await play(
        ["Here:\n" + act("echo hi\n"), act(done=True), act(done=True)]
    )
    prompt = last_user(model.calls[1].messages)
    assert prompt.startswith(
        "Previous response had warnings:\nWARNINGS: - Extra text detected before JSON object\n\n"
        "New Terminal Output:\nroot@sandbox:/app# echo hi\nhi\n"
    )
    assert outcome.trajectory.messages[2].origin == "env"


async def test_near_json_is_run_after_auto_correction() -> None:
    outcome, model, shell, _ = await play([act("echo fixed\n")[:-1], act(done=True), act(done=True)])
    assert shell.sent == ["echo fixed\n"]
    assert "AUTO-CORRECTED: Fixed incomplete JSON" in last_user(model.calls[1].messages)
    assert outcome.end_reason == "completed"


# ---------------------------------------------------------------- durations and observations


async def test_durations_are_capped_and_waits_end_early_when_done() -> None:
    shell = FakeShell()
    outcome, _, shell, _ = await play(
        [
            act(("sleep 5\n", 30.0), ("sleep 300\n", 600.0), ("", -1.0)),
            act(done=True),
            act(done=True),
        ],
        shell=shell,
    )
    assert shell.waits == [30.0, 60.0, 0.0]  # 600 capped at 60; negative clamped to 0
    assert shell.clock == 5.0 + 60.0  # sleep 5 ended early; sleep 300 ran into the cap
    assert shell.sent == ["sleep 5\n", "sleep 300\n"]  # empty keystrokes: a plain wait
    ran = outcome.trajectory.messages[1].commands
    assert [c.duration for c in ran] == [30.0, 60.0, 0.0]


async def test_special_keys_are_sent_as_keys() -> None:
    outcome, _, shell, _ = await play([act(("sleep 100\n", 1.0), "C-c"), act(done=True), act(done=True)])
    assert shell.sent == ["sleep 100\n", "C-c"]
    assert "^C" in outcome.trajectory.messages[2].content


async def test_big_output_is_cut_to_head_and_tail() -> None:
    shell = FakeShell(files={"big.log": "".join(f"line {i}\n" for i in range(5000))})
    outcome, _, _, _ = await play([act("cat big.log\n"), act(done=True), act(done=True)], shell=shell)
    observation = outcome.trajectory.messages[2].content
    assert "line 0\n" in observation and "line 4999\n" in observation
    assert "line 2500\n" not in observation
    assert "[... output limited to 10000 bytes; " in observation
    assert len(observation.encode()) < 10200


async def test_no_new_output_repeats_the_prompt_line_as_harbor_does() -> None:
    outcome, _, _, _ = await play([act(), act(done=True), act(done=True)])
    assert outcome.trajectory.messages[2].content == "New Terminal Output:\nroot@sandbox:/app# "


# ---------------------------------------------------------------- limits


async def test_a_reply_cut_by_the_output_limit_runs_nothing() -> None:
    cut = Completion(text=act("echo a\n")[:40], finish_reason="length", usage=usage(900, 4096))
    outcome, model, shell, _ = await play([cut, act("echo b\n"), act(done=True), act(done=True)])
    assert shell.sent == ["echo b\n"]
    message = last_user(model.calls[1].messages)
    assert message.startswith("ERROR!! NONE of the actions you just requested were performed")
    # Terminus names no number for a model LiteLLM does not know; our max_new_tokens stays unseen.
    assert "the maximum output length" in message and "4096" not in message
    assert outcome.trajectory.messages[2].origin == "harness"
    assert outcome.end_reason == "completed"


async def test_max_turns_ends_the_episode() -> None:
    outcome, model, _, checkpoints = await play(
        [act("echo x\n")] * 10, config=HarnessConfig(max_turns=3)
    )
    assert outcome.end_reason == "max_turns" and outcome.turns == 3
    assert len(model.calls) == 3 and len(checkpoints) == 3
    outcome, _, _, _ = await play([act("echo x\n")] * 10, max_turns=2)
    assert outcome.turns == 2  # the spec's cap applies too


async def test_the_deadline_ends_the_episode_with_the_partial_trajectory() -> None:
    class SlowModel(ReplayModel):
        async def chat(self, messages, **kwargs):  # type: ignore[no-untyped-def, override]
            if len(self.calls) >= 2:
                await anyio.sleep(30)
            return await super().chat(messages, **kwargs)

    model = SlowModel([act("echo a\n")] * 5)
    sandbox = FakeShellSandbox()
    seen: list[int] = []
    with anyio.fail_after(5):
        outcome = await Terminus2(HarnessConfig()).run(
            spec(deadline_s=1.0), sandbox, model, checkpoint=lambda t: seen.append(len(t.messages))
        )
    assert outcome.end_reason == "timeout" and "(1 s)" in (outcome.error or "")
    assert outcome.turns == 3 and len(outcome.trajectory.messages) == 4 and seen == [2, 4]
    assert not sandbox.current.alive


async def test_the_shell_exiting_ends_the_episode() -> None:
    outcome, _, _, _ = await play([act("exit\n"), act(done=True)])
    assert outcome.end_reason == "error" and "shell exited" in (outcome.error or "")


async def test_a_broken_shell_stream_is_an_infrastructure_error_not_the_models() -> None:
    class BrokenStream(FakeShell):
        async def send(self, keys: str) -> None:
            await super().send(keys)
            if "break" in keys:  # Docker drops the exec stream under this command
                self.broken = ConnectionResetError("reset by peer")
                raise ShellClosedError("the shell's stream closed")

    model = ReplayModel([act("echo ok\n"), act("echo break\n"), act(done=True)])
    with pytest.raises(ShellClosedError) as caught:
        await Terminus2(HarnessConfig()).run(spec(), FakeShellSandbox(BrokenStream()), model)
    assert isinstance(caught.value, InfraError) and caught.value.retryable


async def test_infrastructure_errors_propagate_after_a_checkpoint() -> None:
    sandbox = FakeShellSandbox()
    model = ReplayModel([act("echo a\n"), LLMServerError("boom", status=503)])
    seen: list[int] = []
    with pytest.raises(LLMServerError):
        await Terminus2(HarnessConfig()).run(spec(), sandbox, model, checkpoint=lambda t: seen.append(1))
    assert seen == [1]
    assert not sandbox.current.alive
    aborted = Completion(text="", finish_reason="abort", usage=usage(10))
    with pytest.raises(LLMServerError, match="aborted"):
        await Terminus2(HarnessConfig()).run(spec(), FakeShellSandbox(), ReplayModel([aborted]))


# ---------------------------------------------------------------- context handoff


async def test_low_free_context_hands_off_summary_questions_answers() -> None:
    replies: list[str | Completion | BaseException] = [
        completion(act("echo found-it\n"), prompt_tokens=26000),  # 32768 - 26050 < 8000
        completion("SUMMARY: found it", prompt_tokens=27000),
        completion("QUESTIONS: where?", prompt_tokens=2500),
        completion("ANSWERS: in /app", prompt_tokens=27100),
        completion(act(done=True), prompt_tokens=3000),
        completion(act(done=True), prompt_tokens=3200),
    ]
    outcome, model, _, _ = await play(replies)
    assert outcome.end_reason == "completed" and outcome.turns == 3
    summary_call, questions_call, answers_call, resumed = model.calls[1:5]
    task_prompt = model.calls[0].messages[0]
    # The summary request extends the old context.
    assert summary_call.messages[:2] == model.calls[0].messages + (
        {"role": "assistant", "content": act("echo found-it\n")},
    )
    assert "hand off your work to another AI agent" in last_user(summary_call.messages)
    assert "Original Task: " + INSTRUCTION in last_user(summary_call.messages)
    # The questions are asked with an empty history, as Terminus asks them.
    assert len(questions_call.messages) == 1
    assert "SUMMARY: found it" in last_user(questions_call.messages)
    assert "**Current Terminal Screen:**" in last_user(questions_call.messages)
    # The old context answers them.
    assert answers_call.messages[:-1] == summary_call.messages + (
        {"role": "assistant", "content": "SUMMARY: found it"},
    )
    assert "QUESTIONS: where?" in last_user(answers_call.messages)
    # The new context: the task prompt, the questions exchange, then the handoff prompt,
    # which replaces the observation that was pending (Terminus drops it too).
    assert resumed.messages[:3] == (task_prompt, *questions_call.messages) + (
        {"role": "assistant", "content": "QUESTIONS: where?"},
    )
    first_new = last_user(resumed.messages)
    assert first_new.startswith("Here are the answers the other agent provided.\n\nANSWERS: in /app")
    assert "found-it" not in first_new
    assert origins(outcome) == [
        "task", "model",
        "harness", "model", "harness", "model", "harness", "model",  # the handoff
        "harness", "model", "harness", "model",
    ]
    assert outcome.usage.requests == 6


async def test_a_prompt_that_does_not_fit_triggers_a_handoff() -> None:
    replies: list[str | Completion | BaseException] = [
        act("echo a\n"),
        ContextLengthError("too long", status=400),
        "SUMMARY",
        "QUESTIONS",
        "ANSWERS",
        act(done=True),
        act(done=True),
    ]
    outcome, model, _, _ = await play(replies)
    assert outcome.end_reason == "completed"
    retried = last_user(model.calls[5].messages)
    # The refused prompt (an observation) is never sent again: the handoff prompt replaces it.
    assert retried.startswith("Here are the answers") and "New Terminal Output:" not in retried


async def test_the_handoff_unwinds_the_old_context_when_the_summary_does_not_fit() -> None:
    replies: list[str | Completion | BaseException] = [
        act("echo a\n"),
        act("echo b\n"),
        ContextLengthError("too long", status=400),  # the turn's prompt
        ContextLengthError("too long", status=400),  # the summary request on the full context
        "SUMMARY",  # ... fits once the latest exchange is dropped
        "QUESTIONS",
        "ANSWERS",
        act(done=True),
        act(done=True),
    ]
    outcome, model, _, _ = await play(replies)
    assert outcome.end_reason == "completed"
    assert len(model.calls[4].messages) == len(model.calls[3].messages) - 2


async def test_a_task_prompt_that_never_fits_is_a_permanent_error_not_the_models() -> None:
    # Issue 30: nothing of the model's is in the context yet, so the task cannot be
    # attempted; the engine stores a permanent error (never graded), not a `context` end.
    with pytest.raises(ContextLengthError, match="task prompt does not fit") as caught:
        await play([ContextLengthError("too long", status=400)])
    assert caught.value.permanent and not caught.value.retryable


async def test_context_that_cannot_be_recovered_ends_with_context() -> None:
    overflow = ContextLengthError("too long", status=400)
    outcome, _, _, _ = await play([act("echo a\n"), overflow, "SUMMARY", overflow])
    assert outcome.end_reason == "context" and "questions do not fit" in (outcome.error or "")
    tiny = [
        completion(act("echo a\n"), prompt_tokens=3000),
        completion("SUMMARY", prompt_tokens=3500),
        completion("QUESTIONS", prompt_tokens=2500),
        completion("ANSWERS", prompt_tokens=3600),
    ]
    outcome, _, _, _ = await play(tiny, context_length=9000)
    assert outcome.end_reason == "context" and "right after a handoff" in (outcome.error or "")


# ---------------------------------------------------------------- the registry


def test_registry() -> None:
    config = HarnessConfig()
    assert isinstance(get_harness("terminus2", config), Terminus2)
    assert get_harness("statem", config).name == "statem"
    with pytest.raises(ConfigError, match="needs a grader"):
        get_harness("rsrt", config)  # RSRT is handed its grader, never reaches for one
    with pytest.raises(ConfigError, match="unknown harness 'nope'"):
        get_harness("nope", config)


# ---------------------------------------------------------------- a multi-step task's steps


async def test_a_later_step_is_a_fresh_chat_on_the_same_terminal() -> None:
    """As Harbor runs Terminus 2 once per step of a multi-step task: the caller's shell is
    neither opened nor closed by the harness, and a ``continued`` step's first prompt shows
    what is new on that terminal (Harbor's get_incremental_output), not a fresh screen."""
    sandbox = FakeShellSandbox(FakeShell())
    shell = await sandbox.shell()
    harness = Terminus2(HarnessConfig())
    first = ReplayModel([act("echo one\n"), act(done=True), act(done=True)])
    await harness.run(spec(), sandbox, first, shell=shell)
    assert shell.alive  # left open for the next step
    await shell.send("echo from-the-background\n")  # output arriving between the steps
    await shell.wait(0.1)
    second = ReplayModel([act(done=True), act(done=True)])
    outcome = await harness.run(spec(), sandbox, second, shell=shell, continued=True)
    assert outcome.end_reason == "completed" and sandbox.shells == [shell]
    opening = second.calls[0].messages
    assert len(opening) == 1  # a fresh chat: nothing of the first step's
    state = opening[0]["content"].split("Current terminal state:\n", 1)[1]
    assert state.startswith("New Terminal Output:\n") and "from-the-background" in state
    assert "echo one" not in state  # what the first step already saw is not repeated
    # Without `continued`, the same terminal shows as a fresh screen (a first step).
    third = ReplayModel([act(done=True), act(done=True)])
    await harness.run(spec(), sandbox, third, shell=shell)
    assert "Current terminal state:\nCurrent Terminal Screen:\n" in third.calls[0].messages[0]["content"]
