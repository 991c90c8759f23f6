"""Where the pipeline is wired: the runtime and the engine, opened together.

:func:`open_pipeline` is the one function the CLI and embedding programs use. It opens
the model side (the configured SGLang servers or router, or embedded simulator
subprocesses with the scripted stand-in model when none is configured), the sandbox
side (a provider from the backend ``sandbox.backend`` names, labelled with the run's id:
:mod:`rsr_async.sandbox.backends`), one runner per job kind, and the
:class:`~rsr_async.engine.Engine` on the run directory, and yields a :class:`Pipeline`
that runs any stages of the RSR graph::

    async with open_pipeline(config, run_dir="runs/x") as pipeline:
        async for result in pipeline.run(tasks, stages=("discover", "rewrite", "verify")):
            ...

:func:`episode_runtime` opens the runtime alone (benchmarks and tests use it). The
engine package never imports this module; the sandbox package never imports tasks.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Literal

import anyio
import msgspec

from ..config import Config, SandboxConfig
from ..engine import Engine, Job, JobRunner, ProgressSink, Store
from ..errors import ConfigError, ConfigMismatchError, InfraError, LLMConnectionError
from ..llm import ModelRouter, spawn_sim_servers
from ..llm.base import SCRIPTED_MARK
from ..phases import LIVE_PHASES
from ..sandbox.backends import sandbox_backend
from ..sandbox.base import SandboxProvider
from ..schema import EpisodeSpec, JobResult, Task
from .discover import discover_jobs
from .episode import EpisodeRunner
from .pipeline import RewriteGraph, job_stages, model_runners, stage_settings

__all__ = [
    "EpisodeRuntime",
    "Pipeline",
    "check_model_identity",
    "episode_runtime",
    "model_identity",
    "model_side",
    "open_pipeline",
    "prewarm_wave",
    "run_id_for",
]


class EpisodeRuntime(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`episode_runtime` yields (and, for a Ray run, the head's runtime from
    :func:`rsr_async.rsr.cluster_runtime.cluster_runtime`, whose episodes run on Ray actors)."""

    runner: JobRunner
    """The episode runner: an :class:`EpisodeRunner`, or a Ray run's dispatcher."""
    runners: dict[str, JobRunner]
    """One runner per job kind: ``episode``, ``plan``, ``critique``, ``audit``."""
    model: ModelRouter
    pool: SandboxProvider | None
    """This process's sandbox provider (from the backend ``sandbox.backend`` names); None
    on a Ray run's head (the actors own them)."""
    scripted: bool
    """True when the answers come from the scripted stand-in (a test double)."""
    gauges: dict[str, Callable[[], float]]
    """Live numbers for the engine's display: sandboxes alive, cached share."""
    peak_sandboxes: Callable[[], int] | None = None
    """The most sandboxes alive at once so far (default: the pool's)."""

    def peak_live(self) -> int:
        """The most sandboxes alive at once so far."""
        if self.peak_sandboxes is not None:
            return self.peak_sandboxes()
        return self.pool.statistics().peak_live if self.pool is not None else 0


_log = logging.getLogger(__name__)


def run_id_for(run_dir: Path) -> str:
    """The label value of every container of a run: stable per run directory, so a rerun
    after a crash recognises (and sweeps) its predecessor's containers."""
    return f"discover-{hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:12]}"


@asynccontextmanager
async def model_side(
    config: Config,
    *,
    tasks_dir: Path | None = None,
    sim_servers: int = 1,
    on_notice: Callable[[str], None] | None = None,
) -> AsyncIterator[tuple[ModelRouter, bool]]:
    """Open the model side alone: ``(router, scripted)``. The configured servers, or
    embedded simulators with the scripted stand-in when none is configured; every
    server is probed (``/health``, ``llm.probe_timeout_s``): all down raises
    :class:`~rsr_async.errors.LLMConnectionError` naming the URLs, some down warns."""
    scripted = not config.llm.urls
    async with AsyncExitStack() as stack:
        urls = list(config.llm.urls)
        if scripted:
            if on_notice is not None:
                on_notice(SCRIPTED_NOTICE)
            urls = await stack.enter_async_context(
                spawn_sim_servers(config.sim, count=sim_servers, tasks_dir=tasks_dir)
            )
        model = await stack.enter_async_context(ModelRouter(config.llm, urls=urls))
        # The model side first, before any image or container: a fleet down from the
        # start is one clear error here, not one infra failure per episode.
        down = await model.probe_servers()
        if len(down) == len(urls):
            raise LLMConnectionError(
                f"no model server answered /health within llm.probe_timeout_s="
                f"{config.llm.probe_timeout_s} s: {', '.join(down)}; no sandbox was started. "
                "Start the servers (python -m rsr_async serve) or fix --llm-url / llm.urls"
            )
        if down:
            message = (
                f"warning: {len(down)} of {len(urls)} model servers did not answer /health "
                f"and get no calls until they do: {', '.join(down)}"
            )
            _log.warning(message)
            if on_notice is not None:
                on_notice(message)
        # A separately started simulator names its model; it is still a test double.
        yield model, scripted or "scripted" in model.model_name


