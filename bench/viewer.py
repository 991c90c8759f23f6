"""Viewer benchmark: every page's latency over HTTP on a store of 100,000 jobs.

``python -m rsr_async bench viewer [--jobs N] [--run-dir DIR] [--json FILE] [--repeat N]``

A synthetic run (``--jobs``, 100,000 by default: discover episodes of three harnesses,
their plan, critique, execute and audit jobs, a few infrastructure errors and cancels,
trajectories of ~12 turns) is written through a real :class:`Store` into ``--run-dir``
(kept and reused when given, else a temporary directory). A :class:`ViewerServer` then
serves it on 127.0.0.1 and each page is fetched ``--repeat`` times (median kept): the
overview, job lists under each filter (common and rare statuses, domain, a late page),
a task, a trajectory, a source with its rewrites, a 404.

Baseline, in the same run: the job list computed the obvious way, ``store.rows()`` of
every job filtered and cut in Python (no HTTP, no rendering), for the same filters.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import emit, parser  # noqa: E402

from rsr_async.engine import Job, RunReader, Store  # noqa: E402
from rsr_async.schema import (  # noqa: E402
    AuditResult,
    Command,
    CritiqueResult,
    EpisodeResult,
    EpisodeSpec,
    JobKey,
    JobStatus,
    Leak,
    Message,
    PlanResult,
    Runbook,
    Task,
    Trajectory,
    Usage,
    Verdict,
)
from rsr_async.viewer import PAGE_SIZE, ViewerServer  # noqa: E402

HARNESSES = ("terminus2", "statem", "rsrt")
ATTEMPTS = 15
DOMAINS = ("data-processing", "system-administration", "security", "software-engineering")


def _trajectory(task: str, harness: str, rng: random.Random, turns: int = 12) -> Trajectory:
    trajectory = Trajectory(task=task, harness=harness, model="bench")
    trajectory.messages.append(Message(role="user", content="Do the task. " * 40, origin="task"))
    for turn in range(turns):
        command = f"cat /app/data/file{rng.randrange(100)}.csv | head -n {rng.randrange(5, 50)}\n"
        trajectory.messages.append(Message(
            role="assistant", origin="model", turn=turn, at=turn * 3.0,
            content=json.dumps({"analysis": "look", "plan": "read", "commands": [{"keystrokes": command}]}),
            usage=Usage(prompt_tokens=1000 + 300 * turn, completion_tokens=80,
                        cached_tokens=900 + 290 * turn, latency_s=0.8, requests=1),
            commands=(Command(keystrokes=command),),
        ))
        output = "\n".join(f"{rng.random():.6f},{rng.randrange(10**6)}" for _ in range(30))
        trajectory.messages.append(Message(role="user", origin="env", turn=turn, at=turn * 3.0 + 1,
                                           content="New Terminal Output:\n" + output))
    return trajectory


def _status(rng: random.Random, success: float) -> JobStatus:
    roll = rng.random()
    if roll < 0.002:
        return "cancelled"
    if roll < 0.01:
        return "infra_error"
    return "succeeded" if roll < success else "failed"


def build(run_dir: Path, jobs: int, seed: int = 7) -> int:
    """Write a synthetic run of about ``jobs`` jobs; returns how many were written."""
    rng = random.Random(seed)
    n = 0
    with Store.open(run_dir, config={"run": {"attempts": ATTEMPTS}}, events=False) as store:
        t = 0
        while n < jobs:
            task = Task(name=f"task-{t:04d}", path=f"/tasks/task-{t:04d}", instruction="Do it. " * 30,
                        category=DOMAINS[t % len(DOMAINS)])
            t += 1
            for harness in HARNESSES:
                for attempt in range(ATTEMPTS):
                    key = JobKey(stage="discover", task=task.name, harness=harness, attempt=attempt)
                    status = _status(rng, 0.33)
                    store.put_result(
                        EpisodeResult(key=key, status=status, reward=float(status == "succeeded"),
                                      trajectory=_trajectory(task.name, harness, rng), turns=12),
                        job=Job.episode(EpisodeSpec(key=key, task=task, harness=harness)), wait=False)
                    n += 1
                    if status != "succeeded":
                        continue
                    for index in range(4):
                        runbook = f"r{index}d0"
                        moved = {"task": task.name, "harness": harness, "attempt": attempt, "runbook": runbook}
                        text = "## End state\n" + "Check the output. " * 60
                        store.put_result(PlanResult(
                            key=JobKey(stage="plan", **moved), status="succeeded", reply=text,
                            runbook=Runbook(id=runbook, task=task.name, source_key=str(key), index=index,
                                            text=text)), wait=False)
                        store.put_result(CritiqueResult(
                            key=JobKey(stage="critique", **moved), status="succeeded",
                            verdict=Verdict(subject=runbook, accepted=True, stage="judge")), wait=False)
                        n += 2
                        for execution in range(4):
                            ekey = JobKey(stage="execute", execution=execution, **moved)
                            estatus = _status(rng, 0.7)
                            spec = EpisodeSpec(key=ekey, task=task, harness="terminus2", guidance=text)
                            store.put_result(EpisodeResult(
                                key=ekey, status=estatus, reward=float(estatus == "succeeded"),
                                trajectory=_trajectory(task.name, "terminus2", rng), turns=12),
                                job=Job.episode(spec), wait=False)
                            n += 1
                            if estatus != "succeeded":
                                continue
                            leaks = (Leak(value="s3cret", kind="token", turn=3, position=4),) if rng.random() < 0.1 else ()
                            store.put_result(AuditResult(
                                key=JobKey(stage="audit", execution=execution, **moved), status="succeeded",
                                flagged=leaks, verdict=Verdict(subject=str(ekey), accepted=not leaks,
                                                               stage="audit", leaks=leaks)), wait=False)
                            n += 1
            store.flush(timeout=600)
    return n


def _pages(store: RunReader) -> dict[str, str]:
    source = store.rows(stage="discover", status="succeeded", limit=1)[0]
    execution = store.rows(stage="execute", status="succeeded", limit=1)[0]
    middle = store.rows(stage="execute", limit=1, after="execute/task-0050")[0].key
    return {
        "overview": "/",
        "overview, domain filter": "/?domain=security",
        "overview, page 3, harness filter": "/?page=3&harness=rsrt",
        "jobs": "/jobs",
        "jobs, stage": "/jobs?stage=execute",
        "jobs, stage + common status": "/jobs?stage=execute&status=succeeded",
        "jobs, stage + rare status": "/jobs?stage=execute&status=cancelled",
        "jobs, common status": "/jobs?status=failed",
        "jobs, rare status": "/jobs?status=infra_error",
        "jobs, harness": "/jobs?harness=statem",
        "jobs, domain": "/jobs?domain=security",
        "jobs, domain + stage + harness + status": "/jobs?domain=security&stage=execute&harness=rsrt&status=failed",
        "jobs, late page": f"/jobs?stage=execute&after={middle}",
        "jobs, previous page": f"/jobs?stage=execute&before={middle}",
        "task": f"/task/{source.task}",
        "trajectory": f"/job/{execution.key}",
        "source": f"/source/{source.key}",
        "unknown key (404)": "/job/discover/nope/-/a0/-/e-1",
    }


def _baseline(store: RunReader, query: dict[str, str]) -> float:
    """The job list the obvious way: every row, filtered in Python, cut to a page."""
    start = time.perf_counter()
    categories = {name: spec.task.category for name, spec in store.task_specs(stage="discover").items()}
    rows = [
        row for row in store.rows()
        if all(
            (categories.get(row.task) if name == "domain" else getattr(row, name)) == value
            for name, value in query.items()
        )
    ]
    _ = rows[:PAGE_SIZE]
    return time.perf_counter() - start


async def measure(run_dir: Path, repeat: int) -> dict[str, Any]:
    pages: dict[str, Any] = {}
    async with ViewerServer(run_dir) as server, aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=120)
    ) as session:
        store = RunReader.open_readonly(run_dir)
        try:
            paths = _pages(store)
            for name, path in paths.items():
                times, status, size = [], 0, 0
                for _ in range(repeat + 1):  # the first fetch warms the page cache; not kept
                    start = time.perf_counter()
                    async with session.get(server.url.rstrip("/") + path) as response:
                        body = await response.read()
                    times.append(time.perf_counter() - start)
                    status, size = response.status, len(body)
                pages[name] = {"path": path, "status": status, "bytes": size,
                               "median_ms": round(statistics.median(times[1:]) * 1000, 1)}
            baseline = {}
            for name, query in {
                "jobs, stage + rare status": {"stage": "execute", "status": "cancelled"},
                "jobs, common status": {"status": "failed"},
                "jobs, domain": {"domain": "security"},
            }.items():
                times = [await anyio.to_thread.run_sync(_baseline, store, query) for _ in range(repeat)]
                baseline[name] = {"median_ms": round(statistics.median(times) * 1000, 1),
                                  "viewer_ms": pages[name]["median_ms"]}
        finally:
            store.close()
    return {"pages": pages, "baseline_full_scan": baseline,
            "slowest_page_ms": max(p["median_ms"] for p in pages.values())}


def main(argv: list[str]) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=100_000, help="jobs in the synthetic run")
    p.add_argument("--run-dir", help="keep the synthetic run here (reused when it exists)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rsr-bench-viewer-") as tmp:
        run_dir = Path(args.run_dir) if args.run_dir else Path(tmp)
        start = time.perf_counter()
        if (run_dir / "run.db").is_file():
            with RunReader.open_readonly(run_dir) as store:
                jobs = sum(store.counts().values())
            built = False
        else:
            jobs = build(run_dir, args.jobs)
            built = True
        build_s = time.perf_counter() - start
        result = anyio.run(measure, run_dir, args.repeat)
        size = (run_dir / "run.db").stat().st_size
    emit({"benchmark": "viewer", "jobs": jobs, "db_mb": round(size / 2**20), "built": built,
          "build_s": round(build_s, 1), **result}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
