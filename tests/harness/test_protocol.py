"""The shared Terminus protocol: reply parsing, auto-correction, templates, observations."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsr_async.errors import HarnessError
from rsr_async.harness import protocol
from rsr_async.harness.fakes import FakeShell
from rsr_async.harness.protocol import parse_reply, render, truncate_output
from rsr_async.schema import Command


def reply_json(**overrides: object) -> str:
    data: dict[str, object] = {
        "analysis": "look around",
        "plan": "list files",
        "commands": [{"keystrokes": "ls -la\n", "duration": 0.1}],
        "task_complete": False,
    }
    data.update(overrides)
    return json.dumps(data)


def test_a_proper_reply_parses_without_warnings() -> None:
    reply = parse_reply(reply_json())
    assert reply.error == ""
    assert reply.warnings == ()
    assert reply.analysis == "look around" and reply.plan == "list files"
    assert reply.commands == (Command(keystrokes="ls -la\n", duration=0.1),)
    assert reply.task_complete is False


def test_missing_duration_defaults_with_a_warning() -> None:
    reply = parse_reply(reply_json(commands=[{"keystrokes": "make\n"}]), default_duration=1.0)
    assert reply.commands == (Command(keystrokes="make\n", duration=1.0),)
    assert reply.warnings == ("Command 1: Missing duration field, using default 1.0",)


def test_invalid_duration_defaults_with_a_warning() -> None:
    reply = parse_reply(reply_json(commands=[{"keystrokes": "x\n", "duration": "soon"}]))
    assert reply.commands[0].duration == 1.0
    assert "Invalid duration value" in reply.warnings[0]


def test_extra_text_around_the_json_is_tolerated_with_warnings() -> None:
    reply = parse_reply("Sure! Here you go:\n" + reply_json() + "\nHope that helps.")
    assert reply.error == ""
    assert reply.warnings == (
        "Extra text detected before JSON object",
        "Extra text detected after JSON object",
    )
    assert reply.commands[0].keystrokes == "ls -la\n"


def test_wrong_field_order_warns() -> None:
    text = '{"commands": [], "plan": "p", "analysis": "a"}'
    reply = parse_reply(text)
    assert reply.error == ""
    assert reply.warnings == (
        "Fields appear in wrong order. Found: commands → plan → analysis, "
        "expected: analysis → plan → commands",
    )


def test_unknown_fields_warn_at_both_levels() -> None:
    text = reply_json(mood="happy", commands=[{"keystrokes": "ls\n", "duration": 0.1, "x": 1}])
    reply = parse_reply(text)
    assert reply.error == ""
    assert "Unknown fields: mood" in reply.warnings
    assert "Command 1: Unknown fields: x" in reply.warnings


def test_a_command_followed_by_another_must_end_with_newline() -> None:
    text = reply_json(commands=[{"keystrokes": "ls", "duration": 0.1}, {"keystrokes": "pwd\n", "duration": 0.1}])
    reply = parse_reply(text)
    assert reply.warnings[0].startswith("Command 1 should end with newline")
    assert len(reply.commands) == 2


def test_missing_closing_brace_is_auto_corrected() -> None:
    text = reply_json()[:-1]  # drop the final "}"
    reply = parse_reply(text)
    assert reply.error == ""
    assert reply.warnings[0] == (
        "AUTO-CORRECTED: Fixed incomplete JSON by adding missing closing brace - "
        "please fix this in future responses"
    )
    assert reply.commands[0].keystrokes == "ls -la\n"


def test_json_inside_mixed_text_is_auto_corrected() -> None:
    # The first balanced {...} is prose, so plain extraction fails; the fix finds the reply.
    text = "I will use {curly notes} here. " + reply_json()
    reply = parse_reply(text)
    assert reply.error == ""
    assert reply.warnings[0].startswith("AUTO-CORRECTED: Extracted JSON from mixed content")
    assert reply.commands[0].keystrokes == "ls -la\n"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("I will just run ls.", "No valid JSON found in response"),
        ('{"analysis": "a", "plan": "p"}', "Missing required fields: commands"),
        ('{"analysis": "a", "plan": "p", "commands": "ls"}', "Field 'commands' must be an array"),
        ('{"analysis": "a", "plan": "p", "commands": [{"duration": 1}]}',
         "Command 1 missing required 'keystrokes' field"),
        ('{"analysis": "a", "plan": "p", "commands": ["ls"]}', "Command 1 must be an object"),
        ("[1, 2]", "No valid JSON found in response"),
    ],
)
def test_unusable_replies_are_errors(text: str, error: str) -> None:
    reply = parse_reply(text)
    assert reply.error == error
    assert reply.commands == ()


def test_invalid_json_error_shows_what_was_read() -> None:
    reply = parse_reply('{"analysis": "a" "plan": "p", "commands": []}')
    assert reply.error.startswith("Invalid JSON: Expecting ',' delimiter")
    assert "| Content: " in reply.error


def test_task_complete_accepts_strings_and_lets_broken_commands_through() -> None:
    assert parse_reply(reply_json(task_complete="true")).task_complete is True
    assert parse_reply(reply_json(task_complete="no")).task_complete is False
    reply = parse_reply(reply_json(commands=["oops"], task_complete=True))
    assert reply.error == ""
    assert reply.task_complete and reply.commands == ()
    assert "Command 1 must be an object" in reply.warnings


@given(st.text(max_size=300))
def test_parse_reply_never_raises(text: str) -> None:
    reply = parse_reply(text)
    assert reply.error or reply.commands is not None


@given(
    st.lists(
        st.tuples(st.text(max_size=40).map(lambda s: s + "\n"), st.floats(0, 100)),
        max_size=5,
    ),
    st.booleans(),
)
def test_any_well_formed_reply_round_trips(commands: list[tuple[str, float]], done: bool) -> None:
    text = reply_json(
        commands=[{"keystrokes": k, "duration": d} for k, d in commands], task_complete=done
    )
    reply = parse_reply(text)
    assert reply.error == "" and reply.warnings == ()
    assert reply.commands == tuple(Command(keystrokes=k, duration=d) for k, d in commands)
    assert reply.task_complete is done


# ---------------------------------------------------------------- truncation


def test_truncation_keeps_head_and_tail_and_counts_the_rest() -> None:
    text = "H" * 6000 + "M" * 20000 + "T" * 6000
    out = truncate_output(text, 10000)
    head, marker, tail = out.partition("\n[... output limited to 10000 bytes; ")
    assert head == "H" * 5000
    assert marker
    assert tail == "22000 interior bytes omitted ...]\n" + "T" * 5000
    assert truncate_output("short", 10000) == "short"


def test_truncation_never_splits_a_character() -> None:
    text = "é" * 10000  # 2 bytes each
    out = truncate_output(text, 10001)
    head = out.split("\n[...")[0]
    assert head == "é" * 2500  # 5000 bytes; the half-character is dropped, not garbled
    omitted = len(text.encode()) - 2 * 5000
    assert f"{omitted} interior bytes omitted" in out


# ---------------------------------------------------------------- templates and messages


def test_first_prompt_has_schema_rules_instruction_and_screen() -> None:
    text = render(
        "terminus-json-plain",
        instruction="Write hello to /app/out.txt",
        terminal_state="Current Terminal Screen:\nroot@x:/app# ",
        default_duration=1.0,
        max_duration="60",
    )
    assert text.startswith("You are an AI assistant tasked with solving command-line tasks")
    assert '"keystrokes": "ls -la\\n"' in text  # doubled braces came out single
    assert "C-c for Ctrl+C" in text and "Never wait longer than 60 seconds" in text
    assert "(defaults to 1.0 if not present)" in text
    assert text.endswith(
        "Task Description:\nWrite hello to /app/out.txt\n\n"
        "Current terminal state:\nCurrent Terminal Screen:\nroot@x:/app# \n"
    )


def test_render_names_missing_templates_and_fields() -> None:
    with pytest.raises(HarnessError, match="nope.txt"):
        render("nope")
    with pytest.raises(HarnessError, match="'terminal_state'"):
        render("confirm")


def test_feedback_messages_use_terminus_wording() -> None:
    bad = parse_reply("I will run ls now.")
    assert protocol.parse_error_message(bad) == (
        "Previous response had parsing errors:\n"
        "ERROR: No valid JSON found in response\n"
        "WARNINGS: - No valid JSON object found\n\n"
        "Please fix these issues and provide a proper JSON response."
    )
    warned = parse_reply(reply_json(commands=[{"keystrokes": "ls\n"}]))
    assert protocol.with_warnings("New Terminal Output:\n\nx", warned) == (
        "Previous response had warnings:\n"
        "WARNINGS: - Command 1: Missing duration field, using default 1.0\n\n"
        "New Terminal Output:\n\nx"
    )
    assert protocol.with_warnings("obs", parse_reply(reply_json())) == "obs"
    confirm = protocol.confirm_message("Current Terminal Screen:\n$", parse_reply(reply_json()))
    assert confirm.startswith("Current terminal state:\nCurrent Terminal Screen:\n$\n\n")
    assert confirm.endswith('include "task_complete": true in your JSON response again.')
    limit = protocol.output_limit_message(4096, '{"analysis": "a", "plan', default_duration=1.0)
    assert limit.startswith("ERROR!! NONE of the actions you just requested were performed")
    assert "maximum output length of 4096 tokens" in limit


# ---------------------------------------------------------------- observations


async def test_observe_frames_new_output_or_the_screen() -> None:
    shell = FakeShell(files={"a.txt": "alpha\n"})
    shell.observe()
    await shell.send("cat a.txt\n")
    # Harbor's diff: from the previous capture's last line (here the first prompt) on.
    assert protocol.observe(shell) == "New Terminal Output:\nroot@sandbox:/app# cat a.txt\nalpha\nroot@sandbox:/app# "
    # Nothing new: Harbor repeats the last line (the screen shows only when the previous
    # capture is gone; the terminal corpus covers that with real tmux).
    assert protocol.observe(shell) == "New Terminal Output:\n\nroot@sandbox:/app# "
    assert protocol.screen_text(shell) == "Current Terminal Screen:\n" + shell.screen()


async def test_observe_truncates_big_output() -> None:
    shell = FakeShell(files={"big.txt": "x" * 30000 + "\n"})
    shell.observe()
    await shell.send("cat big.txt\n")
    text = protocol.observe(shell, 10000)
    assert text.startswith("New Terminal Output:\nroot@sandbox:/app# cat big.txt\nxxx")
    assert "interior bytes omitted" in text
    assert len(text.encode()) < 10000 + 200
