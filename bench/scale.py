"""Issue 17's numbers: the head's dispatch capacity, and what Ray costs per episode.

``python -m rsr_async bench scale [--jobs 20000] [--concurrency 4096] [--actors 2]
[--episodes 24] [--episode-concurrency 8] [--hosts] [--repeat 3] [--json FILE]``

1. **Dispatch capacity of the head.** ``--jobs`` trivial jobs through the real head: a
   real :class:`~rsr_async.engine.Engine` with its real SQLite store (default
   ``engine.store_batch_ms``) in a temporary run directory, the real
   :class:`~rsr_async.cluster.Dispatcher` with the ``cluster`` section's default
   batching, ``--concurrency`` attempts in flight, and remote runners that succeed at
   once. Measured two ways, alternating, ``--repeat`` times each:

   a. ``ray``: ``--actors`` trivial :class:`~rsr_async.cluster.actor.EpisodeActor`
      processes (``mode="trivial"``) on a private local Ray instance, started as a run
      starts them (:func:`~rsr_async.cluster.ray_backend.ray_remotes`). The honest
      figure: the actors run in other processes, every batch crosses Ray.
   b. ``in_process``: the same dispatcher over :class:`~rsr_async.cluster.InProcessRemote`
      runners in this process: no Ray, the reference for what Ray's hop costs the head
      (its head CPU also pays for the trivial runners, which Ray's puts elsewhere).

   The head runs as ``run --ray`` runs it (uvloop, the CLI's GC tuning). Per run: jobs/s
   of wall time (first job handed out to last result committed; the engine yields a
   result after its commit), the head process's CPU per job (``time.process_time``:
   every thread of this process, so the event loop, the store's writer thread and Ray's
   driver threads), the event loop thread's own CPU per job (``time.thread_time``, the
   part no extra core helps), and with Ray the actors' processes' CPU per job.

   ``dispatch_jobs_per_s`` = 1e6 / ``head_cpu_us_per_job`` (the median over the Ray
   runs): the jobs/s the head hands out and stores with one core to itself. Why CPU and
   not wall time: the head is the bottleneck here (``actors_cpu_us_per_job``, the trivial
   actors' own CPU, is a fraction of the head's), and on this shared 2-core machine the
   wall rate is that capacity times the share of a core the head happens to get
   (``head_cores_busy``), which other processes decide (``load_average`` is reported).
   It is not inflated: every thread of the head is counted as if it ran on that one core
   (the store's writer and Ray's driver threads could use a second core of a head
   machine; the event loop thread, ``head_loop_cpu_us_per_job``, cannot), and the wall
   rate achieved is reported beside it (``achieved_jobs_per_s``; the two agree when the
   head gets a whole core). ``needed_jobs_per_s`` is 100 machines x 512 episodes / 300 s
   episodes (~170.7 jobs/s); ``capacity_ratio`` = dispatch / needed; floor: 10.

2. **Ray vs no Ray on the same episodes** (``--episodes N``; 0 skips it). The real CLI
   in a subprocess, as ``bench run`` drives it, on the same bundled tasks (``N`` rounded
   up to tasks x attempts): real Docker sandboxes, the embedded SGLang simulator with the
   scripted stand-in model (a TEST DOUBLE: pass rates here are not a model's results;
   the stand-in is deterministic per episode key, so both runs grade the same episodes
   the same, which the JSON checks). Once plain, once with ``--ray local`` (a private Ray
   instance, one actor on this machine), alternating, ``--repeat`` times, both with
   ``--no-prewarm`` (a Ray run has no pool on the head to prewarm, so the plain run
   starts its sandboxes on demand too) and the task images built beforehand. Reported:
   ``episodes_per_min`` (the CLI's own figure, start-up included), episodes/min over the
   episodes' span (first start to last finish, from the store: start-up excluded), the
   time outside that span (opening and closing the run), and the mean episode time as
   the store has it (the head marking it running to the runner finishing it; no episode
   waits for a slot in between). ``ray_overhead_s_per_episode`` is the difference of
   those means, Ray minus plain: what Ray adds to each episode's life (the hand-over to
   the actor, the actor's and Ray's processes on the same two cores); bringing the
   outcome back is not in the store and not counted; on a shared machine it can come out
   negative, the episodes' own times varying by more than Ray adds. Of it,
   ``ray_handover_s_per_episode`` is the hand-over: the head marking the episode running
   to its runner starting it. ``ray_fixed_overhead_s`` is the
   difference of the time outside the span, paid once per run (Ray's instance starting
   and stopping, the actor opening and closing its runtime).

3. **One vs two Docker daemons on this machine**: ``bench hosts`` measures it; with
   ``--hosts`` it runs here (as a subprocess, ``--repeat`` times, its JSON embedded under
   ``hosts``), otherwise the JSON names the command.

Exits 1 when ``capacity_ratio`` misses its floor (named in ``floors_missed``), 2 when
Ray is not installed.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import REPO, cli_run, emit, parser  # noqa: E402

from rsr_async.cluster import (  # noqa: E402
    Dispatcher,
    InProcessRemote,
    Remote,
    RemoteRunner,
    trivial_runner,
)
from rsr_async.config import ClusterConfig, Config, EngineConfig, RunConfig  # noqa: E402
from rsr_async.engine import Engine, run_async  # noqa: E402
from rsr_async.engine.fakes import make_jobs  # noqa: E402
from rsr_async.engine.reader import RunReader  # noqa: E402
from rsr_async.errors import ConfigError  # noqa: E402
from rsr_async.rsr.runtime import run_id_for  # noqa: E402
from rsr_async.tasks import BUNDLED_SUITE  # noqa: E402

CLUSTER_MACHINES = 100
EPISODES_PER_MACHINE = 512
EPISODE_S = 300.0
NEEDED_JOBS_PER_S = CLUSTER_MACHINES * EPISODES_PER_MACHINE / EPISODE_S
"""What a 100-machine x 512-episode cluster of 5-minute episodes asks of the head."""
CAPACITY_RATIO_FLOOR = 10.0

EPISODE_TASKS = ("word-frequency", "merge-intervals", "build-order", "markdown-toc",
                 "checksum-manifest", "csv-sales-summary")
"""Bundled tasks the episode part runs (short ones, solved and failed alike)."""


# ---------------------------------------------------------------------- 1. dispatch


def _say(text: str) -> None:
    """Progress on stderr (stdout carries the one JSON document)."""
    print(f"bench scale: {text}", file=sys.stderr, flush=True)


def _config(concurrency: int, **cluster: Any) -> Config:
    return Config(
        run=RunConfig(concurrency=concurrency),
        engine=EngineConfig(progress="none"),
        cluster=ClusterConfig(**cluster),
    )


def _dispatcher(remotes: Sequence[Remote], config: Config) -> Dispatcher:
    cluster = config.cluster
    return Dispatcher(remotes, batch_max=cluster.batch_max,
                      batch_window_s=cluster.batch_window_ms / 1000.0,
                      poll_wait_s=cluster.poll_wait_s)


def _cpu_s(pids: Sequence[int]) -> float:
    """CPU seconds (user + system) the processes ``pids`` have used so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / ticks


