"""Which image runs a task on a Docker host of a pool: found there, shipped from another
host that has it, or built there once.

Nothing is ever pulled (no registry is reachable). A task's image is its
``docker_image`` when the host holds it, else a build of its ``environment/`` over the
base image (:func:`~rsr_async.sandbox.images.build_task_image`), once per host and
content hash however many episodes ask at once; a compose task's services each get
theirs the same way (:meth:`HostImages.compose_images`). The base image, and a named
image a task cannot build, are streamed from another host that has them
(:func:`~rsr_async.sandbox.images.ship_image`) when a host lacks them: task images
build on each host instead, measured cheaper than shipping them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import anyio

from ..config import SandboxConfig
from ..errors import ImageError, TaskError
from ..schema import Task
from .compose import (
    MAIN_SERVICE,
    ComposeService,
    ComposeSpec,
    task_compose,
)
from .hosts import DockerHost
from .images import BuildOnce, build_context_image, build_task_image, image_id, ship_image

__all__ = ["HostImages"]

log = logging.getLogger(__name__)

_SHIP_TIMEOUT_S = 1800.0
"""Deadline for copying one image between two daemons (the base image: ~25 s here)."""


class HostImages:
    """The images one :class:`~rsr_async.sandbox.pool.SandboxPool` runs, per host.

    ``hosts`` is the pool's own list of hosts, read (never changed) here: where a missing
    image may be shipped from. Builds and copies are single flight per host and image,
    and at most ``sandbox.build_concurrency`` of them run at once.
    """

    def __init__(
        self, config: SandboxConfig, *, hosts: Sequence[DockerHost], run_dir: Path | None
    ) -> None:
        self.config = config
        self.run_dir = run_dir
        self._hosts = hosts
        self._builds = BuildOnce()
        self._ships = BuildOnce()
        self._build_limiter = anyio.Semaphore(max(1, config.build_concurrency))
        self._compose: dict[str, ComposeSpec | None] = {}
        """Task path → its parsed docker-compose.yaml (None: not a compose task)."""
        self.images_built = 0
        """Builds that ran (a task image already tagged with its content hash is no build)."""
        self.images_shipped = 0
        """Images copied from one host to another that lacked them."""

    async def compose_spec(self, task: Task) -> ComposeSpec | None:
        """The task's parsed ``docker-compose.yaml`` (once per task), None without one. The
        loader refused a bad file already; one changed since is the task's fault too."""
        cache_key = f"{task.path}\0{task.environment_dir}"
        if cache_key not in self._compose:

            def parse() -> ComposeSpec | None:
                return task_compose(
                    task, cpus=self.config.default_cpus, memory_mb=self.config.default_memory_mb
                )

            try:
                self._compose[cache_key] = await anyio.to_thread.run_sync(parse)
            except TaskError as exc:
                raise ImageError(str(exc)).as_permanent() from exc
        return self._compose[cache_key]

    async def ensure_present(self, host: DockerHost, name: str) -> str | None:
        """``name``'s id on ``host``, shipped there from another up host that has it
        (``images/get`` streamed into ``images/load``) when it is missing; None when no
        host has it."""
        timeout = self.config.api_timeout_s
        present = await image_id(host.docker, name, timeout_s=timeout, url=host.url, where=f"image {name}")
        if present is not None:
            return present
        for source in self._hosts:
            if source is host or not source.up:
                continue
            if await image_id(source.docker, name, timeout_s=timeout, url=source.url,
                              where=f"image {name}") is None:
                continue

            async def ship(source: DockerHost = source) -> str:
                async with self._build_limiter:
                    shipped = await ship_image(source.docker, host.docker, name,
                                               timeout_s=_SHIP_TIMEOUT_S,
                                               source_url=source.url, target_url=host.url)
                self.images_shipped += 1
                log.info("shipped image %s from %s to %s", name, source.url, host.url)
                return shipped

            return await self._ships.get(f"{host.url}\0{name}", ship)
        return None

    async def ensure_on(self, host: DockerHost, task: Task) -> str:
        """The image ``task`` runs on ``host`` (a compose task: its ``main`` service's):
        its ``docker_image`` when there (shipped in from another host when the task has no
        ``environment/`` to build), else its build, once per host."""
        spec = await self.compose_spec(task)
        if spec is not None:
            images = await self.compose_images(host, task, spec)
            return images[MAIN_SERVICE]
        timeout = self.config.api_timeout_s
        # A 400 here is a malformed reference (e.g. `UPPER/Case:bad tag`): the task's fault.
        where = f"task {task.name!r}: image {task.docker_image}"
        if task.docker_image and not task.environment_dir:
            present = await self.ensure_present(host, task.docker_image)
            if present is None:
                # Nothing is ever pulled here, so no later attempt finds it either.
                raise ImageError(
                    f"task {task.name!r}: image {task.docker_image} is not on {host.url} and "
                    "no registry is reachable; build or load it, or give the task an environment/"
                ).as_permanent()
            return task.docker_image
        if task.docker_image:
            if await image_id(host.docker, task.docker_image, timeout_s=timeout, url=host.url,
                              where=where):
                return task.docker_image
        key = f"{host.url}\0{task.name}\0{task.environment_dir}"

        return await self._build_once(host, key, lambda: build_task_image(
            host.docker,
            task,
            base_image=self.config.base_image,
            url=host.url,
            api_timeout_s=timeout,
            log_dir=self.run_dir / "builds" if self.run_dir else None,
        ))

    async def compose_images(self, host: DockerHost, task: Task, spec: ComposeSpec) -> dict[str, str]:
        """Service name → image on ``host``, each built once (or found: never pulled)."""
        return {service.name: await self._service_image(host, task, service) for service in spec.services}

    async def _service_image(self, host: DockerHost, task: Task, service: ComposeService) -> str:
        """One compose service's image on ``host``: its ``image`` if present, else its build."""
        timeout = self.config.api_timeout_s
        where = f"task {task.name!r} service {service.name!r}"
        if service.build_context is None:
            assert service.image is not None  # the parser gives every service one or the other
            present = await image_id(host.docker, service.image, timeout_s=timeout, url=host.url,
                                     where=f"{where}: image {service.image}")
            if present is None:
                raise ImageError(
                    f"{where}: image {service.image} is not on {host.url} and nothing is pulled "
                    "here; give the service a build (`ARG BASE_IMAGE` / `FROM ${BASE_IMAGE}`)"
                ).as_permanent()
            return service.image
        # main keeps the plain task image's tag: a task that grows a compose file with
        # the same environment/Dockerfile reuses its cached image.
        label = None if service.name == MAIN_SERVICE else service.name
        args = "\0".join(f"{k}={v}" for k, v in sorted(service.build_args.items()))
        key = (f"{host.url}\0{task.name}\0{label}\0{service.build_context}\0{service.dockerfile}"
               f"\0{args}\0{service.build_target or ''}")
        context = Path(service.build_context)

        return await self._build_once(host, key, lambda: build_context_image(
            host.docker,
            task,
            context=context,
            dockerfile=service.dockerfile,
            build_args=service.build_args,
            target=service.build_target,
            service=label,
            base_image=self.config.base_image,
            url=host.url,
            api_timeout_s=timeout,
            log_dir=self.run_dir / "builds" if self.run_dir else None,
        ))

    async def _build_once(
        self, host: DockerHost, key: str, build: Callable[[], Awaitable[tuple[str, bool]]]
    ) -> str:
        """The tag ``build`` makes on ``host``, built once per ``key`` however many ask.

        Task images build on each host (seconds over a present base, measured cheaper
        than shipping the whole image); the base itself is shipped first if missing.
        """

        async def once() -> str:
            await self.ensure_present(host, self.config.base_image)
            async with self._build_limiter:
                tag, built = await build()
            self.images_built += built
            return tag

        return await self._builds.get(key, once)
