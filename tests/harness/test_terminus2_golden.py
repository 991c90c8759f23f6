"""Whole Terminus 2 episodes against Harbor 0.25.0's own agent loop.

``golden/harbor_flows.json`` was recorded by ``scripts/record_harbor_texts.py``: Harbor's
real ``Terminus2.run()`` played each scripted episode against a scripted model and a
scripted tmux session, and every model call was kept with its full history and prompt,
with every key batch sent. Here our :class:`Terminus2` plays the same script, and each
call must carry the same messages, byte for byte: the warnings shown, the parse-error
feedback, the two-step completion, the output-limit retry, and both context handoffs
(proactive, and after the server refuses a prompt), where the questions are asked
with an empty history and the pending observation gives way to the handoff prompt.

The terminal is the one stand-in: observations come from the script (what tmux showed
Harbor), because how an observation is made is another layer, checked against real
tmux in the terminal corpus. Free context is low right after a reply the script marks
``then_handoff``, in both recordings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from anyio.lowlevel import checkpoint

from rsr_async.config import HarnessConfig
from rsr_async.errors import ContextLengthError
from rsr_async.harness import Terminus2, protocol
from rsr_async.harness.fakes import FakeShellSandbox, ReplayModel, Scripted
from rsr_async.llm.base import Completion
from rsr_async.schema import EpisodeSpec, JobKey, Task, Usage

RECORD: dict[str, Any] = json.loads(
    (Path(__file__).parent / "golden" / "harbor_flows.json").read_text("utf-8")
)
FLOWS: dict[str, dict[str, Any]] = RECORD["flows"]
CONTEXT_LENGTH = 32768


class ScriptedTerminal:
    """A shell whose observations are the ones Harbor's tmux session gave in the recording."""

    def __init__(self, observations: list[str], screen: str) -> None:
        self.observations = list(observations)
        self.screen_text = screen
        self.sent: list[list[Any]] = []
        self.alive = True
        self.error: BaseException | None = None

    async def send(self, keys: str) -> None:
        await checkpoint()
        self.sent.append([keys, None])

    async def wait(self, max_s: float) -> bool:
        await checkpoint()
        self.sent[-1][1] = max_s
        return False

    def observe(self, max_bytes: int = 10000) -> str:
        return ""

    def next_observation(self, max_bytes: int = 10000) -> str:
        return self.observations.pop(0)

    def screen(self) -> str:
        return self.screen_text

    async def close(self) -> None:
        self.alive = False


def scripted_replies(flow: dict[str, Any]) -> list[Scripted]:
    replies: list[Scripted] = []
    for step in flow["replies"]:
        if step.get("finish") == "context":
            replies.append(ContextLengthError("prompt too long"))
            continue
        # Marked replies leave the context full, so the next turn hands off.
        prompt_tokens = CONTEXT_LENGTH if step.get("then_handoff") else 100
        usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=20, requests=1)
        finish = "length" if step.get("finish") == "length" else "stop"
        replies.append(Completion(text=step["text"], finish_reason=finish, usage=usage))
    return replies


def test_the_flows_were_recorded_from_harbor() -> None:
    assert RECORD["harbor"] == "0.25.0"
    assert set(FLOWS) == {
        "warnings-errors-and-completion",
        "output-limit",
        "proactive-handoff",
        "context-refused-handoff",
    }


@pytest.mark.parametrize("name", sorted(FLOWS))
async def test_episode_matches_harbor_call_for_call(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow = FLOWS[name]
    terminal = ScriptedTerminal(flow["observations"], flow["screen"])
    monkeypatch.setattr(protocol, "observe", lambda shell, max_bytes=10000: shell.next_observation())
    monkeypatch.setattr(protocol, "screen_text", lambda shell, max_bytes=10000: shell.next_observation())
    model = ReplayModel(scripted_replies(flow), context_length=CONTEXT_LENGTH)
    task = Task(name="golden", path="/tasks/golden", instruction=flow["instruction"])
    spec = EpisodeSpec(key=JobKey(stage="discover", task="golden", harness="terminus2"), task=task)

    outcome = await Terminus2(HarnessConfig()).run(
        spec, FakeShellSandbox(terminal), model  # type: ignore[arg-type]
    )

    ours = [list(call.messages) for call in model.calls]
    harbors = [[*c["history"], {"role": "user", "content": c["prompt"]}] for c in flow["calls"]]
    for index, (mine, theirs) in enumerate(zip(ours, harbors, strict=False)):
        assert mine == theirs, f"call {index} differs"
    assert len(ours) == len(harbors)
    assert terminal.sent == flow["sent"]
    assert not terminal.observations, "Harbor observed the terminal more often than we did"
    assert outcome.end_reason == "completed", outcome.error
