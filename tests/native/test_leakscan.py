from __future__ import annotations

import random
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rsr_async._native import scan_trajectory
from rsr_async.rsr.leakeval import CORPUS, load_corpus
from rsr_async.schema import Command, Leak, Message, Trajectory
from tests.native.conftest import load_impl
from tests.native.strategies import (
    long_ascii,
    number_action,
    number_screen,
    shell_action,
    text,
    wrapped_screen,
)

PROMPT_SRV = "root@box:/srv/data_7# "


@pytest.fixture(params=[None, 1, 0], ids=["widest", "avx2", "sse2"])
def simd(request: pytest.FixtureRequest) -> Iterator[int | None]:
    """The compiled modules' widest SIMD path this CPU has, AVX2 at most, then SSE2 alone:
    each must agree with the twin (a level the CPU lacks runs its best below it)."""
    level: int | None = request.param
    modules = [load_impl("leakscan", "native"), load_impl("leakjudge", "native")]
    for module in modules:
        module._simd(level)
    yield level
    for module in modules:
        module._simd(None)


@pytest.fixture(params=[None, 0, 1], ids=["lazy", "eager", "after-one"])
def indexing(request: pytest.FixtureRequest) -> Iterator[int | None]:
    """When the compiled scanner puts a text's words in its table: after the default
    number of vain searches (so in these short tests its words are only ever searched
    for), as soon as the text is observed, or after one vain search (both ways, one
    episode). Each must agree with the twin's set of words."""
    searches: int | None = request.param
    module = load_impl("leakscan", "native")
    module._index_after(searches)
    yield searches
    module._index_after(None)


def values(leaks: list[Leak]) -> list[tuple[str, str]]:
    return [(leak.value, leak.kind) for leak in leaks]


def where(leaks: list[Leak]) -> list[tuple[str, str, int, int, str]]:
    """Value, kind, turn, position and rule: everything of a flag but its sentence."""
    return [(leak.value, leak.kind, leak.turn, leak.position, leak.rule) for leak in leaks]


def test_candidate_kinds(leakscan: ModuleType) -> None:
    action = (
        "cd /app/data && python3 run.py --seed 31337 --rate 0.55 --n 1000 --id 007 "
        "--key deadbeef42 --token aZ9+_-Qx7 --name report.2024.final --v 1.2.3 "
        "echo 'p@ss!w0rd' \"hi\" x 12 ab"
    )
    assert values(leakscan.scan_leaks([action], [""])) == [
        ("/app/data", "path"),
        ("31337", "number"),  # not run.py (short, no digit), 1000 (one significant digit)
        ("0.55", "number"),
        ("deadbeef42", "hex"),
        ("aZ9+_-Qx7", "token"),
        ("report.2024.final", "identifier"),
        ("1.2.3", "number"),
        ("p@ss!w0rd", "quoted"),
    ]


def test_positions_and_turns(leakscan: ModuleType) -> None:
    leaks = leakscan.scan_leaks(["ls", "cat /etc/secret_token_file"], ["", "$ "])
    assert where(leaks) == [("/etc/secret_token_file", "path", 1, 4, "unseen-path")]
    assert leaks[0].why.startswith(
        "unseen-path: path '/etc/secret_token_file' at turn 1, character 4: a path that no "
        "public text showed"
    )
    scanner = leakscan.LeakScanner("port 8080")
    assert where(scanner.scan("curl localhost:8080 -d 'x=424242'", turn=7)) == [
        ("x=424242", "quoted", 7, 24, "unseen-part"),
        ("424242", "number", 7, 26, "unseen-number"),
    ]


def test_known_from_instruction_and_earlier_observations_only(leakscan: ModuleType) -> None:
    actions = ["cat /srv/report_2024.csv", "grep 98765 /srv/report_2024.csv", "echo 98765"]
    context = ["", "/srv/report_2024.csv\n12 rows", "total 98765"]
    leaks = leakscan.scan_leaks(actions, context, instruction="Summarise the report.")
    # The path was used before it was shown; 98765 in turn 1 before it appeared in turn 2.
    assert [(x.value, x.turn) for x in leaks] == [("/srv/report_2024.csv", 0), ("98765", 1)]
    assert leakscan.scan_leaks(actions, context, instruction="see /srv/report_2024.csv, 98765") == []


def test_token_match_not_substring(leakscan: ModuleType) -> None:
    scanner = leakscan.LeakScanner("ids: 12345, build-4242.")
    # "-" is a word character: build-4242 is known as a whole, 4242 alone is not.
    assert values(scanner.scan("echo 1234 12345 build-4242 4242")) == [
        ("1234", "number"),
        ("4242", "number"),
    ]
    # Trimming: trailing dots, slashes and dashes, and leading dots and dashes go.
    scanner = leakscan.LeakScanner("see ../app/src/ and --config_file_name.")
    assert scanner.scan("ls /app/src config_file_name") == []


