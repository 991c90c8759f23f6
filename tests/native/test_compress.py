from __future__ import annotations

from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsr_async._native import CompressionReport
from rsr_async.harness.statem import is_statem_command
from rsr_async.schema import Command, Message, Trajectory
from tests.native.conftest import load_impl
from tests.native.strategies import long_ascii, text

SAME = "[same output as the previous observation]"


def msg(origin: str, content: str = "", *keystrokes: str, turn: int = 0) -> Message:
    role = "assistant" if origin == "model" else "user"
    commands = tuple(Command(keystrokes=k) for k in keystrokes)
    return Message(role=role, content=content, origin=origin, turn=turn, commands=commands)  # type: ignore[arg-type]


def traj(*messages: Message) -> Trajectory:
    return Trajectory(task="t", harness="statem", model="m", messages=list(messages))


def test_drops_control_text_and_keeps_the_conversation(compress: ModuleType) -> None:
    t = traj(
        msg("task", "Fix /app"),
        msg("private", "runbook: the answer is 42"),
        msg("model", "{a}", "ls\n"),
        msg("env", "file.txt"),
        msg("harness", "Are you sure? failed, try again"),
        msg("model", "{b}", "cat file.txt\n"),
        msg("env", "hello"),
    )
    out, report = compress.compress_trajectory(t)
    assert [m.content for m in out.messages] == ["Fix /app", "{a}", "file.txt", "{b}", "hello"]
    assert (out.task, out.harness, out.model) == ("t", "statem", "m")
    assert report == CompressionReport(
        messages_in=7,
        messages_out=5,
        dropped_harness=1,
        dropped_private=1,
        bytes_in=sum(len(m.content) for m in t.messages),
        bytes_out=len("Fix /app{a}file.txt{b}hello"),
        dropped=(1, 4),
    )
    assert out.messages[1] is t.messages[2]  # untouched messages are shared, not copied


def test_state_machine_turns(compress: ModuleType) -> None:
    t = traj(
        msg("model", "{1}", "statem cur\n"),
        msg("env", "state: plan"),
        msg("env", "more statem output"),
        msg("model", "{2}", "  statem goto build\n", "make\n"),
        msg("env", "built"),
        msg("model", "{3}", "statemachine --help\n"),
        msg("env", "not ours"),
    )
    out, report = compress.compress_trajectory(t)
    assert [m.content for m in out.messages] == ["{2}", "built", "{3}", "not ours"]
    assert [c.keystrokes for c in out.messages[0].commands] == ["make\n"]
    assert report.dropped_statem == 3
    assert report.statem_commands == 1
    assert report.dropped == (0, 1, 2)


# (keystrokes, the StateM harness runs them as a StateM command). The last group is where
# the harness's whole-line rule and the old "first word is statem" rule part: bash ran those.
STATEM_CASES = [
    ("statem cur\n", True),
    ("statem\n", True),
    ("statem", True),
    ("  statem goto build\n", True),
    ("statem cur && ls\n", True),
    ("statem cur\r\n", True),
    ("\nstatem next\n", True),
    ("statem cur\n\n", True),
    ("\u3000statem history\u2028", True),
    ("statemachine --help\n", False),
    ("echo statem\n", False),
    ("Statem cur\n", False),
    ("", False),
    ("\n", False),
    ("statem cur\nls\n", False),
    ("statem\tcur\n", False),
    ("statem\xa0cur\n", False),
    ("statem\x0bcur", False),
    ("statem\n\nls", False),
    ("statem check a\nstatem goto b\n", False),
]
FIRST_WORD_ONLY = [k for k, caught in STATEM_CASES if not caught and k.split(None, 1)[:1] == ["statem"]]


def test_the_statem_rule_is_the_harness_whole_line_rule() -> None:
    # Pins the harness's definition; the differing cases are all there (and there are some).
    assert [k for k, caught in STATEM_CASES if is_statem_command(k) != caught] == []
    assert len(FIRST_WORD_ONLY) == 6


