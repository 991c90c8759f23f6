"""Ray, and only here: connect, start one episode actor per node, call them, lose them.

Ray is an optional extra (``pip install 'rsr_async[ray]'``); this module imports it when
a run asks for it (``run --ray ADDRESS``), never on ``import rsr_async``.

* :func:`open_ray` connects to ``cluster.ray_address`` (``local``: a private instance
  on this machine, shut down on exit, and killed whole by a
  :class:`~rsr_async.lifeline.Reaper` if this process is) in a worker thread, since
  ``ray.init`` blocks.
* :func:`ray_remotes` starts ``cluster.actors_per_node`` :class:`~.actor.EpisodeActor`
  on every alive node that offers ``cluster.actor_cpus`` CPUs, pinned to it (node
  affinity, not soft), waits for each to open its runtime, and yields one
  :class:`RayRemote` per actor that started. On exit it stops them (their sandboxes
  are removed) and kills any that do not stop in time.
* A call that fails with a Ray error, or outlives its deadline, raises
  :class:`~rsr_async.errors.RunnerLostError`; :meth:`RayFleet.on_lost` then kills the
  actor for certain and has every surviving actor sweep the lost one's containers.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import msgspec

from ..config import Config
from ..errors import ConfigError, InfraError, RunnerLostError
from ..lifeline import Reaper, descendants
from .actor import EpisodeActor, OpenRuntime, actor_run_id

__all__ = ["RayFleet", "RayRemote", "actor_config", "import_ray", "open_ray", "ray_remotes", "url_share"]

_log = logging.getLogger(__name__)

_NODES_TIMEOUT_S = 30.0
"""Deadline for asking the GCS which nodes are alive."""


def import_ray() -> Any:
    """The ``ray`` module, or a ConfigError saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(
            "cluster.ray_address is set (run --ray) but Ray is not installed; "
            "install it with: pip install 'rsr_async[ray]'"
        ) from exc
    return ray


@asynccontextmanager
async def open_ray(address: str, *, namespace: str = "rsr_async") -> AsyncIterator[Any]:
    """Connect this process to the Ray cluster at ``address`` for the block's length."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray  # an embedding program connected already: its connection, its to close
        return

    # Ray fate-shares its GCS server and raylet with this driver, but the raylet's agents
    # (DashboardAgent, RuntimeEnvAgent) outlive a SIGKILLed driver by minutes: for a
    # private instance, a watcher kills what it started (and nothing else of ours) once
    # we are gone. The Reaper reads /proc (Linux).
    reaper = Reaper() if address == "local" and sys.platform.startswith("linux") else None

    def connect() -> None:
        """In a worker thread: ``ray.init`` blocks, and so do the /proc scans around it."""
        options: dict[str, Any] = {"namespace": namespace, "log_to_driver": False, "address": address}
        if address == "local":  # a new instance, even where RAY_ADDRESS names another
            options.update(include_dashboard=False, object_store_memory=128 * 2**20)
        before = set(descendants(os.getpid())) if reaper is not None else set()
        try:
            ray.init(**options)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InfraError(f"cannot connect to the Ray cluster at {address!r}: {exc}") from exc
        if reaper is not None:
            # Only Ray's processes, new since the snapshot: its programs live under its
            # package (.../ray/...), its workers and agents are named ray::<Name>; a
            # simulator of ours started meanwhile is not the Reaper's to kill.
            ours = descendants(os.getpid(), marks=(f"{os.sep}ray{os.sep}", "ray::"))
            reaper.track([p for p in ours if p not in before])

    try:
        await anyio.to_thread.run_sync(connect)
        yield ray
    finally:
        with anyio.CancelScope(shield=True):
            if ray.is_initialized():
                await anyio.to_thread.run_sync(ray.shutdown)
            if reaper is not None:
                await anyio.to_thread.run_sync(reaper.close)


class RayRemote:
    """One episode actor as the dispatcher's :class:`~.dispatch.Remote`."""

    def __init__(self, ray: Any, actor: Any, *, name: str, capacity: int, run_id: str,
                 call_timeout_s: float, node_id: str = "") -> None:
        self._ray = ray
        self.node_id = node_id
        """The Ray node it is pinned to."""
        self.actor = actor
        self.name = name
        self.capacity = capacity
        self.run_id = run_id
        """The container label of this actor's pool (what a sweep after its loss removes)."""
        self._timeout_s = call_timeout_s

    async def _call(self, what: str, method: Any, *args: Any, timeout_s: float | None = None) -> Any:
        timeout = self._timeout_s if timeout_s is None else timeout_s
        try:
            with anyio.fail_after(timeout):
                return await method.remote(*args)
        except TimeoutError:
            raise RunnerLostError(f"{self.name}: no answer to {what} within {timeout:g} s") from None
        except self._ray.exceptions.RayError as exc:
            raise RunnerLostError(f"{self.name}: {what} failed: {type(exc).__name__}: {exc}") from exc

    async def submit(self, data: bytes) -> None:
        await self._call("submit", self.actor.submit, data)

    async def poll(self, wait_s: float) -> bytes:
        data: bytes = await self._call("poll", self.actor.poll, wait_s, timeout_s=wait_s + self._timeout_s)
        return data

    async def cancel(self, keys: list[str]) -> bytes:
        data: bytes = await self._call("cancel", self.actor.cancel, keys)
        return data


