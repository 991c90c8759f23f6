"""A paper-scale dry run of the whole engine, with fake sandboxes, killed and resumed.

``python -m rsr_async bench dryrun [--episodes 30000] [--concurrency 256]
[--kill-at 0.4] [--no-kill] [--sim-servers 1] [--run-dir DIR] [--json FILE]``

Everything is real except the sandboxes: the :class:`~rsr_async.engine.Engine` with its
SQLite store in one run directory, the pipeline's job graph (discover → plan → critique
→ execute → audit, through :func:`~rsr_async.rsr.runtime.open_pipeline`), the Terminus 2
harness, and the model client talking HTTP to the embedded SGLang simulator with the
scripted stand-in model (latency model set near zero, so the run is CPU-bound). The
sandboxes are the ``fake`` backend's (``sandbox.backend = "fake"``:
:class:`rsr_async.testing.FakeSandboxPool`), in-process fakes: the
harness's shell I/O on a virtual clock, and a verifier that gives full marks when the
agent typed the task's reference solution. The scripted model is a TEST DOUBLE: pass
rates here measure nothing but the engine.

**Volume.** ``--episodes`` (default 30,000: the paper's discovery + rewrite volume,
14,598 discovery + 12,893 rewrite rollouts) counts discovery plus rewrite episodes.
Discovery is the bundled tasks (36 when this was measured) × N Terminus 2 attempts. The scripted stand-in solves
about half of them under Terminus 2 (:data:`SOLVE_RATE`, measured at this scale: 53 %),
and each success is rewritten with K = 1 runbook (a draft the critic rejects is
regenerated, up to ``rsr.critic_max_retries`` = 2, and in practice every source ends
with one accepted runbook) executed M = 2 times at temperature 0.7: about one rewrite
per discovery episode. So N = ``round(episodes / (1 + K·M·0.53) / 36)``; for 30,000,
N = 405: 14,580 discovery episodes (the paper's 14,598) and about 15,500 rewrites, a
48 / 52 split against the paper's 53 / 47 (K·M = 1 would give 65 / 35; the paper's
K = M = 4 on every success, 11 / 89). Every passing rewrite gets its leak audit; the
plan, critique and audit jobs are model-only and take no sandbox. The counts reached are
in the report.

**Resume after SIGKILL.** The run happens in a subprocess (the *head*: this bench's
worker mode, ``--worker RUN_DIR``), killed with SIGKILL once ``--kill-at`` of the
episodes are stored (the parent polls the store's finished-job count, read-only, every
0.2 s), then the same command is run again on the same run directory. Reported:

- ``lost``: jobs the graph calls for (the discover jobs, plus the successors of every
  stored result under the pipeline's own :class:`~rsr_async.rsr.pipeline.RewriteGraph`)
  that are not finished in the store;
- ``duplicated``: jobs stored more than once (two rows for one stage, task, harness,
  attempt, runbook and execution);
- ``redone_after_resume``: jobs finished before the kill whose stored row (status,
  tries, finish time, result bytes) changed after the resume;
- ``orphans``: processes of the killed head (the simulator) still alive 10 s after it.

**Head process.** Peak RSS is the head's ``VmHWM`` (``/proc/PID/status``, sampled with
the store), per phase; the floor is 2 GB (exit 1 naming it when missed). CPU per
episode is the head's user + system time over both phases per episode; the
simulator's CPU is reported apart. Also: wall time, episodes/s (per phase, wall clock
from the head's start), and the store's size.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, parser  # noqa: E402

K, M = 1, 2
"""Runbooks per source and executions per runbook (see the module's docstring)."""
SOLVE_RATE = 0.53
"""The scripted stand-in's discovery pass rate under Terminus 2 on the bundled suite
(measured; it is a test double's number, used only to size the run)."""
RSS_FLOOR_BYTES = 2 * 1024**3
HEAD_REPORT = "dryrun-head.json"
"""Written by the head into the run directory when it finishes (not when killed)."""
HEAD_LOG = "dryrun-head.log"
"""The head's stderr, both phases appended (a file, not a pipe nobody reads while it runs)."""
EPISODE_STAGES = ("discover", "execute")
FINISHED = ("succeeded", "failed")
_POLL_S = 0.2
_TICK = os.sysconf("SC_CLK_TCK")


def _settings(args: argparse.Namespace, tasks: int) -> list[str]:
    attempts = max(1, round(args.episodes / (1 + K * M * SOLVE_RATE) / tasks))
    return [
        f"run.attempts={attempts}",
        f"run.concurrency={args.concurrency}",
        'run.harnesses=["terminus2"]',
        'run.stages=["discover","rewrite","verify"]',
        f"rsr.runbooks_per_source={K}",
        f"rsr.executions_per_runbook={M}",
        "sim.prefill_us_per_token=0",
        "sim.decode_us_per_token=1",
        "engine.progress=none",
        "sandbox.backend=fake",
    ]


# -------------------------------------------------------------------- the head (worker)


def _worker(args: argparse.Namespace) -> int:
    from rsr_async.config import load_config
    from rsr_async.engine.signals import run_async
    from rsr_async.rsr.commands import write_task_list
    from rsr_async.tasks.dataset import BUNDLED_SUITE, load_dataset

    dataset = load_dataset([str(BUNDLED_SUITE)])
    config = load_config([], _settings(args, len(dataset.tasks)))
    run_dir = Path(args.worker)
    run_dir.mkdir(parents=True, exist_ok=True)
    tasks_list = write_task_list(dataset.tasks, run_dir)
    started = time.monotonic()
    code, done = run_async(_head, config, dataset.tasks, run_dir, tasks_list, args.sim_servers)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    report = {
        "exit_code": code,
        "jobs_done": done,
        "wall_s": time.monotonic() - started,
        "ru_maxrss_bytes": usage.ru_maxrss * 1024,
        "cpu_s": usage.ru_utime + usage.ru_stime,
    }
    (run_dir / HEAD_REPORT).write_text(json.dumps(report) + "\n")
    return code


async def _head(config: Any, tasks: Any, run_dir: Path, tasks_list: Path, sim_servers: int) -> tuple[int, int]:
    from rsr_async.engine.signals import exit_code, shutdown_on_signals
    from rsr_async.rsr.runtime import open_pipeline

    done = 0
    async with open_pipeline(config, run_dir=run_dir, tasks_dir=tasks_list, sim_servers=sim_servers,
                             progress="none") as pipeline:
        async with shutdown_on_signals(pipeline.engine) as signals:
            async for _ in pipeline.run(tasks, stages=config.run.stages, allow_scripted=True):
                done += 1
        return exit_code(pipeline.engine.statistics(), signals), done


# -------------------------------------------------------------------- the parent


def _read_proc(pid: int) -> tuple[int, float] | None:
    """(VmHWM in bytes, user + system CPU seconds) of ``pid``; None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    hwm = next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmHWM:")), 0)
    fields = stat.rsplit(")", 1)[1].split()
    return hwm, (int(fields[11]) + int(fields[12])) / _TICK


def _children(pid: int) -> list[int]:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    found: list[int] = []
    for tid in tasks:
        try:
            found += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except FileNotFoundError:
            continue
    return found


def _finished(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
            (n,) = con.execute(
                "SELECT count(*) FROM jobs WHERE status IN ('succeeded', 'failed')"
                " AND stage IN ('discover', 'execute')"
            ).fetchone()
            return int(n)
    except sqlite3.Error:  # not created yet, or its schema not written yet
        return 0


def _phase(cmd: list[str], run_dir: Path, kill_after: int | None) -> dict[str, Any]:
    """Run the head once; SIGKILL it once ``kill_after`` episodes are stored."""
    from rsr_async.lifeline import guarded_argv

    (run_dir / HEAD_REPORT).unlink(missing_ok=True)
    log = (run_dir / HEAD_LOG).open("a")
    started = time.monotonic()
    proc = subprocess.Popen(guarded_argv(cmd), stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    hwm, cpu = 0, 0.0
    sim_cpu: dict[int, float] = {}
    killed_at: int | None = None
    try:
        while proc.poll() is None:
            time.sleep(_POLL_S)
            seen = _read_proc(proc.pid)
            if seen is not None:
                hwm, cpu = max(hwm, seen[0]), max(cpu, seen[1])
            for child in _children(proc.pid):
                if (child_seen := _read_proc(child)) is not None:
                    sim_cpu[child] = max(sim_cpu.get(child, 0.0), child_seen[1])
            if kill_after is not None and killed_at is None and (n := _finished(run_dir / "run.db")) >= kill_after:
                seen = _read_proc(proc.pid)
                if seen is not None:
                    hwm, cpu = max(hwm, seen[0]), max(cpu, seen[1])
                proc.send_signal(signal.SIGKILL)
                killed_at = n
    finally:
        if proc.poll() is None:  # this bench failed: its head must not outlive it
            proc.kill()
        proc.wait()
        log.close()
    wall = time.monotonic() - started
    orphans = _await_group(proc.pid) if killed_at is not None else 0
    result: dict[str, Any] = {
        "exit_code": proc.returncode,
        "killed_after_episodes": killed_at,
        "wall_s": round(wall, 2),
        "head_peak_rss_bytes": hwm,
        "head_cpu_s": round(cpu, 2),
        "sim_cpu_s": round(sum(sim_cpu.values()), 2),
        "orphans": orphans,
    }
    report = run_dir / HEAD_REPORT
    if report.exists():
        head = json.loads(report.read_text())
        result["head_peak_rss_bytes"] = max(hwm, head["ru_maxrss_bytes"])
        result["head_cpu_s"] = round(head["cpu_s"], 2)
        result["jobs_done"] = head["jobs_done"]
    elif killed_at is None:
        stderr = (run_dir / HEAD_LOG).read_text(errors="replace")
        raise SystemExit(f"bench dryrun: the head exited {proc.returncode} without a report:\n{stderr[-4000:]}")
    return result


def _await_group(pgid: int, timeout_s: float = 10.0) -> int:
    """Wait for the killed head's process group to empty (its simulator dies with it);
    kill and count whatever is left after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return 0
        time.sleep(0.1)
    left = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit() and _pgid(int(p.name)) == pgid)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return left


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _rows(db: Path) -> dict[str, tuple[str, int, float | None, str]]:
    """Each finished job's row: key → (status, tries, finished_at, sha256 of its result)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        return {
            key: (status, tries, finished_at, hashlib.sha256(blob or b"").hexdigest())
            for key, status, tries, finished_at, blob in con.execute(
                "SELECT key, status, tries, finished_at, result FROM jobs WHERE status IN ('succeeded', 'failed')"
            )
        }


def _check(args: argparse.Namespace, run_dir: Path, before: dict[str, tuple[str, int, float | None, str]]) -> dict[str, Any]:
    """Exactly once, nothing lost, nothing redone: see the module's docstring."""
    from rsr_async.config import load_config
    from rsr_async.engine import Job, RunReader
    from rsr_async.rsr.discover import discover_jobs
    from rsr_async.rsr.pipeline import RewriteGraph
    from rsr_async.tasks.dataset import BUNDLED_SUITE, load_dataset

    db = run_dir / "run.db"
    after = _rows(db)
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        duplicated = sum(n - 1 for (n,) in con.execute(
            "SELECT count(*) FROM jobs GROUP BY stage, task, harness, attempt, runbook, execution"
            " HAVING count(*) > 1"
        ))
        statuses = dict(con.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
        stages = {f"{stage}/{status}": n for stage, status, n in con.execute(
            "SELECT stage, status, count(*) FROM jobs GROUP BY stage, status ORDER BY stage, status")}
    tasks = load_dataset([str(BUNDLED_SUITE)]).tasks
    config = load_config([], _settings(args, len(tasks)))  # the head's own settings
    expected = {str(job.key) for job in discover_jobs(tasks, config)}
    graph = RewriteGraph(config)
    with RunReader.open_readonly(run_dir) as store:
        for row in store.rows(status=FINISHED):
            spec, result = store.spec(row.key), store.get(row.key)
            if spec is None or result is None:
                continue
            expected.update(str(job.key) for job in graph.successors(Job(key=row.job_key, spec=spec), result))
    redone = sum(1 for key, row in before.items() if after.get(key) != row)
    return {
        "tasks": len(tasks),
        "expected_jobs": len(expected),
        "finished_jobs": len(after),
        "lost": len(expected - after.keys()),
        "unexpected": len(after.keys() - expected),
        "duplicated": duplicated,
        "redone_after_resume": redone,
        "finished_before_kill": len(before),
        "statuses": statuses,
        "jobs_by_stage": stages,
    }


def main(argv: list[str]) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--episodes", type=int, default=30_000, help="discovery + rewrite episodes to aim for")
    p.add_argument("--concurrency", type=int, default=256, help="episodes at once (run.concurrency)")
    p.add_argument("--sim-servers", type=int, default=1, help="embedded simulator processes")
    p.add_argument("--kill-at", type=float, default=0.4, help="SIGKILL the head once this share of episodes is stored")
    p.add_argument("--no-kill", action="store_true", help="one uninterrupted run, no resume check")
    p.add_argument("--run-dir", help="run directory (default: a temporary one, removed after)")
    p.add_argument("--worker", metavar="RUN_DIR", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return _worker(args)
    with tempfile.TemporaryDirectory(prefix="rsr-bench-dryrun-") as tmp:
        run_dir = Path(args.run_dir or Path(tmp) / "run").resolve()
        return _parent(args, run_dir)


def _parent(args: argparse.Namespace, run_dir: Path) -> int:
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "rsr_async", "bench", "dryrun", "--worker", str(run_dir),
           "--episodes", str(args.episodes), "--concurrency", str(args.concurrency),
           "--sim-servers", str(args.sim_servers)]
    phases: list[dict[str, Any]] = []
    before: dict[str, tuple[str, int, float | None, str]] = {}
    if not args.no_kill:
        phases.append(_phase(cmd, run_dir, kill_after=max(1, int(args.episodes * args.kill_at))))
        before = _rows(run_dir / "run.db")
    phases.append(_phase(cmd, run_dir, kill_after=None))
    checking = time.monotonic()
    check = _check(args, run_dir, before)
    check_s = time.monotonic() - checking
    episodes = sum(n for key, n in check["jobs_by_stage"].items()
                   if key.split("/")[0] in EPISODE_STAGES and key.split("/")[1] in FINISHED)
    by_stage = Counter({key.split("/")[0]: 0 for key in check["jobs_by_stage"]})
    for key, n in check["jobs_by_stage"].items():
        by_stage[key.split("/")[0]] += n
    wall = sum(phase["wall_s"] for phase in phases)
    peak = max(phase["head_peak_rss_bytes"] for phase in phases)
    cpu = sum(phase["head_cpu_s"] for phase in phases)
    store_bytes = sum(f.stat().st_size for f in run_dir.glob("run.db*"))
    result: dict[str, Any] = {
        "benchmark": "dryrun",
        "model": "scripted stand-in behind the embedded simulator (a test double); fake sandboxes",
        "episodes_target": args.episodes,
        "episodes_done": episodes,
        "discover_episodes": by_stage["discover"],
        "rewrite_episodes": by_stage["execute"],
        "model_jobs": {stage: by_stage[stage] for stage in ("plan", "critique", "audit")},
        "settings": [s for s in _settings(args, check["tasks"]) if not s.startswith("engine.")],
        "wall_s": round(wall, 1),
        "episodes_per_s": round(episodes / wall, 2),
        "head_peak_rss_bytes": peak,
        "head_peak_rss_mb": round(peak / 2**20, 1),
        "head_cpu_s": round(cpu, 1),
        "head_cpu_ms_per_episode": round(1000 * cpu / max(1, episodes), 2),
        "sim_cpu_s": round(sum(phase["sim_cpu_s"] for phase in phases), 1),
        "store_bytes": store_bytes,
        "store_mb": round(store_bytes / 2**20, 1),
        "phases": phases,
        "resume": {key: check[key] for key in ("expected_jobs", "finished_jobs", "finished_before_kill",
                                                "lost", "unexpected", "duplicated", "redone_after_resume")}
        | {"orphans": sum(phase["orphans"] for phase in phases), "checked": not args.no_kill,
           "check_s": round(check_s, 1)},
        "statuses": check["statuses"],
    }
    failures = []
    if peak >= RSS_FLOOR_BYTES:
        failures.append(f"head_peak_rss_bytes {peak} >= 2 GB floor")
    bad = {key: result["resume"][key] for key in ("lost", "unexpected", "duplicated", "redone_after_resume", "orphans")
           if result["resume"][key]}
    if bad:
        failures.append(f"resume check: {bad}")
    if phases[-1]["exit_code"] != 0:
        failures.append(f"the last run of the head exited {phases[-1]['exit_code']}")
    result["failures"] = failures
    emit(result, args.json)
    for failure in failures:
        print(f"bench dryrun: {failure}", file=sys.stderr)
    return 1 if failures else 0