def _statem_verdicts(compress: ModuleType, keystrokes: list[str]) -> list[bool]:
    """Whether ``compress_trajectory`` treats each batch as a StateM command: alone in a
    turn (the turn and its output dropped) and beside ``make`` (only it leaves)."""
    verdicts = []
    for k in keystrokes:
        alone, report = compress.compress_trajectory(traj(msg("model", "{1}", k), msg("env", "out")))
        dropped = report.dropped_statem == 2
        assert dropped == (alone.messages == [])
        mixed, report = compress.compress_trajectory(traj(msg("model", "{2}", k, "make\n")))
        assert report.statem_commands == (len(mixed.messages[0].commands) == 1)
        assert dropped == (report.statem_commands == 1)  # the same verdict both ways
        verdicts.append(dropped)
    return verdicts


def test_both_twins_use_the_harness_statem_rule(compress: ModuleType) -> None:
    keystrokes = [k for k, _ in STATEM_CASES]
    assert _statem_verdicts(compress, keystrokes) == [is_statem_command(k) for k in keystrokes]


_STATEM_PIECES = st.sampled_from(
    ["statem", "statem ", " ", "\t", "\n", "\r", "\x0b", "\xa0", "\u2028", "\u3000", "cur",
     "goto", "&&", "ls", "S", "é", "𝄞"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_STATEM_PIECES, max_size=6).map("".join), min_size=1, max_size=8))
def test_both_twins_agree_with_the_harness_on_random_batches(keystrokes: list[str]) -> None:
    harness = [is_statem_command(k) for k in keystrokes]
    assert _statem_verdicts(load_impl("compress", "pure"), keystrokes) == harness
    assert _statem_verdicts(load_impl("compress", "native"), keystrokes) == harness


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("\x1b[01;34mdir\x1b[0m", "dir"),
        ("a\x1b[?25lb\x1b[2Jc", "abc"),
        ("\x1b]0;title\x07prompt$ ", "prompt$ "),
        ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),
        ("\x1b(Bplain\x1b=\x1b>", "plain"),
        ("bad \x1b[12\nnext", "bad \nnext"),  # unterminated CSI stops at the newline
        ("end\x1b", "end"),
        ("\x1b]unterminated title", ""),
        ("keep \r\b controls", "keep \r\b controls"),
        ("no escapes at all", "no escapes at all"),
    ],
)
def test_strip_ansi(compress: ModuleType, raw: str, clean: str) -> None:
    assert compress.clean_observation(raw, max_bytes=0) == clean
    assert compress.clean_observation(raw, max_bytes=0, strip_ansi=False) == raw


def test_cut_keeps_head_and_tail_on_character_boundaries(compress: ModuleType) -> None:
    text_ = "a" * 100 + "b" * 100
    out = compress.clean_observation(text_, max_bytes=20)
    assert out == "a" * 10 + "\n[... 180 bytes omitted ...]\n" + "b" * 10
    # "é" is two bytes, "€" three: never split; the budget is a ceiling per side.
    out = compress.clean_observation("é" * 10 + "€" * 10, max_bytes=11)
    assert out == "éé" + "\n[... 40 bytes omitted ...]\n" + "€€"
    assert compress.clean_observation("short", max_bytes=5) == "short"
    assert compress.clean_observation("x" * 10_000, max_bytes=0) == "x" * 10_000


def test_collapse_repeated_observations(compress: ModuleType) -> None:
    t = traj(
        msg("model", "{1}", "sleep 5\n"),
        msg("env", "\x1b[1mwaiting\x1b[0m"),
        msg("model", "{2}", "sleep 5\n"),
        msg("env", "waiting"),  # same once cleaned, after a model turn: marker
        msg("harness", "warning"),
        msg("env", "waiting"),  # directly after the kept observation: dropped
        msg("model", "{3}", "ls\n"),
        msg("env", "done"),
    )
    out, report = compress.compress_trajectory(t)
    assert [m.content for m in out.messages] == ["{1}", "waiting", "{2}", SAME, "{3}", "done"]
    assert report.collapsed == 2
    assert report.ansi_sequences == 2
    out, report = compress.compress_trajectory(t, collapse_repeats=False)
    assert [m.content for m in out.messages].count("waiting") == 3
    assert report.collapsed == 0


