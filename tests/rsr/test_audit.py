"""The leak audit: the scanner flags what nothing public showed; the auditor rules each value."""

from __future__ import annotations

import json

import pytest

from rsr_async.errors import ReplyFormatError
from rsr_async.llm.scripted import ROLE_AUDITOR, ScriptedModel
from rsr_async.rsr.audit import auditor_messages, flag_values, parse_audit
from rsr_async.schema import Command, Leak, Message, Trajectory

INSTRUCTION = "Sum the amounts in /app/ledger.csv and write the total to /app/total.txt."


def _model(turn: int, *keys: str) -> Message:
    return Message(role="assistant", origin="model", turn=turn, content='{"analysis": "..."}',
                   commands=tuple(Command(keystrokes=k) for k in keys))


def _env(turn: int, text: str) -> Message:
    return Message(role="user", origin="env", turn=turn, content=f"New Terminal Output:\n{text}")


def execution(*, planted: bool) -> Trajectory:
    """A guided execution; ``planted``: the total is typed before anything showed it."""
    answer = "echo 73519.25 > /app/total.txt\n" if planted else "echo 4410.5 > /app/total.txt\n"
    return Trajectory(task="ledger", harness="terminus2", messages=[
        Message(role="system", origin="private", content="RUNBOOK: the total is 73519.25, "
                "checksum 9c1e55aa01"),
        Message(role="user", origin="task", content=f"Task Description:\n{INSTRUCTION}\n\n"
                "Current terminal state:\nroot@box:/app# "),
        _model(0, "head -n 3 /app/ledger.csv\n", "mkdir -p /app/reports/daily\n"),
        _env(1, "id,amount\n1,1200.25\n2,3210.25\n"),
        _model(1, "python3 -c 'print(1200.25 + 3210.25)'\n"),
        _env(2, "4410.5\n"),
        _model(2, answer, "echo checksum 9c1e55aa01 >> /app/total.txt\n"),
        Message(role="user", origin="harness", turn=3, content="Are you sure? 777123.5"),
        _env(3, "done 9c1e55aa01\n"),
        _model(3, "cat /app/total.txt\n", "echo 777123.5\n"),
    ])


def test_a_planted_answer_is_flagged_and_a_value_shown_earlier_is_not() -> None:
    flagged = flag_values(execution(planted=True), instruction=INSTRUCTION)
    values = [leak.value for leak in flagged]
    # 1200.25 / 3210.25 were shown by the head output before turn 1 used them.
    assert "1200.25" not in values and "3210.25" not in values
    first = flagged[0]
    assert (first.value, first.kind, first.turn, first.position, first.rule) == (
        "73519.25", "number", 2, 5, "unseen-number")
    assert first.why.startswith("unseen-number: number '73519.25' at turn 2, character 5: ")
    # Private runbook text never counts as seen, nor does harness text; a value shown only
    # after the model typed it (turn 3's output) was still a leak when typed. The directory
    # the agent made (mkdir -p) is its own: no flag.
    assert values == ["73519.25", "9c1e55aa01", "777123.5"]
    clean = [leak.value for leak in flag_values(execution(planted=False), instruction=INSTRUCTION)]
    assert clean == ["9c1e55aa01", "777123.5"]  # 4410.5: printed at turn 2


def test_the_auditor_sees_only_public_text_and_the_flagged_values() -> None:
    trajectory = execution(planted=True)
    flagged = flag_values(trajectory, instruction=INSTRUCTION)
    messages = auditor_messages(instruction=INSTRUCTION, trajectory=trajectory, leaks=flagged)
    assert messages[0]["content"].startswith(ROLE_AUDITOR)
    assert '{"rulings": [{"value":' in messages[0]["content"]
    user = messages[1]["content"]
    assert "RUNBOOK" not in user and "Are you sure" not in user
    assert "$ echo 73519.25 > /app/total.txt" in user and "Terminal:\nNew Terminal Output:\n4410.5" in user
    # Each value with the scanner's reason on the line below it.
    assert ("<flagged>\n1. '73519.25' (number, turn 2)\n   flagged by unseen-number: number "
            "'73519.25' at turn 2, character 5: a number that no public text showed") in user
    assert "\n2. '9c1e55aa01' (hex, turn 2)\n   flagged by unseen-hex: " in user
    assert "\n3. '777123.5' (number, turn 3)\n   flagged by unseen-number: " in user


