from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rapidfuzz.distance import LCSseq

from rsr_async.schema import Command, Message, Trajectory
from tests.conftest import run_cli_env
from tests.native.conftest import load_impl
from tests.native.strategies import text

commands = st.lists(text, max_size=30)
# Few distinct commands, long lists: many matches, several 64-bit words per LCS row.
repetitive = st.lists(st.sampled_from(["ls", "ls\n", " ls ", "cat a", "cd /", "pwd", ""]), max_size=200)


def _norm(cmds: list[str]) -> list[str]:
    return [" ".join(c.split()) for c in cmds if c.split()]


def _trajectory(turns: list[list[str]]) -> Trajectory:
    messages = [Message(role="user", content="do it", origin="task")]
    for i, keystrokes in enumerate(turns, 1):
        messages.append(
            Message(
                role="assistant",
                content="{}",
                origin="model",
                turn=i,
                commands=tuple(Command(keystrokes=k) for k in keystrokes),
            )
        )
        messages.append(Message(role="user", content="$ ", origin="env", turn=i))
    return Trajectory(task="t", harness="terminus2", messages=messages)


def test_normalize_collapses_whitespace(similarity: ModuleType) -> None:
    assert similarity.normalize_command("  ls   -la\t/tmp \n") == "ls -la /tmp"
    assert similarity.normalize_command("") == ""
    assert similarity.normalize_command("\u3000echo\u00a0hi\u2028") == "echo hi"


def test_jaccard_values(similarity: ModuleType) -> None:
    assert similarity.command_jaccard(["ls\n", "cat a"], ["ls", "cat  a"]) == 1.0
    assert similarity.command_jaccard(["ls"], ["pwd"]) == 0.0
    assert similarity.command_jaccard(["a", "b"], ["b", "c"]) == pytest.approx(1 / 3)
    assert similarity.command_jaccard([], []) == 1.0
    assert similarity.command_jaccard(["  "], []) == 1.0  # blank commands are not commands
    assert similarity.command_jaccard(["a"], []) == 0.0


def test_order_similarity_values(similarity: ModuleType) -> None:
    sim = similarity.command_order_similarity
    assert sim(["a", "b", "c", "d"], ["b", "d", "x", "y", "z"]) == 0.4
    assert sim(["a", "b"], ["b", "a"]) == 0.5  # same set, different order
    assert sim([], []) == 1.0
    assert sim(["a"], []) == 0.0
    assert sim(["ls\n", "\n", "pwd"], ["ls", "pwd "]) == 1.0  # blank keystrokes dropped


def test_skip_first_counts_model_turns_or_entries(similarity: ModuleType) -> None:
    a = _trajectory([["cd /app\n", "ls\n"], ["cat x\n"], ["make\n"]])
    b = _trajectory([["pwd\n"], ["cat x\n"], ["make\n"]])
    assert similarity.command_jaccard(a, b) == pytest.approx(2 / 5)
    assert similarity.command_jaccard(a, b, skip_first=1) == 1.0
    assert similarity.command_order_similarity(a, b, skip_first=1) == 1.0
    # A plain sequence skips entries, and mixing the two forms works.
    assert similarity.command_order_similarity(["x", "cat x", "make"], b, skip_first=1) == 1.0
    assert similarity.command_jaccard(a, b, skip_first=10) == 1.0  # both empty


def test_pairwise_matrix_matches_pairs(similarity: ModuleType) -> None:
    items = [["a", "b", "c"], ["b", "c"], [], ["c", "a", "a"], _trajectory([["a\n", "b"]])]
    for pairwise, single in (
        (similarity.pairwise_jaccard, similarity.command_jaccard),
        (similarity.pairwise_order_similarity, similarity.command_order_similarity),
    ):
        matrix = pairwise(items)
        assert len(matrix) == len(items)
        for i, row in enumerate(matrix):
            assert row[i] == 1.0
            for j, value in enumerate(row):
                assert value == single(items[i], items[j]) == matrix[j][i]
    assert similarity.pairwise_jaccard([]) == []


def test_long_sequences_use_several_words(similarity: ModuleType) -> None:
    a = [f"cmd {i % 97}" for i in range(300)]
    b = [f"cmd {i % 89}" for i in range(250)]
    assert similarity.command_order_similarity(a, b) == LCSseq.normalized_similarity(a, b)


@pytest.mark.parametrize("bad", [None, 3, "ls", [1], ["ok", None], {"a": 1}])
def test_bad_input_raises_type_error(similarity: ModuleType, bad: object) -> None:
    for fn in (similarity.command_jaccard, similarity.command_order_similarity):
        with pytest.raises(TypeError, match=fn.__name__):
            fn(bad, ["ls"])
        with pytest.raises(TypeError, match=fn.__name__):
            fn(["ls"], bad)
    with pytest.raises(TypeError, match="normalize_command"):
        similarity.normalize_command(5)
    with pytest.raises(TypeError, match="pairwise_jaccard"):
        similarity.pairwise_jaccard([["a"], bad])
    with pytest.raises(TypeError, match="pairwise_order_similarity"):
        similarity.pairwise_order_similarity(bad if bad is not None else 3)


def test_bad_skip_first(similarity: ModuleType) -> None:
    with pytest.raises(TypeError, match="skip_first"):
        similarity.command_jaccard([], [], skip_first="1")
    with pytest.raises(TypeError, match="skip_first"):
        similarity.pairwise_order_similarity([], skip_first=None)
    with pytest.raises(ValueError, match="skip_first"):
        similarity.command_order_similarity([], [], skip_first=-1)


@settings(max_examples=150, deadline=None)
@given(st.one_of(commands, repetitive), st.one_of(commands, repetitive))
def test_order_similarity_matches_rapidfuzz(a: list[str], b: list[str]) -> None:
    expected = LCSseq.normalized_similarity(_norm(a), _norm(b))
    for kind in ("native", "pure"):
        assert load_impl("similarity", kind).command_order_similarity(a, b) == expected


@settings(max_examples=120, deadline=None)
@given(st.lists(st.one_of(commands, repetitive), max_size=8), st.integers(0, 3))
def test_native_and_pure_agree(items: list[list[str]], skip: int) -> None:
    pure = load_impl("similarity", "pure")
    native = load_impl("similarity", "native")
    assert native.pairwise_jaccard(items, skip_first=skip) == pure.pairwise_jaccard(
        items, skip_first=skip
    )
    assert native.pairwise_order_similarity(
        items, skip_first=skip
    ) == pure.pairwise_order_similarity(items, skip_first=skip)
    for a in items[:2]:
        for text_ in a:
            assert native.normalize_command(text_) == pure.normalize_command(text_)


def test_env_var_selects_pure_twin() -> None:
    code = (
        "import rsr_async._native as n; "
        "print(n.NATIVE, n.command_jaccard.__module__, n.scan_leaks.__module__, "
        "n.compress_trajectory.__module__)"
    )
    env = run_cli_env() | {"RSR_NO_EXTENSIONS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == [
        "False",
        "rsr_async._native.similarity_py",
        "rsr_async._native.leakscan_py",
        "rsr_async._native.compress_py",
    ], out.stderr