async def _dispatch(dispatcher: Dispatcher, config: Config, *, jobs: int, stage: str,
                    run_dir: Path, remote_pids: Sequence[int] = ()) -> dict[str, Any]:
    """``jobs`` trivial jobs through a real engine and store and a serving ``dispatcher``;
    the head's figures.

    One dispatcher serves all the runs over the same remotes, as one serves a whole run:
    a dispatcher stopped with a collecting call in flight leaves that call running on
    the remote, where it would take the next dispatcher's first outcomes."""
    work = make_jobs(jobs, stage=stage)
    before = dispatcher.statistics()
    async with Engine(config, runner=dispatcher, run_dir=run_dir) as engine:
        remote0 = _cpu_s(remote_pids)
        wall0, cpu0, loop0 = time.perf_counter(), time.process_time(), time.thread_time()
        done = 0
        async for _ in engine.run(work):
            done += 1
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        loop = time.thread_time() - loop0
        remote = _cpu_s(remote_pids) - remote0
        counts = engine.store.counts(stage=stage)
    after = dispatcher.statistics()
    if done != jobs or counts["succeeded"] != jobs:
        raise SystemExit(f"bench scale: {done} of {jobs} jobs came back, store counts {counts}")
    figures = {
        "jobs": jobs,
        "wall_s": round(wall, 3),
        "jobs_per_s": round(jobs / wall, 1),
        "head_cpu_us_per_job": round(cpu / jobs * 1e6, 2),
        "head_loop_cpu_us_per_job": round(loop / jobs * 1e6, 2),
        "head_cores_busy": round(cpu / wall, 3),
        "mean_batch": round((after.sent - before.sent) / max(after.batches - before.batches, 1), 1),
        "polls": after.polls - before.polls,
    }
    if remote_pids:
        figures["actors_cpu_us_per_job"] = round(remote / jobs * 1e6, 2)
    return figures


