"""The resources an episode needs, opened and closed together.

:func:`episode_runtime` opens the model side (the configured SGLang servers or router,
or embedded simulator subprocesses with the scripted stand-in model when none is
configured) and the sandbox side (a :class:`~rsr_async.sandbox.SandboxPool` labelled
with the run's id), and yields an :class:`EpisodeRuntime` whose ``runner`` is what the
engine calls per job. Both the ``run`` command and an embedding program use it.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import msgspec

from ..config import Config
from ..engine import Job
from ..errors import InfraError
from ..llm import ModelRouter, spawn_sim_servers
from ..sandbox import SandboxPool, bootstrap_base_image
from ..schema import EpisodeSpec, Task
from .episode import EpisodeRunner

__all__ = ["EpisodeRuntime", "episode_runtime", "prewarm_wave", "run_id_for"]


class EpisodeRuntime(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`episode_runtime` yields."""

    runner: EpisodeRunner
    model: ModelRouter
    pool: SandboxPool
    scripted: bool
    """True when the answers come from the scripted stand-in (a test double)."""
    gauges: dict[str, Callable[[], float]]
    """Live numbers for the engine's display: sandboxes alive, cached share."""


def run_id_for(run_dir: Path) -> str:
    """The label value of every container of a run: stable per run directory, so a rerun
    after a crash recognises (and sweeps) its predecessor's containers."""
    return f"discover-{hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:12]}"


@asynccontextmanager
async def episode_runtime(
    config: Config,
    *,
    run_dir: Path,
    tasks_dir: Path | None = None,
    sim_servers: int = 1,
    on_notice: Callable[[str], None] | None = None,
) -> AsyncIterator[EpisodeRuntime]:
    """Open the model and sandbox sides for ``config``; close both on exit.

    ``tasks_dir`` tells embedded simulators where the tasks' reference solutions are
    (the scripted stand-in types them). ``on_notice`` receives the line saying that the
    scripted stand-in is in use.
    """
    await bootstrap_base_image(config.sandbox)  # idempotent: skips when the image exists
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
        pool = await stack.enter_async_context(
            SandboxPool(config.sandbox, run_id=run_id_for(run_dir), run_dir=run_dir)
        )
        # A separately started simulator names its model; it is still a test double.
        scripted = scripted or "scripted" in model.model_name
        yield EpisodeRuntime(
            runner=EpisodeRunner(
                pool=pool,
                model=model,
                harness=config.harness,
                scripted=scripted,
                max_concurrent_verifiers=config.sandbox.max_concurrent_verifiers,
            ),
            model=model,
            pool=pool,
            scripted=scripted,
            gauges={
                "sandboxes": lambda: float(pool.statistics().live),
                "cached_share": lambda: model.statistics().usage.cached_share,
            },
        )


async def prewarm_wave(pool: SandboxPool, jobs: Sequence[Job]) -> int:
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
