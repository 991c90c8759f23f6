"""Shared plumbing for benchmarks: argument parsing, timing, JSON output."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


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


@contextmanager
def cli_run(args: list[str], *, bench: str, timeout_s: float) -> Iterator[tuple[Path, float, dict[str, Any]]]:
    """Run ``python -m rsr_async run ARGS`` in a fresh temporary run directory; yield
    (run directory, process wall seconds, its summary.json) while the directory exists.
    Exit 4 (some episodes failed) counts as a finished run; any other failure stops the
    benchmark, naming the command and the end of its stderr."""
    with tempfile.TemporaryDirectory(prefix=f"rsr-bench-{bench}-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "rsr_async", "run", "--run-dir", str(run_dir),
               "--progress", "none", *args]
        started = time.monotonic()
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
        wall = time.monotonic() - started
        if done.returncode not in (0, 4):
            raise SystemExit(f"bench {bench}: {' '.join(cmd)} failed:\n{done.stderr[-4000:]}")
        yield run_dir, wall, json.loads((run_dir / "summary.json").read_text())