def test_observation_cut_counted(compress: ModuleType) -> None:
    t = traj(msg("task", "\x1b[1mtask\x1b[0m " + "x" * 100), msg("env", "y" * 100))
    out, report = compress.compress_trajectory(t, max_observation_bytes=10)
    assert out.messages[0].content == "task " + "x" * 100  # the instruction is never cut
    assert out.messages[1].content == "yyyyy\n[... 90 bytes omitted ...]\nyyyyy"
    assert report.truncated == 1
    assert report.ansi_sequences == 2


@pytest.mark.parametrize("bad", [None, "text", 3, [("env", "x")]])
def test_bad_input_raises_type_error(compress: ModuleType, bad: object) -> None:
    with pytest.raises(TypeError, match="compress_trajectory"):
        compress.compress_trajectory(bad)
    with pytest.raises(TypeError, match="clean_observation"):
        compress.clean_observation(None if bad == "text" else bad)


def test_malformed_records_raise_type_error(compress: ModuleType) -> None:
    for messages in (
        [None],
        [Message(role="user", content=None, origin="env")],  # type: ignore[arg-type]
        [Message(role="user", content="x", origin=5)],  # type: ignore[arg-type]
        [Message(role="assistant", content="x", origin="model", commands=("ls",))],  # type: ignore[arg-type]
        [Message(role="assistant", content="", origin="model", commands=(Command(keystrokes=1),))],  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError, match="compress_trajectory"):
            compress.compress_trajectory(Trajectory(task="t", harness="h", messages=messages))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="max_observation_bytes"):
        compress.compress_trajectory(traj(), max_observation_bytes="10")
    with pytest.raises(TypeError, match="strip_ansi"):
        compress.compress_trajectory(traj(), strip_ansi=1)
    with pytest.raises(TypeError, match="collapse_repeats"):
        compress.compress_trajectory(traj(), collapse_repeats=None)


origins = st.sampled_from(["task", "model", "env", "env", "env", "harness", "private"])
keystrokes = st.lists(
    st.one_of(st.sampled_from(["statem cur\n", " statem", "statemx\n", "ls\n", "\u3000statem\tgo"]), text),
    max_size=3,
)


@st.composite
def trajectories(draw: st.DrawFn) -> Trajectory:
    messages: list[Message] = []
    for _ in range(draw(st.integers(0, 14))):
        origin = draw(origins)
        if messages and draw(st.booleans()):
            content = messages[-1].content  # repeats are what collapsing is about
        else:
            content = draw(st.one_of(text, long_ascii))
        extra = draw(keystrokes) if origin == "model" else []
        messages.append(msg(origin, content, *extra))
    return traj(*messages)


@settings(max_examples=150, deadline=None)
@given(trajectories(), st.sampled_from([0, 1, 2, 3, 7, 16, 64, 4096]), st.booleans(), st.booleans())
def test_native_and_pure_agree(t: Trajectory, limit: int, strip: bool, collapse: bool) -> None:
    native = load_impl("compress", "native")
    pure = load_impl("compress", "pure")
    kwargs = {"max_observation_bytes": limit, "strip_ansi": strip, "collapse_repeats": collapse}
    assert native.compress_trajectory(t, **kwargs) == pure.compress_trajectory(t, **kwargs)
    for m in t.messages:
        assert native.clean_observation(m.content, max_bytes=limit) == pure.clean_observation(
            m.content, max_bytes=limit
        )


def test_huge_observation_agrees() -> None:
    native = load_impl("compress", "native")
    pure = load_impl("compress", "pure")
    big = ("\x1b[32mok\x1b[0m line é€𝄞 " * 40_000) + "\x1b]0;t\x07"
    assert native.clean_observation(big) == pure.clean_observation(big)
    assert len(native.clean_observation(big).encode()) < 4200