def test_quoted_values_match_as_substrings(leakscan: ModuleType) -> None:
    scanner = leakscan.LeakScanner()
    scanner.observe("password is p@ss!w0rd, keep it")
    leaks = scanner.scan("echo 'p@ss!w0rd' \"hunter2?\"")
    assert where(leaks) == [("hunter2?", "quoted", 0, 18, "unseen-part")]
    assert "its part 'hunter2'" in leaks[0].why


def test_each_value_reported_once(leakscan: ModuleType) -> None:
    leaks = leakscan.scan_leaks(["echo 55555 55555", "echo 55555"], ["", "55555"])
    assert [(x.value, x.turn, x.position) for x in leaks] == [("55555", 0, 5)]


def test_unicode_actions(leakscan: ModuleType) -> None:
    # Non-ASCII characters separate words; quoted strings keep them.
    scanner = leakscan.LeakScanner("日本 31337")
    leaks = scanner.scan("echo 日本 31337 /tmp/ü/file_9 'ünïcødé!'")
    # /tmp is in every sandbox; /file_9 is not.
    assert [(x.value, x.kind, x.position) for x in leaks] == [
        ("/file_9", "path", 20),
    ]
    assert values(scanner.scan("echo 'ünï4217cødé!'")) == [("ünï4217cødé!", "quoted")]


@pytest.mark.parametrize("bad", [None, 3, b"bytes", ["x"]])
def test_bad_input_raises_type_error(leakscan: ModuleType, bad: object) -> None:
    scanner = leakscan.LeakScanner()
    with pytest.raises(TypeError, match="observe"):
        scanner.observe(bad)
    with pytest.raises(TypeError, match="scan"):
        scanner.scan(bad)
    with pytest.raises(TypeError):
        leakscan.LeakScanner(bad)
    with pytest.raises(TypeError, match="scan_leaks"):
        leakscan.scan_leaks(["ls"], [""], instruction=bad)
    with pytest.raises(TypeError, match="scan"):
        scanner.scan("ls", turn="1")
    with pytest.raises(TypeError, match="scan_leaks"):
        leakscan.scan_leaks("ls", "x")
    with pytest.raises(ValueError, match="contexts"):
        leakscan.scan_leaks(["ls", "pwd"], [""])


def test_scan_trajectory_ignores_private_and_harness_text() -> None:
    t = Trajectory(
        task="t",
        harness="terminus2",
        messages=[
            Message(role="user", content="Fix the service on port 8080.", origin="task"),
            Message(role="user", content="guidance: the key is 5f3e9a7c1d", origin="private"),
            Message(role="user", content="hint: 424242", origin="harness"),
            Message(
                role="assistant",
                content="{}",
                origin="model",
                turn=1,
                commands=(Command(keystrokes="curl :8080\n"), Command(keystrokes="echo 5f3e9a7c1d 424242\n")),
            ),
        ],
    )
    assert where(scan_trajectory(t)) == [
        ("5f3e9a7c1d", "hex", 1, 17, "unseen-hex"),
        ("424242", "number", 1, 28, "unseen-number"),
    ]
    with pytest.raises(TypeError, match="scan_trajectory"):
        scan_trajectory(None)  # type: ignore[arg-type]


