"""What one RSRT hidden verification (a completion claim) costs: rsr-verify's
copy-on-write copy against ``docker commit``, and both against a plain verification.

RSRT grades a claim on a throwaway copy of the agent's sandbox (:class:`SnapshotGrader`:
``grade(..., discard_changes=True)``). On a host whose kernel allows it, rsr-verify makes
that copy itself: overlays over the sandbox's mounts, in the run's private mount namespace
(:mod:`rsr_async.sandbox.hidden`). Elsewhere the sandbox falls back to committing the
container and starting a sibling from the commit (:meth:`SandboxPool.snapshot`). The
baseline is what the plain harnesses do once the agent is done: :func:`verify` in the
agent's own container.

Setup, untimed: one container per bundled task (``--tasks``), with the task's reference
solution applied, so every way runs the full tests and passes; one warm-up of each way.
Then ``--repeat`` rounds; each round takes every task once each way, in rotating order,
one verification at a time (the cost of one, not throughput under load).

- ``plain``: :func:`verify` in the container itself;
- ``cow``: :func:`verify` with ``discard_changes=True`` (what a claim costs now);
- ``commit_path``: the commit fallback end to end (:meth:`SandboxPool.snapshot` +
  :func:`verify` in the sibling), split into ``copy`` (commit + sibling start),
  ``verify`` and ``teardown`` (removal of the sibling and the image);
- ``commit``: ``docker commit`` alone on the same container (its image removed untimed).

Medians per task and over all samples; ``ratio`` = cow / plain, ``speedup`` =
commit_path / cow (the floor: cow at most 1 s, speedup at least 4).

``python -m rsr_async bench rsrt_verify [--repeat 5] [--tasks a,b,c] [--json FILE]``
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import emit, parser  # noqa: E402

from rsr_async.config import SandboxConfig  # noqa: E402
from rsr_async.sandbox import DockerSandbox, SandboxPool  # noqa: E402
from rsr_async.sandbox.pool import LABEL_RUN, SNAPSHOT_REPOSITORY  # noqa: E402
from rsr_async.schema import Task  # noqa: E402
from rsr_async.tasks import BUNDLED_SUITE  # noqa: E402
from rsr_async.tasks.loader import load_task  # noqa: E402
from rsr_async.tasks.oracle import run_oracle  # noqa: E402
from rsr_async.tasks.verifier import verify  # noqa: E402

DEFAULT_TASKS = "merge-intervals,csv-sales-summary,git-merge-conflict"
KINDS = ("plain", "cow", "commit_path", "copy", "verify", "teardown", "commit")
WAYS = ("plain", "cow", "commit_path")


async def _plain(sandbox: DockerSandbox, task: Task) -> dict[str, float]:
    started = time.perf_counter()
    verdict = await verify(sandbox, task)
    elapsed = time.perf_counter() - started
    if not verdict.passed:
        raise RuntimeError(f"{task.name}: the plain verifier failed after the oracle: {verdict.output}")
    return {"plain": elapsed}


async def _cow(sandbox: DockerSandbox, task: Task) -> dict[str, float]:
    """A claim as SnapshotGrader makes it: rsr-verify's copy-on-write copy."""
    started = time.perf_counter()
    verdict = await verify(sandbox, task, discard_changes=True)
    elapsed = time.perf_counter() - started
    if not verdict.passed:
        raise RuntimeError(f"{task.name}: the copy's verifier failed after the oracle: {verdict.output}")
    return {"cow": elapsed}


async def _commit_path(pool: SandboxPool, sandbox: DockerSandbox, task: Task, key: str) -> dict[str, float]:
    """The commit fallback (what a claim cost before, and still costs on a host that
    refuses the copy), timed by phase."""
    started = time.perf_counter()
    async with pool.snapshot(sandbox, task, key=key) as copy:
        copied = time.perf_counter()
        verdict = await verify(copy, task)
        verified = time.perf_counter()
    ended = time.perf_counter()
    if not verdict.passed:
        raise RuntimeError(f"{task.name}: the committed copy's verifier failed after the oracle: {verdict.output}")
    return {
        "commit_path": ended - started,
        "copy": copied - started,
        "verify": verified - copied,
        "teardown": ended - verified,
    }


