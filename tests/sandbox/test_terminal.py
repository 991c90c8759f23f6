"""Pure terminal rules: keystrokes, clean-up, truncation, the output buffer."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyte
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsr_async.sandbox import clean_output, parse_keystrokes, truncate_output
from rsr_async.sandbox.shell import prompt_command
from rsr_async.sandbox.terminal import (
    TerminalBuffer,
    decode_control_output,
    enter_count,
    new_content,
    render_screen,
    tmux_quote,
)


@pytest.mark.parametrize(
    ("keys", "data"),
    [
        ("C-c", b"\x03"),
        ("C-d", b"\x04"),
        ("C-z", b"\x1a"),
        ("c-C", b"\x03"),
        ("^C", b"\x03"),
        ("Escape", b"\x1b"),
        ("Enter", b"\r"),
        ("Tab", b"\t"),
        ("Up", b"\x1b[A"),
        ("Down", b"\x1b[B"),
        ("Left", b"\x1b[D"),
        ("Right", b"\x1b[C"),
        ("M-x", b"\x1bx"),
        ("BSpace", b"\x7f"),
        ("F5", b"\x1b[15~"),
        ("ls -la\n", b"ls -la\r"),
        ("echo C-c\n", b"echo C-c\r"),
        ("C-c C-c", b"C-c C-c"),
        ("Enter\n", b"Enter\r"),
        ("", b""),
        ("a\r\nb\n", b"a\rb\r"),
        ("héllo", "héllo".encode()),
    ],
)
def test_keystrokes_follow_tmux_send_keys(keys: str, data: bytes) -> None:
    assert parse_keystrokes(keys) == data


def test_enter_count_counts_keys_that_end_a_line_or_a_program() -> None:
    assert enter_count(b"echo a\recho b\r") == 2
    assert enter_count(b"\x03") == 1
    assert enter_count(b"ls") == 0


def test_truncation_matches_terminus() -> None:
    assert truncate_output("short") == "short"
    exact = "y" * 10000
    assert truncate_output(exact) == exact
    text = "".join(f"line {i}\n" for i in range(5000))
    out = truncate_output(text)
    head, marker, tail = out.split("\n[... ", 1)[0], out.split("\n[...", 1)[1].split("]\n", 1)[0], out.split("...]\n", 1)[1]
    assert text.startswith(head) and len(head.encode()) == 5000
    assert text.endswith(tail) and len(tail.encode()) == 5000
    omitted = len(text.encode()) - 10000
    assert marker == f" output limited to 10000 bytes; {omitted} interior bytes omitted ..."


def test_truncation_never_splits_a_character() -> None:
    text = "é" * 6000  # 12000 bytes, two bytes each
    out = truncate_output(text, 1001)
    assert "\ufffd" not in out
    assert "interior bytes omitted" in out
    head = out.split("\n[...")[0]
    assert len(head.encode()) <= 500


def test_clean_output_removes_escapes_and_resolves_carriage_returns() -> None:
    raw = "\x1b[?2004h\x1b[1;32mok\x1b[0m\r\n 10%\r 50%\r100%\r\nab\x08c\x07\x1b]0;title\x07done\x1b(B\n"
    assert clean_output(raw) == "ok\n100%\nacdone\n"


def test_buffer_hides_markers_even_split_across_chunks() -> None:
    buffer = TerminalBuffer("tok")
    data = b"hello\r\nroot@sandbox:/# \x1b]777;tok;P0\x07"
    for i in range(len(data)):
        buffer.feed(data[i : i + 1])
    assert buffer.prompts == 1
    assert buffer.last_status == 0
    assert not buffer.printed_since_marker
    assert buffer.take_text() == "hello\nroot@sandbox:/# "
    assert buffer.screen() == "hello\nroot@sandbox:/#"
    buffer.feed(b"x")
    assert buffer.printed_since_marker
    buffer.feed(b"\x1b]777;tok;C\x07")
    assert buffer.last_kind == "C" and buffer.prompts == 1


def test_a_foreign_marker_stays_output() -> None:
    buffer = TerminalBuffer("tok")
    buffer.feed(b"a\x1b]777;other;P0\x07b")
    assert buffer.prompts == 0
    assert buffer.take_text() == "ab"


def test_buffer_memory_is_bounded_under_a_flood() -> None:
    buffer = TerminalBuffer("tok", keep_bytes=1000, screen_backlog=1000)
    chunk = b"0123456789" * 100 + b"\n"
    for _ in range(10_000):  # 10 MB
        buffer.feed(chunk)
    assert len(buffer._head) <= 1000
    assert len(buffer._tail) <= 2000
    assert len(buffer._screen_pending) <= 2000
    text = buffer.take_text()
    assert "bytes of output not kept" in text
    assert len(text) < 5000
    assert buffer.screen().endswith("0123456789")


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    buffer = TerminalBuffer("tok")
    buffer.feed(b"\xff\xfe ok \xe2\x82")  # a cut euro sign at the end
    assert buffer.take_text() == "\ufffd\ufffd ok "
    buffer.feed(b"\xac!")
    assert buffer.take_text() == "\u20ac!"


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200),
            st.sampled_from(["\r\n", "\x1b[2J", "\x1b[H", "\x1b[5;10H", "\x1b[31mred\x1b[0m", "\t",
                             "表計算", "한국어", "e\u0301", "\x1b[K", "\x08", "\x1b[3;3r"]),
        ),
        max_size=40,
    )
)
def test_render_screen_matches_pyte_display(parts: list[str]) -> None:
    screen = pyte.Screen(40, 8)
    pyte.ByteStream(screen).feed("".join(parts).encode("utf-8"))
    ours = render_screen(screen)
    try:
        theirs = screen.display
    except IndexError:  # pyte's display trips over a wide char's emptied stub; ours must not
        assert len(ours) == 8
        return
    assert ours == theirs


def test_markers_count_prompts_jobs_and_continuations() -> None:
    buffer = TerminalBuffer("tok", keep_text=False)
    buffer.feed(b"root@sandbox:/# \x1b]777;tok;P0;2\x07")
    assert (buffer.prompts, buffer.markers, buffer.last_jobs, buffer.last_status) == (1, 1, 2, 0)
    buffer.feed(b"> \x1b]777;tok;C\x07")
    assert (buffer.prompts, buffer.markers, buffer.last_kind) == (1, 2, "C")
    buffer.feed(b"x\x1b]777;tok;P1;0\x07")
    assert (buffer.markers, buffer.last_jobs, buffer.last_status) == (3, 0, 1)
    assert not buffer.has_text()  # a tmux shell keeps no text: tmux holds the pane


def test_new_content_is_harbors_find_new_content() -> None:
    # First capture: everything. Previous capture found: from its last line on, cut at
    # the offset of that line *in the previous capture* (Harbor's quirk, kept).
    assert new_content(None, "a\n") == "a\n"
    assert new_content("p$\n\n\n", "p$ ls\nx\np$\n\n") == "p$ ls\nx\np$\n\n"
    assert new_content("p$ ls\nx\np$\n\n", "p$ ls\nx\np$ echo\ny\np$\n") == "\np$ echo\ny\np$\n"
    # Gone from the history (clear, a flood, the alternate screen): None.
    assert new_content("old\nlines\n", "p$\n\n") is None


def test_control_output_decodes_tmux_escapes() -> None:
    assert decode_control_output(b"plain text") == b"plain text"
    assert decode_control_output(b"a\\134b\\015\\012\\033[0m") == b"a\\b\r\n\x1b[0m"
    assert decode_control_output("é✓".encode() + b"\\011\xff") == "é✓".encode() + b"\t\xff"


def test_tmux_quote_escapes_what_tmux_would_expand() -> None:
    assert tmux_quote('echo "$HOME" \\ ~\n') == '"echo \\"\\$HOME\\" \\\\ ~\\012"'
    assert tmux_quote("\x03é") == '"\\003é"'


def test_prompt_command_appends_the_marker_once(tmp_path: Path) -> None:
    # A real bash: the marker lands at the end of whatever PS1 the profile set, once.
    script = f'PS1="\\u@\\h:\\w\\$ "; PS2="> "; {prompt_command("tok")}; {prompt_command("tok")}; printf "%s|%s" "$PS1" "$PS2"'
    out = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True, check=True).stdout
    ps1, ps2 = out.split("|")
    assert ps1 == "\\u@\\h:\\w$ \\[\\e]777;tok;P${__rsr_s};\\j\\a\\]"
    assert ps2 == "> \\[\\e]777;tok;C\\a\\]"
