"""The engine room: scheduler, durable store, resume, progress and metrics.

::

    from rsr_async.engine import Engine, Job

    async with Engine(config, runner=runner, run_dir="runs/demo") as engine:
        async for result in engine.run(jobs, graph=None):
            print(result.key, result.status)

See :class:`Engine` for the contract, :mod:`.jobs` for what a runner must do,
:mod:`.store` for the database's writer, :mod:`.reader` for reading a run (what
analysis, the viewer and export use), :mod:`.signals` for CLI signal handling and exit
codes. The resume policy the writer applies is :mod:`rsr_async.resume`.
"""

from __future__ import annotations

from ..resume import resume_view
from .jobs import Job, JobContext, JobRunner
from .limits import Limits, RateLimiter
from .looplag import LoopLagMonitor
from .progress import NullProgress, PlainProgress, ProgressSink, RichProgress, Snapshot, StageView
from .reader import FINISHED, JobRow, RunReader
from .scheduler import Engine, EngineStats, JobGraph, StageStats
from .signals import (
    EXIT_INTERRUPTED,
    EXIT_JOB_ERRORS,
    EXIT_OK,
    SignalState,
    add_engine_arguments,
    engine_config_values,
    exit_code,
    run_async,
    shutdown_on_signals,
    tune_gc,
)
from .store import Store

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_JOB_ERRORS",
    "EXIT_OK",
    "FINISHED",
    "Engine",
    "EngineStats",
    "Job",
    "JobContext",
    "JobRow",
    "JobRunner",
    "Limits",
    "LoopLagMonitor",
    "JobGraph",
    "NullProgress",
    "PlainProgress",
    "ProgressSink",
    "RateLimiter",
    "RichProgress",
    "RunReader",
    "SignalState",
    "Snapshot",
    "StageStats",
    "StageView",
    "Store",
    "add_engine_arguments",
    "engine_config_values",
    "exit_code",
    "run_async",
    "resume_view",
    "shutdown_on_signals",
    "tune_gc",
]
