"""``python -m rsr_async rewrite|verify|export RUN_DIR``: one stage alone on a run directory.

The run's own config (stored in its database) is the starting point; ``--config`` and
``--set`` are laid over it, so ``rewrite RUN_DIR --set rsr.runbooks_per_source=2`` changes
K without touching discovery (each stage checks only the settings it depends on).
``rewrite`` and ``verify`` walk the stored graph: finished jobs are never run again, and
only the named stage's jobs run. ``export`` only reads the store.
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import anyio

from ..config import Config, add_config_arguments, load_config
from ..engine.reader import RunReader
from ..engine.signals import EXIT_OK, exit_code, run_async, shutdown_on_signals
from ..errors import StoreError
from ..resume import STAGE_SCOPED
from ..schema import EpisodeSpec, Task
from .commands import add_stage_arguments, check_sim_servers, write_task_list
from .exporting import default_out, export_run
from .figures import pipeline_figures, render_figures
from .runtime import check_storage_caps, open_pipeline


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (holds run.db)")
    add_config_arguments(parser)
    add_stage_arguments(parser)
    parser.add_argument("--llm-url", action="append", default=[], metavar="URL",
                        help="SGLang server or router URL; repeatable (default: the run's own)")
    parser.add_argument("--sim-servers", type=int, default=1,
                        help="embedded simulator processes when no --llm-url (default 1)")
    parser.add_argument("--force", action="store_true",
                        help="continue even though this stage's settings changed")
    parser.add_argument("--progress", choices=["auto", "rich", "plain", "none"],
                        help="live display (engine.progress)")


def _stored(run_dir: Path) -> tuple[dict[str, object], list[Task]]:
    """The run's config and its tasks (from the discover jobs it stored)."""
    with RunReader.open_readonly(run_dir) as store:
        config = store.config()
        if config is None:
            raise StoreError(f"{run_dir}: this run recorded no config; it cannot be continued")
        tasks: dict[str, Task] = {}
        for job in store.jobs(stage="discover"):
            if isinstance(job.spec, EpisodeSpec):
                tasks.setdefault(job.spec.task.name, job.spec.task)
    return config, list(tasks.values())


def main(args: argparse.Namespace) -> int:
    check_sim_servers(args.sim_servers)
    run_dir = Path(args.run_dir)
    if not (run_dir / "run.db").is_file():
        raise StoreError(f"{run_dir}: not a run directory (no run.db); run `python -m rsr_async run` first")
    stored, tasks = _stored(run_dir)
    values: dict[str, dict[str, object]] = {"run": {"stages": [args.command]}}
    if args.llm_url:
        values["llm"] = {"urls": args.llm_url}
    if args.progress:
        values["engine"] = {"progress": args.progress}
    # The stored config minus its per-stage sections: those come from the defaults and
    # the user's flags, and each stage checks its own.
    base = {k: v for k, v in stored.items() if k not in STAGE_SCOPED}
    config = load_config(args.config, args.set, values, base=base)
    if args.command == "export":
        return _export(config, run_dir, args)
    if not tasks:
        raise StoreError(f"{run_dir}: no discover episodes stored; nothing to {args.command}")
    return run_async(_run_stage, config, tasks, run_dir, args)


def _export(config: Config, run_dir: Path, args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out else run_dir / default_out(args.export_format)
    with RunReader.open_readonly(run_dir) as store:
        manifest = export_run(
            store,
            out,
            validation_share=config.rsr.validation_share,
            seed=config.run.seed,
            allow_scripted=args.allow_scripted,
            format=args.export_format,
            rejected=args.rejected,
        )
        print(render_figures(pipeline_figures(store)), file=sys.stderr)
    print(f"export: {out} ({len(manifest.get('files', {}))} files)", file=sys.stderr)
    return EXIT_OK


async def _run_stage(config: Config, tasks: list[Task], run_dir: Path, args: argparse.Namespace) -> int:
    started = time.monotonic()
    done = 0
    if args.command == "verify":  # the stage that starts sandboxes
        await check_storage_caps(config.sandbox, tasks)
    async with open_pipeline(
        config,
        run_dir=run_dir,
        # the scripted stand-in reads exactly these tasks' reference solutions
        tasks_dir=write_task_list(tasks, run_dir),
        sim_servers=args.sim_servers,
        force=args.force,
        on_notice=partial(print, file=sys.stderr),
    ) as pipeline:
        async with shutdown_on_signals(pipeline.engine) as signals:
            async for _ in pipeline.run(tasks, stages=(args.command,), allow_scripted=args.allow_scripted):
                done += 1
        figures = await anyio.to_thread.run_sync(pipeline_figures, pipeline.engine.store)
        code = exit_code(pipeline.engine.statistics(), signals)
    print(render_figures(figures), file=sys.stderr)
    print(f"{args.command}: {done} jobs in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return code
