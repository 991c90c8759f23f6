"""Shared plumbing for benchmarks: argument parsing, timing, JSON output."""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
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


_TICK = os.sysconf("SC_CLK_TCK")


def machine_cpu_s() -> float:
    """CPU seconds the whole machine spent busy so far (``/proc/stat``: every state but
    idle and iowait, all cores): what a run costs, Docker daemon and containers
    included, and whatever else runs meanwhile."""
    with open("/proc/stat", encoding="ascii") as fh:
        fields = fh.readline().split()[1:]
    values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
    return (sum(values) - values[3] - values[4]) / _TICK


def _process_cpu_s(pid: str) -> float:
    """A process's CPU seconds, with its reaped children's (``/proc/PID/stat``)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(v) for v in fields[11:15]) / _TICK  # utime stime cutime cstime


def docker_cpu_s() -> dict[str, float]:
    """CPU seconds so far of the Docker side of this machine: ``dockerd`` and
    ``containerd`` (with the children they reaped) and every container's processes
    (the ``docker`` cpuacct cgroup, cgroup v1 or v2; removed containers stay counted).
    Shared with any other Docker user of the machine."""
    daemons = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm", encoding="ascii", errors="replace") as fh:
                name = fh.read().strip()
        except OSError:
            continue
        if name in ("dockerd", "containerd"):
            daemons += _process_cpu_s(pid)
    containers = 0.0
    for path, scale in (("/sys/fs/cgroup/cpuacct/docker/cpuacct.usage", 1e-9),
                        ("/sys/fs/cgroup/docker/cpu.stat", 1e-6)):
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        if path.endswith("cpu.stat"):
            text = next((line.split()[1] for line in text.splitlines()
                         if line.startswith("usage_usec")), "0")
        containers = int(text.strip() or 0) * scale
        break
    return {"daemons": daemons, "containers": containers}


def cpu_sample() -> dict[str, float]:
    """Cumulative CPU counters now; :func:`cpu_delta` of two samples is a run's cost."""
    own = resource.getrusage(resource.RUSAGE_CHILDREN)
    docker = docker_cpu_s()
    return {
        "machine": machine_cpu_s(),
        "own_tree": own.ru_utime + own.ru_stime,
        "docker_daemons": docker["daemons"],
        "containers": docker["containers"],
    }


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds between two :func:`cpu_sample` s: ``machine`` (everything on every
    core), ``own_tree`` (the CLI and the simulators it started and waited for),
    ``docker_daemons`` and ``containers`` (shared with other Docker users)."""
    return {key: round(after[key] - before[key], 3) for key in before}


def load_average() -> float:
    """The 1-minute load average (how busy the shared machine was)."""
    return round(os.getloadavg()[0], 2)


@contextmanager
def cli_run(
    args: list[str], *, bench: str, timeout_s: float, checkout: Path | None = None
) -> Iterator[tuple[Path, float, dict[str, Any]]]:
    """Run ``python -m rsr_async run ARGS`` in a fresh temporary run directory; yield
    (run directory, process wall seconds, its summary.json) while the directory exists.
    Exit 4 (some episodes failed) counts as a finished run; any other failure stops the
    benchmark, naming the command and the end of its stderr.

    ``checkout`` runs another source checkout's code instead of this one (A/B
    comparisons): its ``.venv`` when it has one, else this Python with that checkout
    first on the path (``python -m`` puts the working directory first). The summary
    gets ``cpu`` (see :func:`cpu_delta`) and ``load_before`` added."""
    root = REPO if checkout is None else checkout
    python = root / ".venv" / "bin" / "python"
    executable = str(python) if checkout is not None and python.exists() else sys.executable
    with tempfile.TemporaryDirectory(prefix=f"rsr-bench-{bench}-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [executable, "-m", "rsr_async", "run", "--run-dir", str(run_dir),
               "--progress", "none", *args]
        load = load_average()
        before = cpu_sample()
        started = time.monotonic()
        done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout_s)
        wall = time.monotonic() - started
        cpu = cpu_delta(before, cpu_sample())
        if done.returncode not in (0, 4):
            raise SystemExit(f"bench {bench}: {' '.join(cmd)} failed:\n{done.stderr[-4000:]}")
        summary = json.loads((run_dir / "summary.json").read_text())
        summary["cpu"] = cpu
        summary["load_before"] = load
        yield run_dir, wall, summary