async def _commit(sandbox: DockerSandbox, run_id: str) -> dict[str, float]:
    """``docker commit`` alone (the first part of ``copy``), its image removed untimed."""
    tag = uuid.uuid4().hex[:16]
    started = time.perf_counter()
    await sandbox.commit(repository=SNAPSHOT_REPOSITORY, tag=tag, labels={LABEL_RUN: run_id})
    elapsed = time.perf_counter() - started
    with anyio.fail_after(60):
        await anyio.run_process(["docker", "rmi", "-f", f"{SNAPSHOT_REPOSITORY}:{tag}"])
    return {"commit": elapsed}


def _refused(pool: SandboxPool) -> str | None:
    """Why a host refused rsr-verify's copy (then ``cow`` measured the commit path)."""
    return next((s.copy_refused for s in pool._stations.values() if s.copy_refused), None)


def _ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 1)


async def _main(args: Any) -> dict[str, Any]:
    names = [name.strip() for name in args.tasks.split(",") if name.strip()]
    tasks = [load_task(BUNDLED_SUITE / name) for name in names]
    config = SandboxConfig(api_timeout_s=120.0)
    samples: dict[str, dict[str, list[float]]] = {t.name: {k: [] for k in KINDS} for t in tasks}
    run_id = f"bench-rsrt-verify-{uuid.uuid4().hex[:8]}"
    async with SandboxPool(config, run_id=run_id) as pool:
        contexts = [pool.sandbox(task, key=f"bench-{task.name}") for task in tasks]
        sandboxes = [await context.__aenter__() for context in contexts]
        try:
            for sandbox, task in zip(sandboxes, tasks, strict=True):
                solved = await run_oracle(sandbox, task)
                if solved.exit_code != 0:
                    raise RuntimeError(f"{task.name}: the oracle exited {solved.exit_code}: {solved.output}")
                await _plain(sandbox, task)  # warm-ups, not kept
                await _cow(sandbox, task)
                await _commit_path(pool, sandbox, task, f"bench-{task.name}")
            for round_ in range(args.repeat):
                for sandbox, task in zip(sandboxes, tasks, strict=True):
                    shift = round_ % len(WAYS)
                    for which in WAYS[shift:] + WAYS[:shift]:
                        if which == "plain":
                            timed = await _plain(sandbox, task)
                        elif which == "cow":
                            timed = await _cow(sandbox, task)
                        else:
                            timed = await _commit_path(pool, sandbox, task, f"bench-{task.name}")
                        for kind, value in timed.items():
                            samples[task.name][kind].append(value)
                    for kind, value in (await _commit(sandbox, run_id)).items():
                        samples[task.name][kind].append(value)
        finally:
            for context in reversed(contexts):
                await context.__aexit__(None, None, None)
        leaked = await pool.containers()
        refused = _refused(pool)
    with anyio.fail_after(60):
        images = await anyio.run_process(
            ["docker", "images", "-q", "--filter", f"label={LABEL_RUN}={run_id}", SNAPSHOT_REPOSITORY]
        )
    per_task = {
        name: {
            **{f"{kind}_ms": _ms(values) for kind, values in kinds.items()},
            "ratio": round(statistics.median(kinds["cow"]) / statistics.median(kinds["plain"]), 2),
            "speedup": round(statistics.median(kinds["commit_path"]) / statistics.median(kinds["cow"]), 2),
        }
        for name, kinds in samples.items()
    }
    every = {kind: [v for kinds in samples.values() for v in kinds[kind]] for kind in KINDS}
    overall = {f"{kind}_ms": _ms(values) for kind, values in every.items()}
    return {
        "benchmark": "rsrt_verify",
        "tasks": names,
        "repeat": args.repeat,
        "samples_per_kind": len(every["plain"]),
        "median": overall,
        "ratio": round(statistics.median(every["cow"]) / statistics.median(every["plain"]), 2),
        "speedup": round(statistics.median(every["commit_path"]) / statistics.median(every["cow"]), 2),
        "extra_ms": round(overall["cow_ms"] - overall["plain_ms"], 1),
        "copy_refused": refused,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "per_task": per_task,
        "containers_left": len(leaked),
        "snapshot_images_left": len(images.stdout.split()),
    }


def main(argv: list[str]) -> int:
    p = parser(__doc__.splitlines()[0] if __doc__ else "rsrt_verify benchmark")
    p.add_argument("--tasks", default=DEFAULT_TASKS, help="comma-separated bundled task names")
    args = p.parse_args(argv)
    emit(anyio.run(_main, args), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
