"""The shared Terminus protocol: parser properties, truncation, templates, observations.

The parser's behaviour case by case is checked against Harbor's own in
``test_parser_golden.py``; the texts in ``test_texts_golden.py``.
"""

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


def test_render_names_missing_templates_and_fields() -> None:
    with pytest.raises(HarnessError, match="nope.txt"):
        render("nope")
    with pytest.raises(HarnessError, match="'terminal_state'"):
        render("confirm")


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
