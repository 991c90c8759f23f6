"""Leak marks on a message: where the scanner's position points, and in the reply."""

from __future__ import annotations

import json

from rsr_async.rsr.audit import flag_values
from rsr_async.schema import Command, Leak, Message, Trajectory
from rsr_async.viewer.marks import LEAKED, RULED_DERIVABLE, FlaggedValue, mark_message, pieces


def test_pieces_cut_at_spans_and_keep_the_rest_plain() -> None:
    assert pieces("abcdef", [(1, 3, "x"), (4, 9, "y")]) == [("a", ""), ("bc", "x"), ("d", ""), ("ef", "y")]
    assert pieces("abc", [(0, 2, "x"), (1, 3, "y")]) == [("ab", "x"), ("c", "y")]  # overlap: first wins
    assert pieces("", []) == [("", "")]


def _message(keystrokes: list[str], turn: int = 1) -> Message:
    reply = {"analysis": "a", "commands": [{"keystrokes": k} for k in keystrokes]}
    return Message(role="assistant", origin="model", turn=turn, content=json.dumps(reply),
                   commands=tuple(Command(keystrokes=k) for k in keystrokes))


def test_the_scanners_position_is_marked_in_the_command_that_holds_it() -> None:
    message = _message(["echo 1 2\n", "cat k3y-77aa9 > out\n"])
    trajectory = Trajectory(task="t", harness="h", messages=[
        Message(role="user", origin="task", content="do it"), message])
    flagged = flag_values(trajectory, instruction="do it")
    leak = next(f for f in flagged if f.value == "k3y-77aa9")
    marked = mark_message(message, [FlaggedValue(leak=leak, mark=LEAKED)])
    first, second = (cut for cut, _ in marked.commands)
    assert all(mark == "" for _, mark in first)
    assert ("k3y-77aa9", LEAKED) in second and second[0] == ("cat ", "")
    assert ("k3y-77aa9", LEAKED) in marked.content and marked.reindented and marked.marks == 1


def test_a_position_that_misses_marks_every_occurrence_and_other_turns_are_untouched() -> None:
    message = _message(["echo abc\n", "echo abc\n"])
    stale = FlaggedValue(leak=Leak(value="abc", kind="token", turn=1, position=999), mark=RULED_DERIVABLE)
    marked = mark_message(message, [stale])
    assert [("abc", RULED_DERIVABLE) in cut for cut, _ in marked.commands] == [True, True]
    elsewhere = mark_message(_message(["echo abc\n"], turn=2), [stale])
    assert elsewhere.marks == 0 and all(mark == "" for _, mark in elsewhere.content)
    env = Message(role="user", origin="env", turn=1, content="abc")
    assert mark_message(env, [stale]).content == [("abc", "")]  # only what the model typed


def test_text_that_is_not_a_json_reply_is_shown_as_it_is() -> None:
    raw = Message(role="assistant", origin="model", content="  not json {", turn=0)
    assert mark_message(raw).content == [("  not json {", "")] and not mark_message(raw).reindented


def test_command_waits_are_rounded_to_milliseconds() -> None:
    message = Message(role="assistant", origin="model", content="{}", commands=(
        Command(keystrokes="make\n", duration=2.4000000000000004),
        Command(keystrokes="ls\n", duration=0.12345),
    ))
    assert [wait for _, wait in mark_message(message).commands] == [2.4, 0.123]
    assert str(mark_message(message).commands[0][1]) == "2.4"
