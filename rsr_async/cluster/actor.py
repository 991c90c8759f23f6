"""The body of a Ray episode actor: one node's runtime behind a :class:`.RemoteRunner`.

This module does not import Ray; :mod:`.ray_backend` wraps :class:`EpisodeActor` with
``ray.remote`` when a run asks for Ray. Each actor owns what its node has: the node's
sandbox host(s) (for Docker, ``sandbox.docker_urls`` as the node sees them, by default
its own socket) and its share of the model servers, and opens them exactly as a
one-machine run does (the :class:`OpenRuntime` it is handed, the pipeline's
``episode_runtime``): probe the model servers, prepare the ``sandbox.backend`` (Docker:
the base image when missing), open its sandbox provider.

The provider of actor ``i`` labels its sandboxes with the run's id plus ``-a<i>``, so two
actors on one host never sweep each other's sandboxes, and a later run's actor ``i``
recognises its predecessor's leftovers. Its run directory is node-local scratch (the
head keeps the run directory and the store).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from pathlib import Path
from typing import Any, Literal, Protocol

import anyio
import msgspec

from ..config import Config
from ..errors import HarnessError, RsrError
from ..sandbox.backends import sandbox_backend
from ..sandbox.base import SandboxProvider
from .worker import RemoteRunner, sleeping_runner

__all__ = ["EpisodeActor", "NodeRuntime", "OpenRuntime", "actor_run_id"]

_STOP_TIMEOUT_S = 60.0


class NodeRuntime(Protocol):
    """What an actor serves from: the episode runner, the other runners by stage, and
    the sandbox pool whose statistics it reports (None when it has none)."""

    @property
    def runner(self) -> Any: ...
    @property
    def runners(self) -> Mapping[str, Any]: ...
    @property
    def pool(self) -> Any: ...


class OpenRuntime(Protocol):
    """Opens one node's runtime (the pipeline's ``episode_runtime``). The head hands it
    to every actor; Ray pickles it by reference, so each node imports the pipeline
    itself, and this room never does."""

    def __call__(
        self, config: Config, *, run_dir: Path, tasks_dir: Path | None, run_id: str
    ) -> AbstractAsyncContextManager[NodeRuntime]: ...


def actor_run_id(run_id: str, index: int) -> str:
    """The container label value (pool run id) of actor ``index`` of run ``run_id``."""
    return f"{run_id}-a{index}"


class EpisodeActor:
    """Opens a node's runtime in :meth:`start` and serves head calls until :meth:`stop`.

    ``mode="episodes"`` serves the runtime ``runtime`` opens on this node;
    ``mode="trivial"`` runs every job with :func:`~.worker.sleeping_runner` (after
    ``trivial_latency_s``) and opens no runtime: what ``bench scale`` measures with.
    """

    def __init__(
        self,
        config: bytes,
        *,
        index: int,
        run_id: str,
        tasks_dir: str | None = None,
        mode: Literal["episodes", "trivial"] = "episodes",
        trivial_latency_s: float = 0.0,
        runtime: OpenRuntime | None = None,
    ) -> None:
        if mode == "episodes" and runtime is None:
            raise HarnessError("an episode actor needs the function that opens its runtime (runtime=)")
        self._config = msgspec.json.decode(config, type=Config)
        self._index = index
        self._run_id = actor_run_id(run_id, index)
        self._tasks_dir = Path(tasks_dir) if tasks_dir else None
        self._mode = mode
        self._trivial_latency_s = trivial_latency_s
        self._open_runtime = runtime
        self._runner: RemoteRunner | None = None
        self._pool: SandboxProvider | None = None
        self._started = asyncio.Event()
        self._stopping = asyncio.Event()
        self._error: BaseException | None = None
        self._holder: asyncio.Task[None] | None = None
        self._scratch = ""

    async def start(self) -> dict[str, Any]:
        """Open the runtime; returns where this actor runs. Raises what opening raised."""
        if self._holder is None:
            # The runtime must outlive this call, so a task holds it open; stop() ends it
            # and waits for it (an actor has no enclosing task group across its calls).
            self._holder = asyncio.get_running_loop().create_task(self._hold())
        await self._started.wait()
        if self._error is not None:
            raise HarnessError(
                f"episode actor {self._index} on {socket.gethostname()} could not open its "
                f"runtime: {type(self._error).__name__}: {self._error}"
            ) from None
        return {"host": socket.gethostname(), "pid": os.getpid(), "run_id": self._run_id}

    async def _hold(self) -> None:
        try:
            async with AsyncExitStack() as stack:
                if self._mode == "trivial":
                    runners: dict[str, Any] = {"*": sleeping_runner(self._trivial_latency_s)}
                else:
                    assert self._open_runtime is not None  # checked in __init__
                    self._scratch = tempfile.mkdtemp(prefix=f"rsr-ray-{self._run_id}-")
                    runtime = await stack.enter_async_context(
                        self._open_runtime(
                            self._config,
                            run_dir=Path(self._scratch),
                            tasks_dir=self._tasks_dir,
                            run_id=self._run_id,
                        )
                    )
                    runners = {"*": runtime.runner, **runtime.runners}
                    self._pool = runtime.pool
                self._runner = RemoteRunner(runners, name=f"actor-{self._index}")
                async with anyio.create_task_group() as tg:
                    await tg.start(self._runner.serve)
                    self._started.set()
                    await self._stopping.wait()
                    tg.cancel_scope.cancel()
        except (RsrError, OSError) as exc:
            self._error = exc
        finally:
            self._runner = None
            self._started.set()
            if self._scratch:
                shutil.rmtree(self._scratch, ignore_errors=True)

    def _serving(self) -> RemoteRunner:
        if self._runner is None:
            raise HarnessError(f"episode actor {self._index} is not serving (not started, or stopped)")
        return self._runner

    async def submit(self, data: bytes) -> int:
        return self._serving().submit(data)

    async def poll(self, wait_s: float) -> bytes:
        stats = self._pool.statistics() if self._pool is not None else None
        return await self._serving().poll(
            wait_s,
            live_sandboxes=stats.live if stats else 0,
            peak_sandboxes=stats.peak_live if stats else 0,
        )

    async def cancel(self, keys: list[str]) -> bytes:
        return await self._serving().cancel(keys)

    async def sweep(self, run_ids: list[str]) -> int:
        """Remove every sandbox of ``run_ids`` (lost actors' pools) on this actor's
        hosts, through its ``sandbox.backend``; returns how many were removed."""
        return await sandbox_backend(self._config.sandbox).sweep(run_ids)

    async def stop(self) -> None:
        """Cancel what runs, close the runtime (its sandboxes are removed), and return."""
        self._stopping.set()
        if self._holder is not None:
            with anyio.move_on_after(_STOP_TIMEOUT_S):
                await asyncio.shield(self._holder)

    def pid(self) -> int:
        return os.getpid()