episode_text = st.one_of(text, long_ascii)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(episode_text, episode_text), max_size=6),
    st.one_of(text, long_ascii),
)
def test_native_and_pure_agree(simd: int | None, indexing: int | None, turns: list[tuple[str, str]], instruction: str) -> None:
    actions = [a for a, _ in turns]
    context = [c for _, c in turns]
    native = load_impl("leakscan", "native").scan_leaks(actions, context, instruction=instruction)
    pure = load_impl("leakscan", "pure").scan_leaks(actions, context, instruction=instruction)
    assert native == pure


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60, deadline=None)
@given(st.integers(0, 130), st.integers(0, 130), st.sampled_from(["a", "9", "/", ".", "-", "f"]))
def test_block_edges_agree(simd: int | None, indexing: int | None, pad: int, length: int, fill: str) -> None:
    # Words of every length at every offset around the 64-byte blocks of the fast path.
    word = ("x9" + fill * length)[: max(length, 3)]
    known = " " * pad + word + " tail_value_12345 " + fill * length
    for kind in ("native", "pure"):
        scanner = load_impl("leakscan", kind).LeakScanner(known)
        assert scanner.scan(f"{word} tail_value_12345") == [], kind


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=80, deadline=None)
@given(
    st.integers(0, 70),
    st.lists(
        st.one_of(
            st.sampled_from(["7", "42", "a/", "0/aa", "a/aa", "123", "1.5", "-12", "/ab", "1000"]),
            st.text(alphabet="0123456789/.-a", min_size=1, max_size=4),
        ),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from([" ", "\x1b[", "\n", "  "]),
)
def test_short_words_at_block_edges_agree(simd: int | None, indexing: int | None, pad: int, words: list[str], sep: str) -> None:
    # The fast path drops words of one or two characters by mask before it looks at
    # words one by one; three-character neighbours at any offset must still be known.
    known = " " * pad + sep.join(words)
    action = " ".join(words) + " 1234 /a/b"
    results = []
    for kind in ("native", "pure"):
        module = load_impl("leakscan", kind)
        results.append(module.scan_leaks([action], [known]))
    assert results[0] == results[1]
    assert all(leak.value in ("1234", "/a/b") for leak in results[0])


# Candidates of 3 to 17 characters (the search compares 4 bytes at each end, then the
# middle), and a non-candidate.
_WORDS = ["123", "a/b9", "12345", "1.25", "x9.y/z", "deadbeef42", "long_name_x",
          "/srv/app_7/x.tar.gz", "ab9x"]
_AROUND = st.sampled_from(["", " ", "\n", ".", "-", ".-", "-.", "/", "./", "a", "9", "_",
                           "+", "~", "x.", "é", "=", "\x1b[0m"])


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(_WORDS), min_size=1, max_size=6),
    st.lists(st.tuples(_AROUND, st.sampled_from([*_WORDS, "ab9", "2345", "deadbeef4"]), _AROUND),
             max_size=8),
    st.integers(1, 4),
)
def test_whole_word_search_agrees(simd: int | None, indexing: int | None, words: list[str],
                                  shown: list[tuple[str, str, str]], turns: int) -> None:
    # The compiled scanner searches unindexed screens for an action's word: an occurrence
    # counts only when the trimmed word around it is that word (``.``/``-`` before it,
    # ``.``/``/``/``-`` after it, anything else of a word breaks it), as the twin's set.
    screens = [" ".join(a + w + b for a, w, b in shown[k::turns]) for k in range(turns)]
    actions = [" ".join(words[k:] + words[:k]) for k in range(turns)]
    _both(actions, screens)
    _both(actions[::-1], screens[::-1], instruction=screens[0])


# The second pass is compiled too (leakjudge.pyx, twin of leakjudge_py.Judge): the rules that
# search public text, read numbers and follow shell syntax must clear the same values.

def _both(actions: list[str], context: list[str], instruction: str = "") -> list[Leak]:
    native = load_impl("leakscan", "native").scan_leaks(actions, context, instruction=instruction)
    pure = load_impl("leakscan", "pure").scan_leaks(actions, context, instruction=instruction)
    assert native == pure
    return native


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=300, deadline=None)
@given(wrapped_screen(), st.lists(wrapped_screen(), max_size=3))
def test_wrapped_values_agree(simd: int | None, case: tuple[str, str], others: list[tuple[str, str]]) -> None:
    value, screen = case
    screens = [s for _, s in others] + [screen]
    _both([f"echo {v} > f" for v, _ in others] + [f"echo {value} > f"],
          ["" for _ in others] + ["\n".join(screens)])


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=200, deadline=None)
@given(st.lists(st.tuples(number_screen, number_action), min_size=1, max_size=5))
def test_computed_numbers_agree(turns: list[tuple[str, str]]) -> None:
    _both([f"python3 -c 'print({n})' && echo {n}" for _, n in turns], [s for s, _ in turns])


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=200, deadline=None)
@given(st.lists(st.tuples(shell_action, st.sampled_from(["", PROMPT_SRV, "ls\nf_1.csv in_3.csv"])),
                min_size=1, max_size=6))
def test_shell_syntax_agrees(turns: list[tuple[str, str]]) -> None:
    _both([a for a, _ in turns], [c for _, c in turns], instruction="Work in /srv.")


def test_a_repeated_screen_changes_nothing(leakscan: ModuleType) -> None:
    # An unchanged screen is not kept twice; what it showed stays known, and the numbers
    # the computed rule reads are the same.
    screen = "root@box:/app# ls\nsize 1200 of 3400 /app/data_9.csv\n"
    actions = ["cat /app/data_9.csv", "echo 4600", "cat /app/other_7.csv"]
    assert [x.value for x in leakscan.scan_leaks(actions, [screen, screen, screen])] == [
        "/app/other_7.csv"]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=300, deadline=None)