@dataclass
class RayFleet:
    """The started actors, as remotes for a :class:`~.dispatch.Dispatcher`."""

    ray: Any
    remotes: list[RayRemote]
    nodes: dict[str, str] = field(default_factory=dict)
    """Remote name → the Ray node id it is pinned to."""
    swept: int = 0
    """Containers of lost actors removed by the survivors so far."""
    on_notice: Callable[[str], None] | None = None
    spawn: Callable[[int, bytes, str], Any] | None = None
    """Starts actor ``index`` with an encoded config on a node: what :meth:`replace` uses."""
    configs: dict[str, bytes] = field(default_factory=dict)
    """Remote name → the encoded config it was started with (its share of the servers)."""
    replacements_left: int = 0
    failures: list[str] = field(default_factory=list)
    """Why actors did not start (each said once, as a warning)."""
    started: list[Any] = field(default_factory=list)
    """Every actor handle started, replacements too (all stopped at the end)."""

    lost: list[RayRemote] = field(default_factory=list)

    def _say(self, message: str) -> None:
        _log.warning(message)
        if self.on_notice is not None:
            self.on_notice(message)

    async def on_lost(self, name: str, exc: BaseException) -> None:
        lost = next(r for r in self.remotes if r.name == name)
        self.lost.append(lost)
        self._say(f"warning: lost {name} (node {self.nodes.get(name, '?')[:12]}): {exc}; its attempts are retried")
        await anyio.to_thread.run_sync(lambda: self.ray.kill(lost.actor, no_restart=True))
        await self.sweep_lost()

    async def replace(self, name: str) -> RayRemote | None:
        """A new actor on the node of lost ``name``, with its share of the model servers,
        when ``cluster.replace_lost`` allows one more and that node is alive; else None."""
        node_id = self.nodes.get(name, "")
        if self.spawn is None or self.replacements_left <= 0 or not node_id:
            return None
        self.replacements_left -= 1  # before any await: two losses at once take two
        try:
            with anyio.fail_after(_NODES_TIMEOUT_S):
                nodes = await anyio.to_thread.run_sync(self.ray.nodes, abandon_on_cancel=True)
        except TimeoutError:
            nodes = []  # the GCS does not answer: no node to trust
        if not any(n.get("NodeID") == node_id and n.get("Alive") for n in nodes):
            self.replacements_left += 1
            return None  # the node went with it: its work stays with the others
        await anyio.lowlevel.checkpoint()  # a shutdown begun meanwhile starts no actor
        index = len(self.started)
        remote: RayRemote | None = await self.spawn(index, self.configs[name], node_id)
        if remote is None:
            self._say(f"warning: no replacement for {name}: {self.failures[-1]}")
        else:
            self._say(f"ray: {remote.name} replaces {name} on node {node_id[:12]}")
        return remote

    async def sweep_lost(self) -> None:
        """Have every surviving actor remove the lost actors' containers on its hosts.

        Called at each loss and again when the run ends: an actor on a node being torn
        down can still finish a container create after the first sweep."""
        run_ids = [r.run_id for r in self.lost]
        if not run_ids:
            return
        for remote in self.remotes:
            if remote in self.lost:
                continue
            try:
                self.swept += await remote._call("sweep", remote.actor.sweep, run_ids)
            except RunnerLostError:
                continue  # its own collector will find out


