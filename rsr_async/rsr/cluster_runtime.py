"""The head's runtime for a Ray run (``cluster.ray_address``): the model side here,
episodes dispatched to one actor per node, each of which opens this pipeline's
:func:`~.runtime.episode_runtime` on its node.

:mod:`rsr_async.cluster` is generic (dispatch, actors, Ray); this module is where the
pipeline wires itself onto it, so the cluster room never imports the pipeline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio

from ..cluster import Dispatcher
from ..cluster.ray_backend import open_ray, ray_remotes
from ..config import Config
from .pipeline import model_runners
from .runtime import EpisodeRuntime, episode_runtime, model_side, run_id_for

__all__ = ["cluster_runtime"]


@asynccontextmanager
async def cluster_runtime(
    config: Config,
    *,
    run_dir: Path,
    tasks_dir: Path | None = None,
    sim_servers: int = 1,
    on_notice: Callable[[str], None] | None = None,
) -> AsyncIterator[EpisodeRuntime]:
    """The head's :class:`~.runtime.EpisodeRuntime` for a Ray run: the
    model side here, episodes dispatched to one actor per node of
    ``cluster.ray_address``. The dataset (and ``tasks_dir``) must be readable at the same
    path on every node."""
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
                runtime=episode_runtime,
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
