"""``python -m rsr_async run``: the discover stage on a dataset (Terminus 2 for now).

With no ``--llm-url`` it starts the embedded SGLang simulator (subprocesses, so the
model side has its own core) with the scripted stand-in model, and says so.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from ..config import Config, add_config_arguments, load_config
from ..engine import Engine, Job
from ..engine.signals import SignalState, exit_code, run_async, shutdown_on_signals
from ..engine.store import Store, resume_view
from ..errors import ConfigError, ConfigMismatchError, TaskError
from ..schema import Task
from ..tasks import BUNDLED_SUITE, load_dataset
from .discover import STAGE, discover_jobs
from .runtime import EpisodeRuntime, episode_runtime, prewarm_wave
from .summary import render_summary, summarise, write_summary

FINISHED = ("succeeded", "failed")
"""Statuses a rerun skips (the engine reruns the rest)."""


def configure(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--dataset", action="append", default=[], metavar="PATH",
                        help="task directory or list file (default: the bundled suite); repeatable")
    parser.add_argument("--concurrency", type=int, help="episodes in flight (run.concurrency)")
    parser.add_argument("--attempts", type=int, help="attempts per task and harness (run.attempts)")
    parser.add_argument("--run-dir", help="run directory (default: runs/discover-<config hash>)")
    parser.add_argument("--llm-url", action="append", default=[], metavar="URL",
                        help="SGLang server or router URL; repeatable (default: embedded simulator)")
    parser.add_argument("--sim-servers", type=int, default=1,
                        help="embedded simulator processes when no --llm-url (default 1)")
    parser.add_argument("--no-prewarm", dest="prewarm", action="store_false", default=None,
                        help="do not start the first wave's sandboxes ahead (run.prewarm)")
    parser.add_argument("--force", action="store_true",
                        help="resume even though the run directory was started with another config")
    parser.add_argument("--progress", choices=["auto", "rich", "plain", "none"],
                        help="live display (engine.progress)")
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")


def _flag_values(args: argparse.Namespace) -> dict[str, Any]:
    values: dict[str, dict[str, Any]] = {"run": {}, "llm": {}, "engine": {}}
    if args.concurrency is not None:
        values["run"]["concurrency"] = args.concurrency
    if args.attempts is not None:
        values["run"]["attempts"] = args.attempts
    if args.run_dir:
        values["run"]["run_dir"] = args.run_dir
    if args.dataset:
        values["run"]["dataset"] = args.dataset
    if args.prewarm is not None:
        values["run"]["prewarm"] = args.prewarm
    if args.llm_url:
        values["llm"]["urls"] = args.llm_url
    if args.progress:
        values["engine"]["progress"] = args.progress
    if args.metrics_port is not None:
        values["engine"]["metrics_port"] = args.metrics_port
    return {k: v for k, v in values.items() if v}


def default_run_dir(config: Config, sources: list[str]) -> Path:
    """``runs/discover-<hash>``: the same command (same settings) resumes the same run."""
    # Which model answers is part of a run's identity: a simulator run and a real one
    # must never resume each other.
    model = list(config.llm.urls) or ["embedded-simulator"]
    view = {"config": resume_view(config.to_dict()), "dataset": sources, "model": model}
    digest = hashlib.sha256(json.dumps(view, sort_keys=True).encode()).hexdigest()[:10]
    return Path("runs") / f"{STAGE}-{digest}"


async def _prewarm_until_interrupted(
    runtime: EpisodeRuntime, wave: list[Job], signals: SignalState
) -> None:
    """Prewarm, but stop at the first Ctrl-C (the engine has nothing to drain yet)."""
    async with anyio.create_task_group() as tg:

        async def stop_on_signal() -> None:
            await signals.first.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(stop_on_signal)
        await prewarm_wave(runtime.pool, wave)
        tg.cancel_scope.cancel()


async def _check_model_identity(
    store: Store, runtime: EpisodeRuntime, run_dir: Path, force: bool
) -> None:
    """Refuse to mix episodes of two different models in one run (unless forced)."""
    identity = runtime.model.model_name + (" [scripted stand-in]" if runtime.scripted else "")
    stored = store.meta().get("model")
    if stored is not None and stored != identity and not force:
        raise ConfigMismatchError(
            f"{run_dir}: this run's episodes came from {stored!r}, but the model now is "
            f"{identity!r}; use a new --run-dir (or --force to mix them)"
        )
    future = store.call(
        lambda con: con.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('model', ?)", (identity,)
        )
    )
    await anyio.to_thread.run_sync(future.result)


def main(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.set, _flag_values(args))
    if args.sim_servers < 1:
        raise ConfigError("--sim-servers: expected a number >= 1")
    sources = [str(Path(s).resolve()) for s in config.run.dataset] or [str(BUNDLED_SUITE)]
    dataset = load_dataset(sources)
    for error in dataset.errors:
        print(f"warning: skipped a malformed task: {error}", file=sys.stderr)
    if not dataset.tasks:
        raise TaskError(f"no loadable task in {', '.join(sources)}")
    run_dir = Path(config.run.run_dir) if config.run.run_dir else default_run_dir(config, sources)
    run_dir.mkdir(parents=True, exist_ok=True)
    run_dir = run_dir.resolve()
    print(f"run directory: {run_dir}", file=sys.stderr)
    tasks_dir = Path(sources[0]) if len(sources) == 1 else None
    return run_async(_run, config, dataset.tasks, run_dir, tasks_dir, args.force, args.sim_servers)


async def _run(
    config: Config,
    tasks: list[Task],
    run_dir: Path,
    tasks_dir: Path | None,
    force: bool,
    sim_servers: int,
) -> int:
    started = time.monotonic()
    notice = partial(print, file=sys.stderr)
    async with (
        episode_runtime(
            config, run_dir=run_dir, tasks_dir=tasks_dir, sim_servers=sim_servers, on_notice=notice
        ) as runtime,
        Engine(
            config, runner=runtime.runner, run_dir=run_dir, force=force, gauges=runtime.gauges
        ) as engine,
    ):
        await _check_model_identity(engine.store, runtime, run_dir, force)
        jobs = list(discover_jobs(tasks, config))
        done_here = 0
        async with shutdown_on_signals(engine) as signals:
            if config.run.prewarm:
                statuses = engine.store.statuses(str(job.key) for job in jobs)
                todo = [j for j in jobs if statuses.get(str(j.key)) not in FINISHED]
                wave = todo[: config.run.concurrency]
                print(f"starting {len(wave)} sandboxes for the first wave ...", file=sys.stderr)
                await _prewarm_until_interrupted(runtime, wave, signals)
            async for _ in engine.run(jobs, stage=STAGE):
                done_here += 1
        summary = summarise(
            engine.store,
            stage=STAGE,
            model=runtime.model.model_name,
            scripted_model=runtime.scripted,
            tasks=[task.name for task in tasks],
            attempts=config.run.attempts,
            wall_s=time.monotonic() - started,
            episodes_this_run=done_here,
            peak_sandboxes=runtime.pool.statistics().peak_live,
        )
        path = write_summary(summary, run_dir)
        code = exit_code(engine.statistics(), signals)
    from rich.console import Console

    Console(stderr=True).print(render_summary(summary))
    print(f"summary: {path}", file=sys.stderr)
    return code
