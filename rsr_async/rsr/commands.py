"""``python -m rsr_async run``: the pipeline's stages on a dataset, in one resumable command.

``--stages discover,rewrite,verify,export`` (default: ``run.stages``, discover only) runs
the RSR graph (:mod:`.pipeline`) on one engine, then writes the export. With no
``--llm-url`` it starts the embedded SGLang simulator (subprocesses, so the model side
has its own core) with the scripted stand-in model, and says so; the later stages then
need ``--allow-scripted``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio
import msgspec

from ..config import MAX_COUNT, Config, add_config_arguments, load_config
from ..engine import Job
from ..engine.signals import (
    EXIT_OK,
    SignalState,
    exit_code,
    permanent_only_code,
    run_async,
    shutdown_on_signals,
)
from ..errors import ConfigError, TaskError
from ..output_dirs import check_output_dir
from ..resume import resume_view
from ..schema import Task
from ..tasks import BUNDLED_SUITE, load_dataset
from .discover import STAGE, discover_jobs
from .figures import pipeline_figures, render_figures

if TYPE_CHECKING:
    from ..export import RejectedMode
    from .exporting import ExportFormat
from .runtime import EpisodeRuntime, check_storage_caps, open_pipeline, prewarm_wave
from .summary import (
    render_summary,
    render_summary_phases,
    render_summary_stages,
    stage_times,
    summarise,
    write_summary,
)

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
    parser.add_argument("--ray", metavar="ADDRESS",
                        help="run episodes on Ray actors, one per node: auto, HOST:PORT, ray://HOST:PORT, "
                             "or local (cluster.ray_address; needs the [ray] extra)")
    add_stage_arguments(parser)
    parser.add_argument("--stages", metavar="LIST",
                        help="comma-separated stages: discover,rewrite,verify,export (run.stages)")


def add_stage_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags the later stages share (``run`` and ``rewrite|verify|export``)."""
    parser.add_argument("--allow-scripted", action="store_true",
                        help="rewrite/export the scripted stand-in's trajectories (a test double)")
    parser.add_argument("--out", metavar="DIR",
                        help="export directory (default: RUN_DIR/export, or RUN_DIR/harbor-jobs "
                             "with --format harbor-jobs)")
    parser.add_argument("--format", choices=["sft", "harbor-jobs"], default="sft", dest="export_format",
                        help="export: sft (JSONL, ShareGPT, ATIF, dataset card; default) or "
                             "harbor-jobs (the SFT set as a Harbor job: harbor view, harbor traces export)")
    parser.add_argument("--rejected", choices=["weight", "drop"], default="weight",
                        help="export: replies Terminus 2 rejected (unparseable, cut by the output "
                             "limit): keep them with weight 0 (default) or drop them")


def _flag_values(args: argparse.Namespace) -> dict[str, Any]:
    values: dict[str, dict[str, Any]] = {"run": {}, "llm": {}, "engine": {}, "cluster": {}}
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
    if args.ray:
        values["cluster"]["ray_address"] = args.ray
    if args.stages is not None:  # "" is no stage, refused by RunConfig, not the default
        values["run"]["stages"] = [s.strip() for s in args.stages.split(",") if s.strip()]
    return {k: v for k, v in values.items() if v}


def default_run_dir(config: Config, sources: list[str]) -> Path:
    """``runs/discover-<hash>``: the same command (same settings) resumes the same run."""
    # Which model answers is part of a run's identity: a simulator run and a real one
    # must never resume each other.
    model = list(config.llm.urls) or ["embedded-simulator"]
    view = {"config": resume_view(config.to_dict()), "dataset": sources, "model": model}
    digest = hashlib.sha256(json.dumps(view, sort_keys=True).encode()).hexdigest()[:10]
    return Path("runs") / f"{STAGE}-{digest}"


