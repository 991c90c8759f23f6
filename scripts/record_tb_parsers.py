"""Record terminal-bench 0.2.18's own result parsers on our test-output corpus.

Runs on demand, not in CI (terminal-bench needs Python >= 3.12). Only the parsers are
used, so the package goes in without its (heavy) dependencies, and its top-level
``__init__`` (which imports the whole harness) is bypassed:

    python3.12 -m venv /tmp/tb312 && /tmp/tb312/bin/pip install --no-deps terminal-bench==0.2.18
    /tmp/tb312/bin/python scripts/record_tb_parsers.py

Each file ``tests/tasks/fixtures/test_outputs/<parser_name>/<case>.txt`` is what a
task's ``run-tests.sh`` printed. ``ParserFactory.get_parser(ParserName(<parser_name>))``
parses it, and ``tests/tasks/fixtures/terminal_bench_parsers.json`` gets, per case, the
per-test statuses or the error, and ``resolved`` as terminal-bench's harness computes it
(``Harness._is_resolved``: every status PASSED; False when parsing failed).
``tests/tasks/test_parsers.py`` checks ours.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from importlib.metadata import version
from pathlib import Path

_spec = importlib.util.find_spec("terminal_bench")
if _spec is None or _spec.submodule_search_locations is None:
    raise SystemExit("terminal-bench is not installed (see this script's docstring)")
_package = types.ModuleType("terminal_bench")  # the package, without running its __init__
_package.__path__ = list(_spec.submodule_search_locations)
sys.modules["terminal_bench"] = _package

from terminal_bench.parsers.base_parser import UnitTestStatus  # noqa: E402
from terminal_bench.parsers.parser_factory import ParserFactory, ParserName  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "tasks" / "fixtures" / "test_outputs"
OUT = ROOT / "tests" / "tasks" / "fixtures" / "terminal_bench_parsers.json"


def main() -> int:
    cases: dict[str, dict[str, object]] = {}
    for file in sorted(CORPUS.glob("*/*.txt")):
        parser_name = file.parent.name
        parser = ParserFactory.get_parser(ParserName(parser_name))
        text = file.read_bytes().decode("utf-8")
        key = f"{parser_name}/{file.stem}"
        try:
            results = parser.parse(text)
        except Exception as exc:  # the harness records a parse error, resolved = False
            cases[key] = {"error": f"{type(exc).__name__}: {exc}", "resolved": False}
            continue
        cases[key] = {
            "results": {name: status.value for name, status in results.items()},
            "resolved": all(status == UnitTestStatus.PASSED for status in results.values()),
        }
    recording = {
        "terminal_bench": version("terminal-bench"),
        "parsers": sorted(name.value for name in ParserName),
        "cases": cases,
    }
    OUT.write_text(json.dumps(recording, indent=1, sort_keys=True) + "\n")
    print(f"{len(cases)} outputs -> {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