@asynccontextmanager
async def episode_runtime(
    config: Config,
    *,
    run_dir: Path,
    tasks_dir: Path | None = None,
    sim_servers: int = 1,
    on_notice: Callable[[str], None] | None = None,
    run_id: str | None = None,
) -> AsyncIterator[EpisodeRuntime]:
    """Open the model and sandbox sides for ``config``; close both on exit.

    ``tasks_dir`` tells embedded simulators where the tasks' reference solutions are
    (the scripted stand-in types them). ``on_notice`` receives the line saying that the
    scripted stand-in is in use, and the warning naming servers down at the start.
    ``run_id`` labels the provider's sandboxes (default: :func:`run_id_for` ``run_dir``).
    The sandboxes come from the backend ``sandbox.backend`` names (Docker, or ``fake`` for
    tests: :mod:`rsr_async.sandbox.backends`); an unknown name fails before anything opens.

    The model side (:func:`model_side`) is opened and probed before the backend is
    prepared (Docker: the base image) or any sandbox started.
    """
    backend = sandbox_backend(config.sandbox)
    async with AsyncExitStack() as stack:
        model, scripted = await stack.enter_async_context(
            model_side(config, tasks_dir=tasks_dir, sim_servers=sim_servers, on_notice=on_notice)
        )
        await backend.prepare()  # idempotent: Docker skips the base image when it exists
        pool = await stack.enter_async_context(
            backend.open(run_id=run_id or run_id_for(run_dir), run_dir=run_dir)
        )
        sandboxes = pool  # bound for the gauges' closures
        episodes = EpisodeRunner(
            pool=pool,
            model=model,
            harness=config.harness,
            scripted=scripted,
            max_concurrent_verifiers=config.sandbox.max_concurrent_verifiers,
            stop_agent_before_tests=config.sandbox.stop_agent_before_tests,
            rsrt_wall_clock_s=config.rsr.rsrt_wall_clock_min * 60.0,
            model_call_budget_s=config.harness.model_call_budget_s,
        )
        yield EpisodeRuntime(
            runner=episodes,
            runners={"episode": episodes, **model_runners(model, config, scripted=scripted)},
            model=model,
            pool=pool,
            scripted=scripted,
            gauges={
                "sandboxes": lambda: float(sandboxes.statistics().live),
                "cached_share": lambda: model.statistics().usage.cached_share,
                # Mean seconds per finished episode, by phase (see rsr_async.phases).
                **{f"{name}_s": partial(episodes.phases.mean, name) for name in LIVE_PHASES},
            },
        )


async def check_storage_caps(sandbox: SandboxConfig, tasks: Sequence[Task]) -> None:
    """Refuse, before anything starts, tasks the sandbox hosts cannot run as they ask:
    the backend's :meth:`~rsr_async.sandbox.base.SandboxBackend.check_tasks` (for Docker,
    ``storage_mb`` on a storage driver that cannot cap a container's disk, unless
    ``sandbox.allow_uncapped_storage`` opts in). A :class:`~rsr_async.errors.ConfigError`
    naming the tasks and the hosts; an unknown ``sandbox.backend`` fails here too."""
    await sandbox_backend(sandbox).check_tasks(tasks)


async def prewarm_wave(pool: SandboxProvider, jobs: Sequence[Job]) -> int:
    """Start one sandbox per job in ``jobs`` ahead of time (building images as needed).

    A task whose image cannot be built or started is skipped with its error left for its
    episodes to meet and record; the rest still warm up. Returns the containers started.
    """
    wanted: Counter[str] = Counter()
    tasks: dict[str, Task] = {}
    for job in jobs:
        if isinstance(job.spec, EpisodeSpec):
            wanted[job.spec.task.name] += 1
            tasks[job.spec.task.name] = job.spec.task
    started = 0

    async def warm(name: str, count: int) -> None:
        nonlocal started
        with contextlib.suppress(InfraError):  # the episodes will record it as infra_error
            started += await pool.prewarm(tasks[name], count)

    async with anyio.create_task_group() as tg:
        for name, count in wanted.items():
            tg.start_soon(warm, name, count)
    return started


SCRIPTED_NOTICE = (
    "No --llm-url given: starting the embedded SGLang simulator with the scripted "
    "stand-in model. It is a TEST DOUBLE that types the tasks' reference solutions with "
    "a seeded probability; its pass rates are not a model's results."
)