async def prewarm_until_interrupted(
    runtime: EpisodeRuntime, wave: list[Job], signals: SignalState
) -> None:
    """Prewarm, but stop at the first Ctrl-C (the engine has nothing to drain yet).
    ``run`` and ``eval`` call it before their first wave of episodes. A Ray run's head
    has no pool (its sandboxes start on the actors, as episodes reach them): nothing."""
    if runtime.pool is None:
        return
    pool = runtime.pool
    async with anyio.create_task_group() as tg:

        async def stop_on_signal() -> None:
            await signals.first.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(stop_on_signal)
        await prewarm_wave(pool, wave)
        tg.cancel_scope.cancel()


def check_flags(args: argparse.Namespace) -> None:
    """Refuse flag values that would hang or crash later, naming the flag (one line)."""
    for flag, value in (("--concurrency", args.concurrency), ("--attempts", args.attempts)):
        if value is not None and not 1 <= value <= MAX_COUNT:
            raise ConfigError(f"{flag}: expected an integer from 1 to {MAX_COUNT}, got {value}")
    check_sim_servers(args.sim_servers)
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise ConfigError(f"--metrics-port: expected a port in 0..65535 (0: off), got {args.metrics_port}")


MAX_SIM_SERVERS = 64
"""Most embedded simulator processes (``--sim-servers``): each is a Python process with
its own port; more than the machine's cores only adds start-up time and memory."""


def check_sim_servers(count: int) -> None:
    """Refuse a ``--sim-servers`` count outside 1..:data:`MAX_SIM_SERVERS`, naming the flag."""
    if not 1 <= count <= MAX_SIM_SERVERS:
        raise ConfigError(f"--sim-servers: expected an integer from 1 to {MAX_SIM_SERVERS}, got {count}")


def make_run_dir(run_dir: Path) -> Path:
    """Create ``run_dir`` (resolved); a path that is a file, or cannot be created, is a
    ConfigError naming it rather than a traceback."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"run directory {run_dir}: exists and is not a directory; name another --run-dir")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"run directory {run_dir}: cannot create it: {exc.strerror or exc}") from exc
    return run_dir.resolve()


def main(args: argparse.Namespace) -> int:
    check_flags(args)
    config = load_config(args.config, args.set, _flag_values(args))
    if args.out and "export" in config.run.stages:  # refused now, not after the discover stage
        check_output_dir(args.out, "export")
    sources = [str(Path(s).resolve()) for s in config.run.dataset] or [str(BUNDLED_SUITE)]
    dataset = load_dataset(sources)
    for error in dataset.errors:
        print(f"warning: skipped a malformed task: {error}", file=sys.stderr)
    if not dataset.tasks:
        raise TaskError(f"no loadable task in {', '.join(sources)}")
    run_dir = Path(config.run.run_dir) if config.run.run_dir else default_run_dir(config, sources)
    run_dir = make_run_dir(run_dir)
    print(f"run directory: {run_dir}", file=sys.stderr)
    tasks_dir = write_task_list(dataset.tasks, run_dir)
    options = StageOptions(
        force=args.force,
        sim_servers=args.sim_servers,
        allow_scripted=args.allow_scripted,
        out=Path(args.out) if args.out else None,
        export_format=args.export_format,
        rejected=args.rejected,
    )
    return run_async(_run, config, dataset.tasks, run_dir, tasks_dir, options)


TASK_LIST = "tasks.list"
"""In the run directory: the task directories this run's loader accepted, one a line."""


def write_task_list(tasks: list[Task], run_dir: Path) -> Path:
    """Write :data:`TASK_LIST` and return its path: the embedded scripted stand-in reads
    exactly these tasks' solutions, never a task the loader refused (a non-UTF-8 or
    oversized instruction, a symlink out of its directory) nor anything else under the
    tasks' common parent."""
    path = run_dir / TASK_LIST
    path.write_text("".join(f"{Path(task.path).resolve()}\n" for task in tasks), encoding="utf-8")
    return path


class StageOptions(NamedTuple):
    force: bool
    sim_servers: int
    allow_scripted: bool
    out: Path | None
    export_format: ExportFormat = "sft"
    rejected: RejectedMode = "weight"