async def _in_process(config: Config, *, remotes: int, jobs: int, stage: str,
                      run_dir: Path) -> dict[str, Any]:
    capacity = max(1, math.ceil(config.run.concurrency / remotes))
    made = [InProcessRemote(RemoteRunner({"*": trivial_runner}, name=f"remote-{i}"), capacity=capacity)
            for i in range(remotes)]
    async with anyio.create_task_group() as tg:
        for remote in made:
            await tg.start(remote.runner.serve)
        dispatcher = _dispatcher(made, config)
        await tg.start(dispatcher.serve)
        figures = await _dispatch(dispatcher, config, jobs=jobs, stage=stage, run_dir=run_dir)
        tg.cancel_scope.cancel()
    return figures


async def _dispatch_part(args: Any) -> dict[str, Any]:
    from rsr_async.cluster.ray_backend import open_ray, ray_remotes

    ray_runs: list[dict[str, Any]] = []
    local_runs: list[dict[str, Any]] = []
    config = _config(args.concurrency, ray_address="local", actors_per_node=args.actors,
                     actor_cpus=0.0, start_timeout_s=300.0)
    with tempfile.TemporaryDirectory(prefix="rsr-bench-scale-") as tmp:
        started = time.perf_counter()
        async with (
            open_ray("local"),
            ray_remotes(config, run_id=f"bench-scale-{uuid.uuid4().hex[:8]}", mode="trivial") as fleet,
            anyio.create_task_group() as tg,
        ):
            ray_start_s = time.perf_counter() - started
            _say(f"{len(fleet.remotes)} trivial actors up after {ray_start_s:.1f} s")
            dispatcher = _dispatcher(fleet.remotes, config)
            await tg.start(dispatcher.serve)
            with anyio.fail_after(config.cluster.call_timeout_s):
                pids = [await remote.actor.pid.remote() for remote in fleet.remotes]
            # One short unmeasured pass: the first Ray calls set up connections and
            # import code in the actors.
            await _dispatch(dispatcher, config, jobs=min(args.jobs, 2000), stage="warmup",
                            run_dir=Path(tmp) / "warmup")
            for i in range(args.repeat):  # alternate, so drift in the machine's load hits both alike
                _say(f"dispatch run {i + 1} of {args.repeat}: ray, then in-process")
                ray_runs.append(await _dispatch(dispatcher, config, jobs=args.jobs, stage="dispatch",
                                                run_dir=Path(tmp) / f"ray-{i}", remote_pids=pids))
                local_runs.append(await _in_process(config, remotes=args.actors, jobs=args.jobs,
                                                    stage="dispatch", run_dir=Path(tmp) / f"local-{i}"))
            actors = len(fleet.remotes)
            tg.cancel_scope.cancel()

    def median(runs: list[dict[str, Any]], key: str) -> float:
        return round(float(statistics.median(r[key] for r in runs)), 3)

    keys = ("jobs_per_s", "head_cpu_us_per_job", "head_loop_cpu_us_per_job", "head_cores_busy")
    summary = {
        "ray": {key: median(ray_runs, key) for key in (*keys, "actors_cpu_us_per_job")},
        "in_process": {key: median(local_runs, key) for key in keys},
    }
    return {
        "jobs": args.jobs,
        "concurrency": args.concurrency,
        "actors": actors,
        "ray_start_s": round(ray_start_s, 2),
        "batching": {"batch_max": config.cluster.batch_max,
                     "batch_window_ms": config.cluster.batch_window_ms,
                     "poll_wait_s": config.cluster.poll_wait_s},
        "median": summary,
        "ray_vs_in_process_jobs_per_s": round(
            summary["ray"]["jobs_per_s"] / summary["in_process"]["jobs_per_s"], 3),
        # Negative when Ray's hop costs the head less than running the trivial runners
        # itself, which the in-process reference also pays for.
        "ray_minus_in_process_head_cpu_us_per_job": round(
            summary["ray"]["head_cpu_us_per_job"] - summary["in_process"]["head_cpu_us_per_job"], 2),
        "runs": {"ray": ray_runs, "in_process": local_runs},
    }


# ---------------------------------------------------------------------- 2. episodes


def _episode_tasks(episodes: int) -> tuple[list[str], int]:
    tasks = [str(BUNDLED_SUITE / name) for name in EPISODE_TASKS[: min(episodes, len(EPISODE_TASKS))]]
    return tasks, math.ceil(episodes / len(tasks))


def _containers(label: str) -> list[str]:
    done = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=rsr_async.run={label}"],
                          capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.split()


