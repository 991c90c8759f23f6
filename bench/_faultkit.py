"""What the fault suite (``bench/faults.py``) observes, outside the engine.

Everything here reads the real parts directly: the run's SQLite file (read-only, never
through the engine), ``docker ps`` by the run's label, ``/proc`` for processes carrying
the suite's tag in their environment, and ``events.jsonl`` for the loop-lag snapshots
the engine logs. A fault's figures are judged against a fault-free baseline run of the
same episodes: the scripted stand-in is deterministic per episode key, so an episode
whose graded outcome differs from the baseline's was changed by the fault.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsr_async.lifeline import guarded_argv
from rsr_async.rsr.runtime import run_id_for

GRADED = ("succeeded", "failed")
"""Statuses that are a verdict on the model."""
STORED = (*GRADED, "infra_error")
"""Final statuses: every one is a stored result (an infra_error is kept and retryable)."""
TAG_VAR = "RSR_FAULT_SUITE_TAG"
"""Set in the environment of every run the suite starts: descendants inherit it, so a
process that outlives its run is found in ``/proc`` whatever its name."""


@dataclass(frozen=True)
class Row:
    status: str
    finished_at: float | None
    tries: int
    error: str | None


def rows(db: Path) -> dict[str, Row]:
    """Every job of ``db`` (key -> row), read without the engine; {} if there is none yet."""
    if not db.exists():
        return {}
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error:
        return {}
    try:
        found = con.execute("SELECT key, status, finished_at, tries, error FROM jobs").fetchall()
    except sqlite3.Error:
        return {}
    finally:
        con.close()
    return {key: Row(status, finished, tries, error) for key, status, finished, tries, error in found}


def final(db: Path) -> dict[str, Row]:
    """The jobs of ``db`` with a final status."""
    return {k: r for k, r in rows(db).items() if r.status in STORED}


def tagged_pids(tag: str) -> list[int]:
    """Live processes whose environment carries ``tag`` (not this process)."""
    needle = f"{TAG_VAR}={tag}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.append(int(entry.name))
        except OSError:
            continue  # gone, or a zombie (no environment left to read)
    return found


def leaked_processes(tag: str, *, wait_s: float = 10.0) -> list[str]:
    """Processes of the suite still alive ``wait_s`` after their owner ended (the kernel's
    parent-death signal needs a moment); each is killed after being counted."""
    deadline = time.monotonic() + wait_s
    pids = tagged_pids(tag)
    while pids and time.monotonic() < deadline:
        time.sleep(0.1)
        pids = tagged_pids(tag)
    described = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
        described.append(f"{pid}: {cmdline}")
    return described


def containers(run_dir: Path) -> list[str]:
    """Containers (any state) labelled with ``run_dir``'s run id."""
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=rsr_async.run={run_id_for(run_dir)}"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    return out.stdout.split()


def remove_containers(ids: list[str]) -> None:
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, timeout=120, check=False)


def loop_lag(run_dir: Path) -> tuple[float, float]:
    """(worst p99, longest stall) in ms over every progress snapshot and close record the
    engine logged in ``run_dir`` (all invocations, killed ones included)."""
    p99 = longest = 0.0
    path = run_dir / "events.jsonl"
    if not path.exists():
        return p99, longest
    with path.open("rb") as fh:
        for line in fh:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line cut by a kill
            if event.get("event") in ("progress", "close"):
                p99 = max(p99, float(event.get("loop_lag_p99_ms") or 0.0))
                longest = max(longest, float(event.get("loop_lag_max_ms") or 0.0))
    return p99, longest


@dataclass
class Launch:
    """One ``python -m rsr_async`` process of the suite, its output in a log file."""

    proc: subprocess.Popen[bytes]
    log: Path
    started: float = field(default_factory=time.monotonic)

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
            return -9

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")


def launch(args: list[str], *, log: Path, tag: str, env: dict[str, str] | None = None) -> Launch:
    """Start ``python -m rsr_async ARGS`` in its own session, tagged, behind the lifeline
    trampoline: a bench stopped midway (Ctrl-C, a kill) takes the runs it started with it
    (the same pid: the trampoline execs, so the faults still signal the run itself)."""
    environment = {**os.environ, **(env or {}), TAG_VAR: tag, "PYTHONUNBUFFERED": "1"}
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(guarded_argv([sys.executable, "-m", "rsr_async", *args]), env=environment,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    return Launch(proc=proc, log=log)


@dataclass
class Fault:
    """One fault's figures. ``expected`` are the episode keys that must end stored."""

    name: str
    group: str
    expected: set[str]
    baseline: dict[str, str]
    lost: int = 0
    duplicated: int = 0
    misblamed: int = 0
    leaked_containers: int = 0
    leaked_processes: int = 0
    stored: int = 0
    infra_errors: int = 0
    loop_stall_p99_ms: float = 0.0
    loop_stall_max_ms: float = 0.0
    seconds: float = 0.0
    checks: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def check(self, what: str, ok: bool, detail: str = "") -> bool:
        """Record one expectation about the engine's behaviour under this fault."""
        self.checks.append({"check": what, "ok": bool(ok), **({"detail": detail} if detail else {})})
        return ok

    def judge(self, end: dict[str, Row], *, earlier: Sequence[dict[str, Row]] = (),
              model_caused: bool = False) -> None:
        """Count lost, duplicated and misblamed episodes from the final store.

        ``earlier``: snapshots of the store taken after each interruption; a job final in
        one of them must be untouched at the end (else it ran twice). Under an
        infrastructure fault an episode is misblamed when its graded outcome differs from
        the baseline's; under a fault the model caused (``model_caused``) when it was
        stored as infrastructure or tried more than once.
        """
        self.stored = sum(1 for k in self.expected if k in end)
        self.lost = len(self.expected) - self.stored
        ran_twice = set()
        for snapshot in earlier:
            for key, row in snapshot.items():
                if row.status in GRADED and (key not in end or end[key].finished_at != row.finished_at):
                    ran_twice.add(key)
        self.duplicated = len(ran_twice)
        self.infra_errors = sum(1 for k in self.expected if k in end and end[k].status == "infra_error")
        wrong = []
        for key in sorted(self.expected & set(end)):
            row = end[key]
            if model_caused:
                if row.status == "infra_error" or row.tries > 1:
                    wrong.append(f"{key}: {row.status} after {row.tries} tries: {row.error}")
            elif row.status in GRADED and key in self.baseline and row.status != self.baseline[key]:
                wrong.append(f"{key}: {row.status}, fault-free {self.baseline[key]}: {row.error}")
        self.misblamed = len(wrong)
        self.notes.extend(wrong[:5])

    def passed(self, stall_floor_ms: float) -> bool:
        return (self.lost == self.duplicated == self.misblamed == 0
                and self.leaked_containers == self.leaked_processes == 0
                and self.loop_stall_p99_ms < stall_floor_ms
                and all(c["ok"] for c in self.checks))

    def as_json(self, stall_floor_ms: float) -> dict[str, Any]:
        return {
            "fault": self.name, "group": self.group, "passed": self.passed(stall_floor_ms),
            "expected": len(self.expected), "stored": self.stored, "lost": self.lost,
            "duplicated": self.duplicated, "misblamed": self.misblamed,
            "infra_errors": self.infra_errors,
            "leaked_containers": self.leaked_containers, "leaked_processes": self.leaked_processes,
            "loop_stall_p99_ms": round(self.loop_stall_p99_ms, 1),
            "loop_stall_max_ms": round(self.loop_stall_max_ms, 1),
            "seconds": round(self.seconds, 1), "checks": self.checks, "notes": self.notes,
        }
