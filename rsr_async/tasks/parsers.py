"""Legacy terminal-bench result parsers: the test script's output → per-test pass/fail.

A task.yaml's ``parser_name`` picks one; these are the five terminal-bench 0.2.18 ships
(``terminal_bench/parsers/``), with its semantics (``scripts/record_tb_parsers.py``
records them on ``tests/tasks/fixtures/test_outputs/``; a test compares):

- ``pytest``: the lines after pytest's ``short test summary info`` banner (``-rA``), one
  ``STATUS path::test`` each. PASSED, XFAIL and SKIPPED count as passed; FAILED, XPASS
  and ERROR as failed. No banner: unparseable.
- ``swebench`` / ``sweperf``: the text between ``SWEBench results starts here`` and
  ``... ends here`` (``SWE-Perf results ...``) is ``PASSED``, or not; no markers:
  unparseable.
- ``mlebench``: the text between ``MLEBench results starts here`` and ``... ends here``
  (the whole output when the markers are absent) is ``ALL TESTS PASSED``, or not.
- ``swelancer``: ``swe lancer success`` anywhere (any case) passes; else ``swe lancer
  failure`` fails; else a mention of ``user_tool`` and ``completed`` passes.

Resolved means every parsed test passed. One deliberate difference: terminal-bench calls
an output that parses to no test at all resolved (``all([])``); here it is unparseable, so
a verification error, never a pass that no test vouched for.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["PARSERS", "grade_test_output", "parse_test_output"]

_SUMMARY_BANNER = re.compile(r"=+\s*short test summary info\s*=+", re.IGNORECASE)
_PYTEST_PASSED = frozenset({"PASSED", "XFAIL", "SKIPPED"})
_PYTEST_FAILED = frozenset({"FAILED", "XPASS", "ERROR"})


def _pytest(output: str) -> dict[str, bool]:
    parts = _SUMMARY_BANNER.split(output, maxsplit=1)
    if len(parts) < 2:
        raise ValueError("no pytest 'short test summary info' section (run pytest with -rA)")
    results: dict[str, bool] = {}
    for line in parts[1].splitlines():
        if line.startswith("FAILED"):  # "FAILED path::test - reason": drop the reason
            pieces = line.split(" - ")
            if len(pieces) > 1:
                line = " - ".join(pieces[:-1])
        fields = line.split(maxsplit=1)
        if len(fields) < 2:
            continue
        status = fields[0].strip().strip(":")
        name = fields[1].strip().split("::", 1)[-1]
        if name and (status in _PYTEST_PASSED or status in _PYTEST_FAILED):
            results[name] = status in _PYTEST_PASSED
    return results


def _between(output: str, label: str, *, required: bool) -> str:
    start, end = f"{label} results starts here", f"{label} results ends here"
    if required and (start not in output or end not in output):
        raise ValueError(f"no {label} results between {start!r} and {end!r}")
    return output.split(start, 1)[-1].rsplit(end, 1)[0].strip()


def _swebench(output: str) -> dict[str, bool]:
    return {"tests": _between(output, "SWEBench", required=True) == "PASSED"}


def _sweperf(output: str) -> dict[str, bool]:
    return {"tests": _between(output, "SWE-Perf", required=True) == "PASSED"}


def _mlebench(output: str) -> dict[str, bool]:
    return {"tests": _between(output, "MLEBench", required=False) == "ALL TESTS PASSED"}


def _swelancer(output: str) -> dict[str, bool]:
    text = output.lower()
    if "swe lancer success" in text:
        passed = True
    elif "swe lancer failure" in text:
        passed = False
    else:
        passed = "user_tool" in text and "completed" in text
    return {"swelancer_task": passed}


PARSERS: dict[str, Callable[[str], dict[str, bool]]] = {
    "pytest": _pytest,
    "swebench": _swebench,
    "swelancer": _swelancer,
    "mlebench": _mlebench,
    "sweperf": _sweperf,
}
"""terminal-bench's ``ParserName`` values, each with its parser."""


def parse_test_output(parser: str, output: str) -> dict[str, bool]:
    """Test name → passed, as ``parser`` reads ``output``. ValueError when it cannot be
    read, holds no test result, or ``parser`` is not one terminal-bench ships."""
    try:
        read = PARSERS[parser]
    except KeyError:
        raise ValueError(f"unknown parser_name {parser!r} (terminal-bench ships {', '.join(PARSERS)})") from None
    results = read(output)
    if not results:
        raise ValueError(f"the {parser} parser found no test results in the output")
    return results


def grade_test_output(parser: str, output: str) -> dict[str, float]:
    """``{"reward": 1.0 when every test passed else 0.0, "tests_passed": share passed}``."""
    results = parse_test_output(parser, output)
    passed = sum(results.values())
    return {"reward": 1.0 if passed == len(results) else 0.0, "tests_passed": passed / len(results)}