def test_ascii_escape_heavy_observations_agree_at_every_cut() -> None:
    # Thousands of escapes (more than the reused span buffer starts with), escapes
    # straddling the head/tail boundaries and the 64-byte blocks, and runs longer and
    # shorter than the 16-byte copy blocks.
    native = load_impl("compress", "native")
    pure = load_impl("compress", "pure")
    line = "\x1b[01;34mdir_{i}\x1b[0m x\x1b]0;t\x07" + "y" * 70 + "\x1b(B{i}\n"
    big = "".join(line.format(i=i) for i in range(1500))
    assert big.isascii()
    for limit in (0, 1, 2, 3, 17, 64, 100, 4096, 65_536, len(big)):
        assert native.clean_observation(big, max_bytes=limit) == pure.clean_observation(
            big, max_bytes=limit
        )
    small = "ab\x1b[1mcd\x1b[0mef\x1b]x\x07gh" * 5
    for limit in range(len(small) + 2):
        assert native.clean_observation(small, max_bytes=limit) == pure.clean_observation(
            small, max_bytes=limit
        )
    t = traj(
        msg("model", "{}", "ls\n"), msg("env", big), msg("model", "{}", "ls\n"), msg("env", big)
    )
    assert native.compress_trajectory(t) == pure.compress_trajectory(t)


@pytest.mark.parametrize(
    "keys",
    ["statem", "statem\n", "\x1c\u3000statem\x85go", "statem\u00a0x", "statemx", "xstatem", "", " "],
)
def test_statem_first_word_rule_agrees(keys: str) -> None:
    native = load_impl("compress", "native")
    pure = load_impl("compress", "pure")
    t = traj(
        msg("model", "{}", keys, "ls\n"),
        msg("env", "out"),
        msg("model", "{}", keys),
        msg("env", "o"),
    )
    assert native.compress_trajectory(t) == pure.compress_trajectory(t)


class _TaggedMessage(Message, frozen=True):
    tag: str = ""


def test_message_subclasses_agree() -> None:
    # The compiled path reads Message slots directly only for exact Messages.
    native = load_impl("compress", "native")
    pure = load_impl("compress", "pure")
    t = traj(
        _TaggedMessage(role="user", content="\x1b[1mtask\x1b[0m", origin="task", tag="a"),
        msg("model", "{}", "statem cur\n", "ls\n"),
        _TaggedMessage(role="user", content="x" * 50 + "\x1b[0m", origin="env", tag="b"),
        msg("model", "{}", "ls\n"),
        _TaggedMessage(role="user", content="x" * 50, origin="env", tag="c"),
    )
    got = native.compress_trajectory(t, max_observation_bytes=20)
    assert got == pure.compress_trajectory(t, max_observation_bytes=20)
    assert all(type(m) is type(o) for m, o in zip(got[0].messages, t.messages, strict=False))
    assert got[0].messages[2].tag == "b"


@pytest.mark.parametrize(
    "seq",
    [
        "\x1b[m",
        "\x1b[0m",
        "\x1b[01;34;48;5;231;1;2;3;4m",  # parameters past the 16-byte window
        "\x1b[1;2 !q",  # intermediates then a final
        "\x1b[12 \x1b[3m",  # no final: ends at the next ESC
        "\x1b[" + " " * 20 + "m",  # intermediates past the window
        "\x1b[12\x7f",  # DEL is no final
        "\x1b[?25h",
        "\x1b]0;t\x1b[1m\x07",  # an ESC inside a string sequence belongs to it
        "\x1b]8;;u\x1b\\",
    ],
)
def test_escape_kinds_at_every_offset_agree(seq: str) -> None:
    native = load_impl("compress", "native")
    pure = load_impl("compress", "pure")
    for pad in range(70):  # every position in and across a 64-byte block, and at the end
        for text_ in ("a" * pad + seq + "tail" * 20, "a" * pad + seq, "b" * pad + seq + seq):
            assert native.clean_observation(text_, max_bytes=0) == pure.clean_observation(
                text_, max_bytes=0
            )
            t = traj(msg("env", text_))
            assert native.compress_trajectory(t) == pure.compress_trajectory(t)


def test_observation_with_more_escapes_than_the_kept_buffer_agrees() -> None:
    # Past 65536 escapes the compiled path hands its span buffer back after the call;
    # the calls after it start a new one.
    native = load_impl("compress", "native")
    pure = load_impl("compress", "pure")
    huge = "x\x1b[1m" * 70_000 + "end"
    for _ in range(2):
        assert native.clean_observation(huge) == pure.clean_observation(huge)
        assert native.clean_observation("a\x1b[0mb" * 50, max_bytes=0) == "ab" * 50