async def _run(
    config: Config,
    tasks: list[Task],
    run_dir: Path,
    tasks_dir: Path | None,
    options: StageOptions,
) -> int:
    started, started_wall = time.monotonic(), time.time()
    stages = config.run.stages
    if set(stages) & {"discover", "verify"}:  # the stages that start sandboxes
        await check_storage_caps(config.sandbox, tasks)
    notice = partial(print, file=sys.stderr)
    async with open_pipeline(
        config,
        run_dir=run_dir,
        tasks_dir=tasks_dir,
        sim_servers=options.sim_servers,
        force=options.force,
        on_notice=notice,
    ) as pipeline:
        engine, runtime = pipeline.engine, pipeline.runtime
        opened = time.monotonic()
        prewarm_s = 0.0
        jobs = list(discover_jobs(tasks, config))
        done_here = 0
        async with shutdown_on_signals(engine) as signals:
            if config.run.prewarm and "discover" in stages and runtime.pool is not None:
                statuses = engine.store.statuses(str(job.key) for job in jobs)
                todo = [j for j in jobs if statuses.get(str(j.key)) not in FINISHED]
                wave = todo[: config.run.concurrency]
                print(f"starting {len(wave)} sandboxes for the first wave ...", file=sys.stderr)
                await prewarm_until_interrupted(runtime, wave, signals)
                prewarm_s = time.monotonic() - opened
            async for result in pipeline.run(tasks, stages=stages, allow_scripted=options.allow_scripted):
                done_here += result.key.stage == STAGE
        figures = (
            await anyio.to_thread.run_sync(pipeline_figures, engine.store)
            if set(stages) - {"discover"}
            else None
        )
        summary = summarise(
            engine.store,
            stage=STAGE,
            model=runtime.model.model_name,
            scripted_model=runtime.scripted,
            tasks=[task.name for task in tasks],
            attempts=config.run.attempts,
            wall_s=time.monotonic() - started,
            episodes_this_run=done_here,
            peak_sandboxes=runtime.peak_live(),
        )
        rows = await anyio.to_thread.run_sync(
            partial(engine.store.rows, status=("succeeded", "failed", "infra_error", "cancelled"))
        )
        summary = msgspec.structs.replace(
            summary, open_s=round(opened - started, 3), prewarm_s=round(prewarm_s, 3),
            stages=stage_times(rows, since=started_wall),
        )
        if figures is not None:
            summary = msgspec.structs.replace(summary, pipeline=figures)
        path = write_summary(summary, run_dir)
        code = exit_code(engine.statistics(), signals)
        if code == EXIT_OK:
            # Over the whole store, so a resume of a run whose every episode was a
            # permanent error says so again (this invocation skipped them all).
            code = permanent_only_code(graded=summary.succeeded + summary.failed,
                                       permanent=summary.permanent_errors)
        if "export" in stages and code == EXIT_OK:
            from .exporting import default_out, export_run

            manifest = await anyio.to_thread.run_sync(
                partial(
                    export_run,
                    engine.store,
                    options.out or run_dir / default_out(options.export_format),
                    validation_share=config.rsr.validation_share,
                    seed=config.run.seed,
                    allow_scripted=options.allow_scripted,
                    format=options.export_format,
                    rejected=options.rejected,
                )
            )
            out = options.out or run_dir / default_out(options.export_format)
            print(f"export: {out} ({_export_line(manifest)})", file=sys.stderr)
            summary = msgspec.structs.replace(
                summary, export_s=round(time.monotonic() - started - summary.wall_s, 3)
            )
            path = write_summary(summary, run_dir)
    from rich.console import Console

    Console(stderr=True).print(render_summary(summary))
    if phases := render_summary_phases(summary):
        print(phases, file=sys.stderr)
    if stage_lines := render_summary_stages(summary):
        print(stage_lines, file=sys.stderr)
    if figures is not None:
        print(render_figures(figures), file=sys.stderr)
    print(f"summary: {path}", file=sys.stderr)
    return code


def _export_line(manifest: dict[str, Any]) -> str:
    if manifest.get("format") == "harbor-jobs":
        return f"Harbor job {manifest['job']}: {manifest['trials']} trials"
    written = manifest.get("records", {}).get("written", {})
    return ", ".join(f"{name}: {count}" for name, count in sorted(written.items())) or "nothing kept"
