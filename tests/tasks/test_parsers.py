"""Legacy terminal-bench parsers against terminal-bench 0.2.18's own, recorded by
``scripts/record_tb_parsers.py`` on ``fixtures/test_outputs/``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsr_async.tasks.parsers import PARSERS, grade_test_output, parse_test_output

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RECORDING = json.loads((FIXTURES / "terminal_bench_parsers.json").read_text())
CASES = sorted(RECORDING["cases"])


def test_we_ship_every_parser_terminal_bench_ships() -> None:
    assert sorted(PARSERS) == RECORDING["parsers"]
    assert {case.split("/")[0] for case in CASES} == set(PARSERS)  # each one exercised


@pytest.mark.parametrize("case", CASES)
def test_parser_matches_terminal_bench(case: str) -> None:
    expected = RECORDING["cases"][case]
    parser = case.split("/")[0]
    output = (FIXTURES / "test_outputs" / f"{case}.txt").read_bytes().decode()
    if "error" in expected or not expected["results"]:
        # terminal-bench: a parse error (unresolved), or, for an output with no test at
        # all, "resolved" (all of nothing). Both are a verifier error here, never a grade.
        with pytest.raises(ValueError, match=r"no |summary"):
            parse_test_output(parser, output)
        return
    results = parse_test_output(parser, output)
    assert results == {name: status == "passed" for name, status in expected["results"].items()}
    grade = grade_test_output(parser, output)
    assert grade["reward"] == (1.0 if expected["resolved"] else 0.0)
    assert grade["tests_passed"] == sum(results.values()) / len(results)


def test_unknown_parser_is_named() -> None:
    with pytest.raises(ValueError, match="unknown parser_name 'junit'.*pytest, swebench"):
        grade_test_output("junit", "PASSED")