def test_the_scripted_auditor_rules_the_planted_leak_leaked_end_to_end() -> None:
    model = ScriptedModel({})
    for planted, leaked in ((True, {"73519.25", "9c1e55aa01", "777123.5"}),
                            (False, {"9c1e55aa01", "777123.5"})):
        trajectory = execution(planted=planted)
        flagged = flag_values(trajectory, instruction=INSTRUCTION)
        reply = model.reply(auditor_messages(instruction=INSTRUCTION, trajectory=trajectory,
                                             leaks=flagged))
        rulings = parse_audit(reply, flagged)
        assert {leak.value for leak, is_leak, _ in rulings if is_leak} == leaked
        assert {leak.value for leak, is_leak, _ in rulings if not is_leak} == set()
        assert all(why for _, _, why in rulings)


LEAKS = [Leak(value="73519.25", kind="number", turn=2, position=5),
         Leak(value="/app/out/x1", kind="path", turn=2, position=30),
         Leak(value="9c1e55aa01", kind="hex", turn=3, position=0)]


def test_parse_audit_reads_the_documented_form() -> None:
    reply = json.dumps({"rulings": [
        {"value": "73519.25", "verdict": "leaked", "reason": "never shown"},
        {"value": "/app/out/x1", "verdict": "derivable", "reason": "named by the task"},
        {"value": "9c1e55aa01", "verdict": "leaked", "reason": "a hash it did not compute"},
    ]})
    assert parse_audit(reply, LEAKS) == [(LEAKS[0], True, "never shown"),
                                         (LEAKS[1], False, "named by the task"),
                                         (LEAKS[2], True, "a hash it did not compute")]


@pytest.mark.parametrize("reply", [
    # prose, fence, trailing commas, case, quoting the value, an unruled value
    'Here you go:\n```json\n{"Rulings": [{"Value": "`73519.25`", "Verdict": "LEAKED", '
    '"Reason": "never shown",}, {"value": "/APP/OUT/X1", "verdict": "Derivable.",},],}\n```',
    # booleans and indexes instead of verdict words and values
    '{"results": [{"index": 1, "leaked": true, "why": "never shown"}, '
    '{"id": 2, "derivable": true}]}',
    # a map value -> verdict, after a reasoning block
    '<think>{"rulings": []}</think>{"rulings": {"73519.25": {"verdict": "leaked", "reason": '
    '"never shown"}, "/app/out/x1": "derivable"}}',
])
def test_parse_audit_tolerates_messy_replies_and_counts_unruled_values_as_leaked(reply: str) -> None:
    rulings = parse_audit(reply, LEAKS)
    assert [(leak.value, is_leak) for leak, is_leak, _ in rulings] == [
        ("73519.25", True), ("/app/out/x1", False), ("9c1e55aa01", True)]
    assert rulings[0][2] == "never shown"
    assert rulings[2][2] == "the auditor did not rule on it: counted as leaked"


def test_parse_audit_refuses_a_reply_with_nothing_usable() -> None:
    with pytest.raises(ReplyFormatError, match=r'expected \{"rulings".*it starts \'All fine'):
        parse_audit("All fine, nothing leaked.", LEAKS)
    with pytest.raises(ReplyFormatError, match="rules on none"):
        parse_audit('{"rulings": [{"value": "something else", "verdict": "leaked"}]}', LEAKS)
    with pytest.raises(ReplyFormatError, match="it is empty"):
        parse_audit("", LEAKS)
    assert parse_audit("", []) == []  # nothing flagged: nothing to rule on
