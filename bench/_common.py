"""Shared plumbing for benchmarks: argument parsing, timing, JSON output."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--json", metavar="FILE", help="also write the JSON result here")
    p.add_argument("--repeat", type=int, default=5, help="runs per measurement (median kept)")
    return p


def median_cpu(fn: Callable[[], object], repeat: int) -> float:
    """Median process CPU time of ``repeat`` calls: steadier than wall time on a shared
    machine, and the same thing for single-threaded code."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def median_time(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``repeat`` calls of ``fn``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def emit(result: dict[str, Any], path: str | None) -> None:
    result.setdefault("machine", {"python": sys.version.split()[0], "platform": platform.platform()})
    text = json.dumps(result, indent=2, sort_keys=False)
    print(text)
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
