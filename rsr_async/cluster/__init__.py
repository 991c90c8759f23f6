"""One run across many machines: the head keeps the store, Ray actors run the episodes.

Shape (``run --ray ADDRESS``, or ``cluster.ray_address`` when embedding)::

    head process (one event loop)                     Ray node (one per machine)
    ├── Engine: the one store, exactly-once keys,     ├── EpisodeActor (its own event loop)
    │   deadlines, infra retries, the job graph       │   ├── episode_runtime: this node's
    ├── model side: planner, critic, auditor jobs     │   │   Docker host(s), its share of
    └── Dispatcher (the engine's episode runner) ───▶ │   │   the model servers
          batches of attempts ⇄ batches of outcomes   │   └── RemoteRunner: runs attempts
                                                      └── ...

Why this shape: the engine already is the scheduler that makes a rerun do each job
exactly once, and only it writes the store; a remote runner is just another runner to
it, so every guarantee (deadlines, retries of infrastructure errors, cancellation with
the partial trajectory, resume) holds unchanged. Ray brings what one box lacks: placing
a process on every node, and telling the head when an actor or node dies. Jobs cross in
batches (:mod:`.wire`), because a Ray call costs the head far more CPU than storing a
job does. A lost actor's in-flight attempts are infrastructure errors the engine retries
on the actors left (:mod:`.dispatch`); the survivors sweep its containers.

Model-only jobs (planner, critic, auditor) stay on the head: they hold no sandbox, and
the head reaches the model servers (or the router) itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from ..config import Config
from .dispatch import Dispatcher, DispatchStats, Remote
from .worker import InProcessRemote, RemoteRunner, sleeping_runner, trivial_runner

if TYPE_CHECKING:
    from ..rsr.runtime import EpisodeRuntime

__all__ = [
    "DispatchStats",
    "Dispatcher",
    "InProcessRemote",
    "Remote",
    "RemoteRunner",
    "cluster_runtime",
    "sleeping_runner",
    "trivial_runner",
]


@asynccontextmanager
async def cluster_runtime(
    config: Config,
    *,
    run_dir: Path,
    tasks_dir: Path | None = None,
    sim_servers: int = 1,
    on_notice: Callable[[str], None] | None = None,
) -> AsyncIterator[EpisodeRuntime]:
    """The head's :class:`~rsr_async.rsr.runtime.EpisodeRuntime` for a Ray run: the
    model side here, episodes dispatched to one actor per node of
    ``cluster.ray_address``. The dataset (and ``tasks_dir``) must be readable at the same
    path on every node."""
    from ..rsr.pipeline import model_runners
    from ..rsr.runtime import EpisodeRuntime, model_side, run_id_for  # noqa: F811
    from .ray_backend import open_ray, ray_remotes

    cluster = config.cluster
    async with AsyncExitStack() as stack:
        model, scripted = await stack.enter_async_context(
            model_side(config, tasks_dir=tasks_dir, sim_servers=sim_servers, on_notice=on_notice)
        )
        await stack.enter_async_context(open_ray(cluster.ray_address))
        fleet = await stack.enter_async_context(
            ray_remotes(
                config,
                run_id=run_id_for(run_dir),
                tasks_dir=str(tasks_dir) if tasks_dir else None,
                on_notice=on_notice,
            )
        )
        dispatcher = Dispatcher(
            fleet.remotes,
            batch_max=cluster.batch_max,
            batch_window_s=cluster.batch_window_ms / 1000.0,
            poll_wait_s=cluster.poll_wait_s,
            on_lost=fleet.on_lost,
            replace=fleet.replace,
        )
        tg = await stack.enter_async_context(anyio.create_task_group())
        await tg.start(dispatcher.serve)
        stack.callback(tg.cancel_scope.cancel)
        if on_notice is not None:
            on_notice(
                f"ray: {len(fleet.remotes)} episode actors on {len(set(fleet.nodes.values()))} nodes, "
                f"{dispatcher.capacity} episodes at once"
            )
        yield EpisodeRuntime(
            runner=dispatcher,
            runners={"episode": dispatcher, **model_runners(model, config, scripted=scripted)},
            model=model,
            pool=None,
            scripted=scripted,
            gauges={
                "sandboxes": lambda: float(dispatcher.statistics().live_sandboxes),
                "cached_share": lambda: model.statistics().usage.cached_share,
            },
            peak_sandboxes=lambda: dispatcher.statistics().peak_sandboxes,
        )