@given(st.text(alphabet="ab9.", min_size=3, max_size=40), st.text(alphabet="ab9. \n", max_size=90),
       st.text(alphabet="ab9. \n", max_size=90), st.booleans(), st.sampled_from(["", "é", "€"]))
def test_substring_search_agrees(simd: int | None, host: str, before: str, after: str, shown: bool,
                                 wide: str) -> None:
    # A URL's host is cleared when some public text holds it anywhere: the compiled
    # search (16 or 32 starts a step, a scalar tail) at every offset and length.
    screen = before + (host if shown else host[:-1]) + after + wide
    _both([f"curl http://{host}/api_v1"], [screen])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 9999), min_size=2, max_size=60), st.integers(0, 59),
       st.integers(0, 59), st.sampled_from(["+", "-", "*", "/", "%", "~", "x"]),
       st.integers(0, 3))
def test_arithmetic_of_shown_numbers_agrees(shown: list[int], i: int, j: int, op: str,
                                            places: int) -> None:
    # One step from numbers in view, at every precision: the compiled rule's C bisect
    # and the twin's must clear (and miss) the same results.
    a, b = shown[i % len(shown)], shown[j % len(shown)]
    result = {"+": a + b, "-": a - b, "*": a * b, "/": a / b, "%": 100 * a / b,
              "~": a + 0.5, "x": a * b + 7}[op]
    typed = f"{result:.{places}f}"
    _both([f"echo {typed}"], [" ".join(map(str, shown))])


def _byte_counts() -> Counter[int]:
    """Bytes of the public text (task and screens) of the labelled leak corpus and of
    ``bench native``'s generated episodes: what the compiled passes search."""
    bench = Path(__file__).resolve().parents[2] / "bench"
    sys.path.insert(0, str(bench))
    try:
        from native import make_episode  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(bench))
    rng = random.Random(2026)
    trajectories = [case.trajectory for case in load_corpus(CORPUS)]
    trajectories += [make_episode(rng, i) for i in range(12)]
    counts: Counter[int] = Counter()
    for trajectory in trajectories:
        for message in trajectory.messages:
            if message.origin in ("task", "env"):
                counts.update(message.content.encode())
    return counts


def test_both_compiled_passes_rank_bytes_with_one_table() -> None:
    # The two passes once had a table each, and they drifted apart.
    scan = load_impl("leakscan", "native")._rank_table()
    judge = load_impl("leakjudge", "native")._rank_table()
    assert len(scan) == 256 and scan == judge


def test_the_byte_ranks_follow_the_counts_on_terminal_text() -> None:
    # The table's order of the bytes it ranks as common disagrees with the measured counts
    # (a byte ranked commoner that is under half as frequent) on few pairs. The first
    # pass's old English-letter order (" etaoinsrhld...0123456789=:") broke 152 of 946.
    rank = load_impl("leakjudge", "native")._rank_table()
    counts = _byte_counts()
    common = sorted((c for c in range(256) if rank[c] > 2), key=lambda c: -rank[c])
    assert len(common) == 44
    pairs = [(a, b) for i, a in enumerate(common) for b in common[i + 1:]]
    wrong = [(chr(a), chr(b)) for a, b in pairs if counts[b] > 2 * counts[a]]
    assert len(wrong) <= len(pairs) // 20, wrong
    # Control bytes and non-ASCII are the rarest, capitals below every common byte.
    assert rank[ord("\x1b")] == rank[0xC3] == 0 and rank[ord("Q")] == 2 < rank[ord("z")]


def test_the_compiled_second_pass_replaces_only_the_kernels() -> None:
    # The rules are written once (leakjudge_py.py, compiled as _leakjudge_rules, typed by
    # its .pxd, which leakjudge subclasses):
    # the compiled Judge may override the byte-level kernels, and nothing else.
    compiled = load_impl("leakjudge", "native")
    pure = load_impl("leakjudge", "pure")
    kernels = {"_contains", "_wrapped_near", "_numbers_back", "_creates", "_computed"}
    own = {name for name in vars(compiled.Judge) if not name.startswith("__")}
    assert own == kernels
    (rules,) = compiled.Judge.__bases__
    assert rules is not pure.Judge  # the same source, compiled ...
    assert {n for n in vars(rules) if not n.startswith("__")} == {
        n for n in vars(pure.Judge) if not n.startswith("__")
    }  # ... with the same methods
    assert kernels <= set(vars(pure.Judge))
