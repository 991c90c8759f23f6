"""``python -m rsr_async bench NAME``: run ``bench/NAME.py`` (the checkout's, or the copy a
wheel carries).

Benchmarks live in the top-level ``bench/`` folder, outside the package and outside the
test run (they measure, they do not assert). Each defines ``main(argv) -> int`` and
prints (or writes, with ``--json FILE``) one JSON document.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

from ._layout import shipped_dir
from .errors import RsrError

BENCH_DIR = shipped_dir("bench")


def available() -> list[str]:
    if not BENCH_DIR.is_dir():
        return []
    return sorted(p.stem for p in BENCH_DIR.glob("*.py") if not p.stem.startswith("_"))


def configure(parser: argparse.ArgumentParser) -> None:
    names = ", ".join(available()) or "none found"
    parser.add_argument("name", help=f"benchmark to run ({names})")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="arguments for it")


def main(args: argparse.Namespace) -> int:
    path = BENCH_DIR / f"{args.name}.py"
    if not path.is_file():
        raise RsrError(
            f"no benchmark {args.name!r} in {BENCH_DIR} "
            f"(available: {', '.join(available()) or 'none'})"
        )
    if str(BENCH_DIR) not in sys.path:
        sys.path.insert(0, str(BENCH_DIR))  # lets benchmarks import bench/_common.py
    spec = importlib.util.spec_from_file_location(f"rsr_bench_{args.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == "tests" or (exc.name or "").startswith("tests."):
            raise RsrError(
                f"benchmark {args.name!r} runs from a source checkout: it uses the test "
                "suite's helpers (tests/), which a wheel does not carry"
            ) from exc
        raise RsrError(
            f"benchmark {args.name!r} needs {exc.name!r}, which is not installed: "
            "pip install 'rsr_async[bench]'"
        ) from exc
    code: int = module.main(list(args.bench_args))
    return code
