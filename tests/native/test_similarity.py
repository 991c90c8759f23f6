from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import run_cli_env
from tests.native.conftest import load_impl


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


@pytest.mark.parametrize("bad", [None, 3, "ls", [1], ["ok", None]])
def test_bad_input_raises_type_error(similarity: ModuleType, bad: object) -> None:
    with pytest.raises(TypeError, match="command_jaccard"):
        similarity.command_jaccard(bad, ["ls"])
    with pytest.raises(TypeError, match="normalize_command"):
        similarity.normalize_command(5)


@given(st.lists(st.text()), st.lists(st.text()))
def test_native_and_pure_agree(a: list[str], b: list[str]) -> None:
    pure = load_impl("similarity", "pure")
    native = load_impl("similarity", "native")
    assert native.command_jaccard(a, b) == pure.command_jaccard(a, b)
    for text in a:
        assert native.normalize_command(text) == pure.normalize_command(text) == " ".join(text.split())


def test_env_var_selects_pure_twin() -> None:
    code = "import rsr_async._native as n; print(n.NATIVE, n.command_jaccard.__module__)"
    env = run_cli_env() | {"RSR_NO_EXTENSIONS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["False", "rsr_async._native.similarity_py"], out.stderr