@asynccontextmanager
async def ray_remotes(
    config: Config,
    *,
    run_id: str,
    tasks_dir: str | None = None,
    mode: Literal["episodes", "trivial"] = "episodes",
    trivial_latency_s: float = 0.0,
    on_notice: Callable[[str], None] | None = None,
    runtime: OpenRuntime | None = None,
) -> AsyncIterator[RayFleet]:
    """Start the episode actors on the connected cluster; stop them on exit.

    ``runtime`` opens each node's runtime (required unless ``mode="trivial"``)."""
    ray = import_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    cluster = config.cluster
    nodes = await anyio.to_thread.run_sync(ray.nodes)
    usable = [
        n for n in nodes
        if n.get("Alive") and n.get("Resources", {}).get("CPU", 0.0) >= max(cluster.actor_cpus, 1e-9)
    ]
    if not usable:
        raise InfraError(
            f"the Ray cluster has no alive node with cluster.actor_cpus={cluster.actor_cpus:g} CPUs "
            f"free for an episode actor ({len(nodes)} nodes known)"
        )
    count = len(usable) * cluster.actors_per_node
    capacity = max(1, math.ceil(config.run.concurrency / count))
    actor_class = ray.remote(EpisodeActor)
    fleet = RayFleet(ray=ray, remotes=[], on_notice=on_notice,
                     replacements_left=cluster.replace_lost)
    failures = fleet.failures

    async def spawn(index: int, encoded: bytes, node_id: str) -> RayRemote | None:
        """Start actor ``index`` on ``node_id`` and wait for its runtime; None (the
        reason in ``failures``) when it does not open."""
        name = f"actor-{index}"
        actor = actor_class.options(
            num_cpus=cluster.actor_cpus,
            max_concurrency=64,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        ).remote(encoded, index=index, run_id=run_id, tasks_dir=tasks_dir, mode=mode,
                 trivial_latency_s=trivial_latency_s, runtime=runtime)
        fleet.started.append(actor)
        try:
            with anyio.fail_after(cluster.start_timeout_s):
                await actor.start.remote()
        except TimeoutError:
            failures.append(f"{name}: did not open its runtime within cluster.start_timeout_s="
                            f"{cluster.start_timeout_s:g} s")
            return None
        except ray.exceptions.RayError as exc:
            failures.append(f"{name}: {_cause(exc)}")
            return None
        remote = RayRemote(ray, actor, name=name, capacity=capacity, run_id=actor_run_id(run_id, index),
                           call_timeout_s=cluster.call_timeout_s, node_id=node_id)
        fleet.remotes.append(remote)
        fleet.nodes[name] = node_id
        fleet.configs[name] = encoded
        return remote

    try:
        async with anyio.create_task_group() as tg:
            for index in range(count):
                encoded = msgspec.json.encode(actor_config(config, index, count, capacity))
                tg.start_soon(spawn, index, encoded, usable[index % len(usable)]["NodeID"])
        fleet.remotes.sort(key=lambda r: r.name)
        if not fleet.remotes:
            raise InfraError("no episode actor could start: " + "; ".join(failures))
        for failure in failures:
            fleet._say(f"warning: an episode actor did not start and gets no work: {failure}")
        fleet.spawn = spawn
        yield fleet
    finally:
        with anyio.CancelScope(shield=True):
            await fleet.sweep_lost()
            async with anyio.create_task_group() as tg:
                for actor in fleet.started:
                    tg.start_soon(_stop, ray, actor, cluster.call_timeout_s)


def url_share(urls: tuple[str, ...], index: int, count: int) -> tuple[str, ...]:
    """The model servers actor ``index`` of ``count`` talks to: every ``count``-th one,
    so each server has one actor's episodes (and their prefix cache); with fewer servers
    than actors (one router, say), actors share them round-robin."""
    if not urls:
        return ()
    if len(urls) >= count:
        return urls[index::count]
    return (urls[index % len(urls)],)


def actor_config(config: Config, index: int, count: int, capacity: int) -> Config:
    """The config actor ``index`` opens its runtime with: its share of the model servers
    and of ``run.concurrency``."""
    return msgspec.structs.replace(
        config,
        llm=msgspec.structs.replace(config.llm, urls=url_share(config.llm.urls, index, count)),
        run=msgspec.structs.replace(config.run, concurrency=capacity),
    )


async def _stop(ray: Any, actor: Any, timeout_s: float) -> None:
    try:
        with anyio.move_on_after(timeout_s):
            await actor.stop.remote()
    except ray.exceptions.RayError:
        pass  # already gone
    await anyio.to_thread.run_sync(lambda: ray.kill(actor, no_restart=True))


def _cause(exc: BaseException) -> str:
    """A Ray task error's own message (Ray wraps the remote exception in a long banner)."""
    cause = getattr(exc, "cause", None)
    if cause is not None:
        return f"{type(cause).__name__}: {cause}"
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