class Pipeline:
    """An open engine with its runtime: runs stages of the RSR graph on one run directory.

    Yielded by :func:`open_pipeline`; ``engine`` and ``runtime`` stay reachable for
    queries (``pipeline.engine.store``) and live numbers.
    """

    def __init__(self, config: Config, engine: Engine, runtime: EpisodeRuntime, *, force: bool) -> None:
        self.config = config
        self.engine = engine
        self.runtime = runtime
        self._force = force

    async def run(
        self,
        tasks: Sequence[Task],
        *,
        stages: Iterable[str] = ("discover",),
        allow_scripted: bool = False,
    ) -> AsyncIterator[JobResult]:
        """Run ``stages`` (of ``discover``, ``rewrite``, ``verify``) over ``tasks``; yield
        each result once stored. Stages not named are walked, never run: ``rewrite`` alone
        plans from the successes an earlier ``discover`` stored.

        Rewriting the scripted stand-in's trajectories (a test double) is refused unless
        ``allow_scripted``."""
        wanted = job_stages(stages)
        if wanted - {"discover"} and self.runtime.scripted and not allow_scripted:
            raise ConfigError(
                "the rewrite and verify stages refuse the scripted stand-in's trajectories "
                "(a test double, not a model); pass --allow-scripted to run them anyway"
            )
        settings = stage_settings(self.config)
        store = self.engine.store
        for stage in sorted(wanted & settings.keys()):
            await anyio.to_thread.run_sync(
                partial(store.check_stage_config, stage, settings[stage], force=self._force)
            )
        graph = RewriteGraph(self.config) if wanted - {"discover"} else None
        jobs = discover_jobs(tasks, self.config)
        async for result in self.engine.run(jobs, graph=graph, only_stages=wanted, stage="pipeline"):
            yield result


@asynccontextmanager
async def open_pipeline(
    config: Config,
    *,
    run_dir: Path | str,
    tasks_dir: Path | None = None,
    sim_servers: int = 1,
    force: bool = False,
    progress: ProgressSink | Literal["auto", "rich", "plain", "none"] | None = None,
    on_notice: Callable[[str], None] | None = None,
) -> AsyncIterator[Pipeline]:
    """Open the runtime (model side, sandbox pool, one runner per job kind) and the
    engine on ``run_dir`` together; close both on exit.

    The sandboxes come from the backend ``sandbox.backend`` names, here or on each Ray
    actor: tests and ``bench dryrun`` set ``fake`` and keep everything else real.

    Refuses (:class:`~rsr_async.errors.ConfigMismatchError`) to mix two models'
    results in one run directory unless ``force``.
    """
    run_dir = Path(run_dir)
    sandbox_backend(config.sandbox)  # an unknown name fails here, before anything starts
    if config.cluster.ray_address:
        from .cluster_runtime import cluster_runtime  # Ray only when a run asks for it

        opened = cluster_runtime(
            config, run_dir=run_dir, tasks_dir=tasks_dir, sim_servers=sim_servers, on_notice=on_notice
        )
    else:
        opened = episode_runtime(
            config,
            run_dir=run_dir,
            tasks_dir=tasks_dir,
            sim_servers=sim_servers,
            on_notice=on_notice,
        )
    async with (
        opened as runtime,
        Engine(
            config,
            runner=runtime.runners,
            run_dir=run_dir,
            force=force,
            gauges=runtime.gauges,
            progress=progress,
        ) as engine,
    ):
        await check_model_identity(engine.store, runtime, run_dir, force=force)
        yield Pipeline(config, engine, runtime, force=force)


def model_identity(runtime: EpisodeRuntime) -> str:
    """How a run directory records which model answered (and whether it was scripted)."""
    return runtime.model.model_name + (SCRIPTED_MARK if runtime.scripted else "")



async def check_model_identity(store: Store, runtime: EpisodeRuntime, run_dir: Path, *, force: bool) -> None:
    """Refuse to mix results of two different models in one run (unless forced).

    A model no server named (every server was down at the start, so the episodes end as
    infrastructure errors) is unknown, not another model: it is neither checked nor
    recorded, so the rerun that retries those episodes once a server is back resumes."""
    if not runtime.model.model_name:
        return
    identity = model_identity(runtime)
    stored = store.meta().get("model")
    if stored and stored != identity and not force:
        raise ConfigMismatchError(
            f"{run_dir}: this run's results came from {stored!r}, but the model now is "
            f"{identity!r}; use a new --run-dir (or --force to mix them)"
        )
    future = store.call(
        lambda con: con.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('model', ?)", (identity,)
        )
    )
    await anyio.to_thread.run_sync(future.result)