def _episode_run(tasks: list[str], attempts: int, concurrency: int, extra: list[str]) -> dict[str, Any]:
    args = ["--attempts", str(attempts), "--concurrency", str(concurrency), "--no-prewarm", *extra]
    for task in tasks:
        args += ["--dataset", task]
    with cli_run(args, bench="scale", timeout_s=1800) as (run_dir, wall, summary):
        with RunReader.open_readonly(run_dir) as store:
            rows = store.rows(stage="discover")
            # The row's start is the head marking the job running; the result's is the
            # runner (on the actor, with Ray) starting it.
            runner_started = {str(r.key): r.started_at for r in store.results(stage="discover")}
        run_id = run_id_for(run_dir)
        left = _containers(run_id) + _containers(f"{run_id}-a0")
    first = min(r.started_at or 0.0 for r in rows)
    last = max(r.finished_at or 0.0 for r in rows)
    span = last - first
    return {
        "episodes": summary["episodes"],
        "succeeded": summary["succeeded"],
        "infra_errors": summary["infra_errors"],
        "episodes_per_min": round(summary["episodes_per_min"], 2),
        "episodes_per_min_over_span": round(len(rows) / span * 60.0, 2),
        "span_s": round(span, 3),
        "outside_episodes_s": round(summary["wall_s"] - span, 3),
        "mean_episode_s": round(statistics.fmean(
            (r.finished_at or 0.0) - (r.started_at or 0.0) for r in rows), 3),
        "mean_handover_s": round(statistics.fmean(
            (runner_started[r.key] or 0.0) - (r.started_at or 0.0) for r in rows), 3),
        "wall_s": round(summary["wall_s"], 3),
        "process_wall_s": round(wall, 3),
        "containers_left": len(left),
        "statuses": {r.key: r.status for r in rows},
    }


def _episode_part(args: Any) -> dict[str, Any]:
    tasks, attempts = _episode_tasks(args.episodes)
    build = subprocess.run([sys.executable, "-m", "rsr_async", "images", "build", *tasks],
                           cwd=REPO, capture_output=True, text=True, timeout=1800)
    if build.returncode != 0:
        raise SystemExit(f"bench scale: building the task images failed:\n{build.stderr[-4000:]}")
    plain: list[dict[str, Any]] = []
    ray: list[dict[str, Any]] = []
    for i in range(args.repeat):  # alternate, so drift in the machine's load hits both alike
        _say(f"episode run {i + 1} of {args.repeat}: plain, then --ray local")
        plain.append(_episode_run(tasks, attempts, args.episode_concurrency, []))
        ray.append(_episode_run(tasks, attempts, args.episode_concurrency, ["--ray", "local"]))
    same = all(run["statuses"] == plain[0]["statuses"] for run in plain + ray)
    for run in plain + ray:
        del run["statuses"]

    def median(runs: list[dict[str, Any]], key: str) -> float:
        return round(float(statistics.median(r[key] for r in runs)), 3)

    keys = ("episodes_per_min", "episodes_per_min_over_span", "span_s", "outside_episodes_s", "mean_episode_s",
            "mean_handover_s")
    med = {name: {key: median(runs, key) for key in keys} for name, runs in (("plain", plain), ("ray", ray))}
    return {
        "model": "scripted stand-in behind the embedded simulator (a test double, not a model)",
        "tasks": [Path(t).name for t in tasks],
        "attempts": attempts,
        "episodes": len(tasks) * attempts,
        "concurrency": args.episode_concurrency,
        "flags": "--no-prewarm on both; --ray local (one actor on this machine) on the Ray runs",
        "same_outcomes": same,
        "median": med,
        "ray_overhead_s_per_episode": round(med["ray"]["mean_episode_s"] - med["plain"]["mean_episode_s"], 3),
        "ray_handover_s_per_episode": round(
            med["ray"]["mean_handover_s"] - med["plain"]["mean_handover_s"], 3),
        "ray_fixed_overhead_s": round(
            med["ray"]["outside_episodes_s"] - med["plain"]["outside_episodes_s"], 2),
        "ray_vs_plain_episodes_per_min": round(
            med["ray"]["episodes_per_min"] / med["plain"]["episodes_per_min"], 3),
        "ray_vs_plain_episodes_per_min_over_span": round(
            med["ray"]["episodes_per_min_over_span"] / med["plain"]["episodes_per_min_over_span"], 3),
        "containers_left": sum(r["containers_left"] for r in plain + ray),
        "runs": {"plain": plain, "ray": ray},
    }


# ---------------------------------------------------------------------- 3. hosts


