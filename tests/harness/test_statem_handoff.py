"""StateM state survives a context handoff: after the summary, the new context is told
the current state and the moves so far (``handoff_notes``), and ``statem cur`` / ``goto``
carry on from where the old context left off (state, ticked items, history).

In-process (FakeShell, ReplayModel): the default workflow's blocking checks are
checklist items only, so no sandbox command is needed and no Docker."""

from __future__ import annotations

import json

import pytest

from rsr_async.config import HarnessConfig
from rsr_async.errors import ContextLengthError
from rsr_async.harness import Statem
from rsr_async.harness.fakes import FakeShellSandbox, ReplayModel
from rsr_async.harness.protocol import render
from rsr_async.llm.base import Completion
from rsr_async.schema import EpisodeSpec, JobKey, Task, Usage


def act(*keys: str, done: bool = False) -> str:
    commands = [{"keystrokes": k, "duration": 0.1} for k in keys]
    return json.dumps({"analysis": "a", "plan": "p", "commands": commands, "task_complete": done})


def reply(text: str, prompt_tokens: int) -> Completion:
    usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=50, requests=1)
    return Completion(text=text, finish_reason="stop", usage=usage)


# Before the handoff: leave `understand` (both items ticked) and tick `plan`'s one item,
# without moving on. After it: the new context must still be in `plan`, with the item
# ticked, or `statem goto implement` would be refused.
BEFORE = act(
    "statem check read-task\n",
    "statem check inspected-environment\n",
    "statem goto plan\n",
    "statem check wrote-plan\n",
)
AFTER = act("statem cur\n", "statem goto implement\n", "statem history\n")

Scripted = str | Completion | BaseException

TRIGGERS: dict[str, list[Scripted]] = {
    # The turn used 26,050 of 32,768 tokens: under 8,000 free, so the next turn hands off first.
    "low-free-context": [
        reply(BEFORE, 26000),
        reply("SUMMARY: in plan, plan written", 27000),
        reply("QUESTIONS: which state?", 2500),
        reply("ANSWERS: plan", 27100),
    ],
    # The next prompt is refused outright: the handoff happens on the error.
    "context-length-error": [
        BEFORE,
        ContextLengthError("too long", status=400),
        "SUMMARY: in plan, plan written",
        "QUESTIONS: which state?",
        "ANSWERS: plan",
    ],
}


@pytest.mark.parametrize("trigger", list(TRIGGERS))
async def test_statem_state_survives_a_context_handoff(trigger: str) -> None:
    before = TRIGGERS[trigger]
    model = ReplayModel([*before, AFTER, act(done=True), act(done=True)])
    task = Task(name="statem-handoff", path="/tasks/statem-handoff", instruction="Do the work.")
    key = JobKey(stage="discover", task=task.name, harness="statem")
    outcome = await Statem(HarnessConfig()).run(
        EpisodeSpec(key=key, task=task, harness="statem"), FakeShellSandbox(), model
    )
    assert outcome.end_reason == "completed", outcome.error
    assert outcome.turns == 4  # the handoff calls are not agent turns
    assert model.remaining == 0

    resumed_at = len(before)  # the first call of the new context
    resumed = model.calls[resumed_at].messages
    first_new = resumed[-1]["content"]
    assert first_new.startswith("Here are the answers the other agent provided.\n\nANSWERS: plan")
    # The old context's turns are gone from the new one (the model's own reply is not in it) ...
    assert all(m["content"] != BEFORE for m in resumed)
    # ... and the handoff re-adds the workflow text and the current state.
    intro = render("statem_intro", state="plan", prompt=load_prompt("plan"))
    resume = render("statem_resume", state="plan", moves="understand -> plan")
    assert first_new.endswith(f"\n\n{intro}\n\n{resume}")
    assert "statem goto STATE" in intro and "Current state: plan" in intro

    # After the summary the model carries on: same state, the ticked item, the history.
    after = model.calls[resumed_at + 1].messages[-1]["content"]
    assert "$ statem cur\nCurrent state: plan\n" in after
    assert "Checklist: [x] wrote-plan" in after
    assert "$ statem goto implement\nMoved to implement." in after
    assert "$ statem history\n1. understand\n2. plan\n3. implement" in after
    assert "cannot" not in after

    # The notes are harness text in the trajectory; observations carry none of it.
    messages = outcome.trajectory.messages
    harness = [m.content for m in messages if m.origin == "harness"]
    assert intro in harness and resume in harness
    assert [t.split("\n", 1)[0] for t in harness if t.startswith("$ statem ")][-3:] == [
        "$ statem cur", "$ statem goto implement", "$ statem history",
    ]
    if trigger == "low-free-context":
        # The pre-handoff turn's statem output was still pending: it follows the handoff
        # prompt. (On a refused prompt it goes with that prompt, as the observation does.)
        assert "$ statem goto plan\nMoved to plan." in first_new
    env = [m.content for m in messages if m.origin in ("env", "task")]
    assert not any("Current state:" in text or "statem goto" in text for text in env)


def load_prompt(state: str) -> str:
    return Statem(HarnessConfig()).workflow.states[state].prompt
