"""What a model does to its own episode is the model's outcome, never infrastructure
(issue 15): replies the parser cannot even recurse into, and a model server's stalls
that are not the agent's time."""

from __future__ import annotations

from rsr_async.harness.protocol import parse_reply, refused
from rsr_async.llm.base import Completion

from .test_terminus2 import act, last_user, play

DEPTH = 100_000


def deep_replies() -> list[str]:
    return [
        '{"analysis": ' + "[" * DEPTH + "]" * DEPTH + ', "plan": "p", "commands": []}',
        '{"a":' * DEPTH + "1" + "}" * DEPTH,
        '{"analysis": "a", "plan": "p", "commands": [' + '{"k":' * DEPTH + "1" + "}" * DEPTH + "]}",
        "Here it is: " + "{" * DEPTH,  # unbalanced: the closing-brace fix makes it deep too
    ]


def test_json_nested_too_deep_is_a_parse_error() -> None:
    for text in deep_replies():
        reply = parse_reply(text)
        assert refused(reply), text[:40]
        assert reply.commands == () and not reply.task_complete


async def test_a_too_deep_reply_is_reported_to_the_model_and_the_episode_goes_on() -> None:
    # (a context large enough that the 200,000-character reply does not force a handoff)
    replies: list[str | Completion | BaseException] = [deep_replies()[0], act("echo hi\n"), act(done=True),
                                                        act(done=True)]
    outcome, model, shell, _ = await play(replies, context_length=1_000_000)
    assert outcome.end_reason == "completed" and outcome.error is None
    assert shell.sent == ["echo hi\n"]
    feedback = last_user(model.calls[1].messages)
    assert feedback.startswith("Previous response had parsing errors:\nERROR: Invalid JSON: nested too deeply")
    assert outcome.trajectory.messages[1].origin == "model"
    assert outcome.trajectory.messages[2].origin == "harness"