def _hosts_part(args: Any) -> dict[str, Any]:
    if not args.hosts:
        return {"measured": False, "how": "python -m rsr_async bench hosts --json FILE "
                "(or bench scale --hosts): episodes/min over one Docker daemon vs two on this machine"}
    _say(f"bench hosts --repeat {args.repeat} (a private second dockerd)")
    with tempfile.TemporaryDirectory(prefix="rsr-bench-scale-hosts-") as tmp:
        out = Path(tmp) / "hosts.json"
        done = subprocess.run([sys.executable, "-m", "rsr_async", "bench", "hosts", "--repeat",
                               str(args.repeat), "--json", str(out)],
                              cwd=REPO, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            return {"measured": False, "error": done.stderr.strip()[-2000:]}
        result: dict[str, Any] = json.loads(out.read_text())
    result.pop("machine", None)
    return {"measured": True, **result}


# ---------------------------------------------------------------------- main


def main(argv: list[str]) -> int:
    p = parser(__doc__.splitlines()[0] if __doc__ else "scale benchmark")
    p.set_defaults(repeat=3)
    p.add_argument("--jobs", type=int, default=20000, help="dispatch part: trivial jobs per run")
    p.add_argument("--concurrency", type=int, default=4096, help="dispatch part: attempts in flight")
    p.add_argument("--actors", type=int, default=2, help="dispatch part: trivial Ray actors (and in-process remotes)")
    p.add_argument("--episodes", type=int, default=24,
                   help="episode part: real episodes per run (tasks x attempts; 0 skips the part)")
    p.add_argument("--episode-concurrency", type=int, default=8, help="episode part: episodes in flight")
    p.add_argument("--hosts", action="store_true", help="also run bench hosts (a second dockerd; needs root)")
    args = p.parse_args(argv)
    if args.jobs < 1 or args.repeat < 1 or args.actors < 1:
        p.error("--jobs, --repeat and --actors must be at least 1")
    try:
        from rsr_async.cluster.ray_backend import import_ray

        import_ray()
    except ConfigError:
        print("bench scale: Ray is not installed: pip install 'rsr_async[ray]'", file=sys.stderr)
        return 2
    load_before = os.getloadavg()
    dispatch = run_async(_dispatch_part, args)  # uvloop and the GC tuning, as `run --ray` has them
    episodes = _episode_part(args) if args.episodes > 0 else None
    hosts = _hosts_part(args)
    ray = dispatch["median"]["ray"]
    head_cpu = ray["head_cpu_us_per_job"]
    capacity = round(1e6 / head_cpu, 1)
    ratio = round(capacity / NEEDED_JOBS_PER_S, 2)
    missed = [] if ratio >= CAPACITY_RATIO_FLOOR else ["capacity_ratio"]
    emit({
        "benchmark": "scale",
        "dispatch_jobs_per_s": capacity,
        "needed_jobs_per_s": round(NEEDED_JOBS_PER_S, 1),
        "capacity_ratio": ratio,
        "head_cpu_us_per_job": head_cpu,
        "definition": (
            "dispatch_jobs_per_s = 1e6 / head_cpu_us_per_job: the jobs/s the head (engine, store, "
            "dispatcher, Ray driver; every thread counted as if on one core) hands to trivial Ray "
            "actors in other processes and stores, with one core to itself; median of the runs"
        ),
        "head_loop_cpu_us_per_job": ray["head_loop_cpu_us_per_job"],
        "actors_cpu_us_per_job": ray["actors_cpu_us_per_job"],
        "achieved_jobs_per_s": ray["jobs_per_s"],
        "achieved_capacity_ratio": round(ray["jobs_per_s"] / NEEDED_JOBS_PER_S, 2),
        "head_cores_busy": ray["head_cores_busy"],
        "needed": f"{CLUSTER_MACHINES} machines x {EPISODES_PER_MACHINE} episodes / {EPISODE_S:g} s episodes",
        "ray_overhead_s_per_episode": episodes["ray_overhead_s_per_episode"] if episodes else None,
        "ray_handover_s_per_episode": episodes["ray_handover_s_per_episode"] if episodes else None,
        "ray_fixed_overhead_s": episodes["ray_fixed_overhead_s"] if episodes else None,
        "floors": {"capacity_ratio": {"min": CAPACITY_RATIO_FLOOR, "ok": not missed}},
        "floors_met": not missed,
        "floors_missed": missed,
        "dispatch": dispatch,
        "episodes": episodes,
        "hosts": hosts,
        "load_average": {"before": [round(x, 2) for x in load_before],
                         "after": [round(x, 2) for x in os.getloadavg()]},
        "repeat": args.repeat,
    }, args.json)
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
