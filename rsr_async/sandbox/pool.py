"""The sandbox pool: every container of one engine run, over all configured Docker hosts.

:class:`SandboxPool` places each episode on the least loaded host that is up, starts a
fresh container for it (or hands it a prewarmed one) and removes it on exit whatever
happens; RSRT's verification copies (:meth:`SandboxPool.snapshot`) and the services of
compose tasks, on a private network per episode, come from here too. A host that stops
answering leaves placement and is asked again every ``sandbox.host_retry_s``.

What the pool hands off, one concern per module:

- :mod:`.ownership`: the labels every container carries, the run directory's lock, the
  per-host lease, the claims of prewarmed containers, and :func:`sweep`, which removes
  leftovers whose owner is provably gone (the pool sweeps at start and at exit);
- :mod:`.host_images`: which image runs a task on a host (found, shipped, or built once);
- :mod:`.compose_wait`: waiting for a compose service's ``depends_on`` condition;
- :mod:`.hosts`: one Docker daemon; :mod:`.container`: one started container.

The labels, :func:`sweep`, :func:`owner_gone` and the rest of :mod:`.ownership` that
used to live here are still importable from this module.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from types import TracebackType
from typing import Any

import aiodocker
import anyio
import anyio.abc

from .. import phases
from ..config import SandboxConfig
from ..errors import ContainerError, DockerUnavailableError, ImageError, SandboxError
from ..run_lock import RunLock
from ..schema import ImageFiles, Task
from .base import SandboxStats
from .compose import MAIN_SERVICE, ComposeService, ComposeSpec
from .compose_wait import wait_for_service
from .container import DockerSandbox
from .docker_errors import DockerAnswer, close_quietly, docker_errors
from .hidden import STATION_EPISODE, VerifierStation
from .host_images import HostImages
from .hosts import DockerHost
from .images import ImageListings
from .ownership import (
    CLAIMS_NAME,
    LABEL_EPISODE,
    LABEL_LEASE,
    LABEL_OWNER,
    LABEL_POOL,
    LABEL_RUN,
    LABEL_RUN_DIR,
    LABEL_SERVICE,
    LABEL_SNAPSHOT,
    LABEL_TASK,
    LABEL_WARM,
    LEASE_EPISODE,
    LEASE_HELD,
    LEASE_HOLDER,
    WARM_EPISODE,
    LeftoverContainer,
    append_claim,
    hold_run_lock,
    lease_ended,
    owner_gone,
    owner_label,
    read_claims,
    release_run_lock,
    remove_container,
    remove_network,
    sweep,
    sweep_snapshots,
)
from .subnets import SubnetPool, create_network

__all__ = [
    "CLAIMS_NAME",
    "LABEL_EPISODE",
    "LABEL_LEASE",
    "LABEL_RUN",
    "LABEL_SERVICE",
    "LABEL_SNAPSHOT",
    "LABEL_WARM",
    "SNAPSHOT_REPOSITORY",
    "LeftoverContainer",
    "SandboxPool",
    "SandboxStats",
    "lease_ended",
    "owner_gone",
    "read_claims",
    "sweep",
]

log = logging.getLogger(__name__)

SNAPSHOT_REPOSITORY = "rsr-async-snapshot"
"""Repository of committed snapshot images (removed right after their copy)."""
TMPFS_PATH = "/tmp"
"""Where ``storage_mb`` is enforced as a tmpfs when the storage driver has no quota."""

_CAPABILITIES = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "NET_BIND_SERVICE",
]
"""All a root sandbox needs to install packages and run tests; the rest are dropped."""


def _join(config: dict[str, Any], network: str, aliases: tuple[str, ...]) -> None:
    """Put a container on a compose episode's network, answering to ``aliases``."""
    config["NetworkDisabled"] = False
    config["HostConfig"]["NetworkMode"] = network
    config["NetworkingConfig"] = {"EndpointsConfig": {network: {"Aliases": list(aliases)}}}


def _untimed(name: str) -> contextlib.nullcontext[None]:
    return contextlib.nullcontext()


def _add_phase(name: str, since: float) -> None:
    """Add the time since ``since`` (``time.perf_counter``) to the current episode's
    phase ``name`` (see :mod:`rsr_async.phases`): for phases that span a ``yield``."""
    if (recorder := phases.current()) is not None:
        recorder.add(name, time.perf_counter() - since)


class SandboxPool:
    """All sandboxes of one engine run, spread over the configured Docker hosts by load.

    ``async with SandboxPool(config, run_id=...) as pool:`` opens one client per host,
    sweeps leftovers, and on exit removes every container it started. Episodes take a
    fresh container with ``async with pool.sandbox(task, key=...) as sandbox``.
    """

    def __init__(self, config: SandboxConfig, *, run_id: str, run_dir: Path | None = None) -> None:
        if not run_id:
            raise SandboxError("SandboxPool: run_id must not be empty (it labels every container)")
        self.config = config
        self.run_id = run_id
        self.run_dir = Path(run_dir) if run_dir else None
        self._hosts: list[DockerHost] = []
        self._owner = owner_label()
        self._pool_id = uuid.uuid4().hex
        self._containers: dict[str, tuple[DockerHost, str]] = {}
        self._images = HostImages(config, hosts=self._hosts, run_dir=self.run_dir)
        self._warm: dict[tuple[str, str, str], deque[aiodocker.docker.DockerContainer]] = {}
        """Started ahead of demand by :meth:`prewarm`, per (host, task, image)."""
        self._warm_slots: dict[str, str] = {}
        """Container id → slot id of the prewarmed containers no episode took yet."""
        self._tmpfs: dict[str, tuple[str, ...]] = {}
        """Container id → its tmpfs mount points (uploads there go through an exec)."""
        self._claims: dict[str, str] = {}
        """Container id → episode key of the prewarmed containers episodes took."""
        self._networks: dict[str, DockerHost] = {}
        """Network id → host of the private networks of live compose episodes."""
        self._subnets = (
            SubnetPool(config.compose_subnets, config.compose_subnet_prefix)
            if config.compose_subnets else None
        )
        """Where compose networks take their small subnets (None: Docker's default pools)."""
        self._network_subnet: dict[str, Any] = {}
        """Network id → its subnet from :attr:`_subnets`, given back once it is removed."""
        self._episode_network: dict[str, str] = {}
        """Main container id → its compose episode's network (a snapshot joins it)."""
        self._lock_file: RunLock | None = None
        self._leases: dict[str, tuple[str, Any]] = {}
        """Host URL → (lease container id, its attached stdin stream), see LABEL_LEASE."""
        self._listings = ImageListings(
            Path(config.image_files_cache).expanduser() if config.image_files_cache else None
        )
        self._stations: dict[str, VerifierStation] = {}
        """Host URL → its verifier station (hidden tests run through it), made on first use."""
        self._started = 0
        self._removed = 0
        self._start_failures = 0
        self._remove_failures = 0
        self._peak = 0

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> SandboxPool:
        try:
            for url in self.config.docker_urls:
                self._hosts.append(
                    DockerHost(
                        url,
                        starts_per_s=self.config.starts_per_s,
                        max_concurrent_starts=self.config.max_concurrent_starts,
                    )
                )
            for host in self._hosts:
                try:
                    await host.check(min(self.config.api_timeout_s, 15.0))
                    await host.probe_storage(min(self.config.api_timeout_s, 15.0))
                except DockerUnavailableError as exc:
                    if len(self._hosts) == 1:
                        raise
                    # One host of several: place around it and ask again later.
                    host.mark_down(str(exc), retry_after_s=self.config.host_retry_s)
                    log.warning("%s; episodes go to the other Docker hosts until it answers", exc)
            if not any(host.up for host in self._hosts):
                raise DockerUnavailableError(
                    "no Docker host answers: "
                    + "; ".join(f"{h.url} ({h.down_reason})" for h in self._hosts)
                )
            if self.run_dir is not None:
                self._lock_file = await anyio.to_thread.run_sync(
                    hold_run_lock, self.run_dir, self._owner
                )
            await sweep(
                [h.url for h in self._hosts if h.up],
                run_id=self.run_id,
                timeout_s=self.config.api_timeout_s,
            )
            for host in self._hosts:
                if host.up:
                    await self._take_lease(host)
        except BaseException:
            await self._close_hosts()
            self._release_lock()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            try:
                for key, queue in self._warm.items():
                    host = next(h for h in self._hosts if h.url == key[0])
                    while queue:
                        await self._discard(host, queue.popleft().id)
                async with anyio.create_task_group() as tg:
                    for container_id, (host, _) in list(self._containers.items()):
                        tg.start_soon(self._discard, host, container_id)
                for network_id, host in list(self._networks.items()):
                    await self._discard_network(host, network_id)
                for station in self._stations.values():
                    await station.aclose()
                self._stations.clear()
                await self._sweep_own()
            finally:
                for host in self._hosts:
                    await self._end_lease(host)
                await self._close_hosts()
                self._release_lock()

    def _wrap(
        self,
        container: aiodocker.docker.DockerContainer,
        task: Task,
        key: str,
        host: DockerHost,
        tg: anyio.abc.TaskGroup,
    ) -> DockerSandbox:
        """The :class:`DockerSandbox` over a started container (episode or verification copy)."""
        return DockerSandbox(
            container,
            task_name=task.name,
            key=key,
            url=host.url,
            task_group=tg,
            api_timeout_s=self.config.api_timeout_s,
            env=dict(task.env),
            workdir=task.workdir,
            memory_mb=task.memory_mb or self.config.default_memory_mb,
            quiet_s=self.config.shell_quiet_s,
            tmpfs=self._tmpfs.get(str(container.id), ()),
            station=self._station(host),
            copier=lambda source: self.snapshot(source, task, key=key),
        )

    def _station(self, host: DockerHost) -> VerifierStation:
        """``host``'s verifier station (its container starts on the first hidden run)."""
        station = self._stations.get(host.url)
        if station is None:
            labels = {
                LABEL_RUN: self.run_id,
                LABEL_EPISODE: STATION_EPISODE,
                LABEL_TASK: "-",
                LABEL_OWNER: self._owner,
                LABEL_POOL: self._pool_id,
            }
            if self.run_dir is not None:
                labels[LABEL_RUN_DIR] = str(self.run_dir.resolve())
            station = VerifierStation(host.docker, url=host.url, labels=labels,
                                      api_timeout_s=self.config.api_timeout_s)
            self._stations[host.url] = station
        return station

    async def _sweep_own(self) -> None:
        """Last resort at exit: anything Docker still lists as this pool's goes."""
        for host in self._hosts:
            if not host.up:
                continue  # its leftovers: ours when it is back, or any sweep's (lease ended)
            await self._sweep_own_on(host)

    async def _sweep_own_on(self, host: DockerHost, *, keep: frozenset[str] = frozenset()) -> None:
        """Remove this pool's containers (but ``keep``), networks and snapshots on ``host``."""
        try:
            with docker_errors(f"sweep on {host.url}", url=host.url), anyio.fail_after(
                self.config.api_timeout_s
            ):
                found = await host.docker.containers.list(
                    all=True,
                    filters={"label": [f"{LABEL_POOL}={self._pool_id}"]},
                )
        except SandboxError:
            return  # the daemon is gone; the next start-up sweep will find them
        for item in found:
            if item.id in keep:
                continue
            if await remove_container(host.docker, item.id, timeout_s=self.config.api_timeout_s):
                self._removed += 1
        with contextlib.suppress(SandboxError):  # gone: as above
            with docker_errors(f"sweep networks on {host.url}", url=host.url), anyio.fail_after(
                self.config.api_timeout_s
            ):
                networks = await host.docker.networks.list(
                    filters={"label": [f"{LABEL_POOL}={self._pool_id}"]}
                )
            for network in networks:
                await remove_network(host.docker, network["Id"], timeout_s=self.config.api_timeout_s)
        # A commit a killed predecessor asked for can land after our start-up sweep
        # (the daemon finishes it alone); at exit no snapshot of this run is in use.
        with contextlib.suppress(SandboxError):
            await sweep_snapshots(host.docker, self.run_id, timeout_s=self.config.api_timeout_s,
                                  url=host.url)

    async def _close_hosts(self) -> None:
        for host in self._hosts:
            await host.close()
        self._hosts.clear()  # in place: self._images reads this same list

    def _release_lock(self) -> None:
        if self._lock_file is not None:
            release_run_lock(self._lock_file)
            self._lock_file = None

    # ------------------------------------------------------------------ hosts

    def _needs_lease(self, host: DockerHost) -> bool:
        """A pool of one local daemon is proven gone through ``/proc``; any other host
        (another of several, or a remote one) is leased (:data:`LABEL_LEASE`)."""
        return len(self._hosts) > 1 or not host.url.startswith("unix://")

    async def _take_lease(self, host: DockerHost) -> None:
        """Start this pool's lease container on ``host`` and hold its stdin (see
        :data:`LABEL_LEASE`). Without one (no base image there, Docker refused), the
        pool still runs; its containers there are then swept only by ``/proc`` or lock."""
        if not self._needs_lease(host):
            return
        labels = {
            LABEL_RUN: self.run_id, LABEL_EPISODE: LEASE_EPISODE, LABEL_OWNER: self._owner,
            LABEL_POOL: self._pool_id, LABEL_LEASE: LEASE_HOLDER,
        }
        if self.run_dir is not None:
            labels[LABEL_RUN_DIR] = str(self.run_dir.resolve())
        config: dict[str, Any] = {
            "Image": self.config.base_image,
            "Entrypoint": ["sh", "-c", "read _ ; exit 0"],  # ends when our connection does
            "Labels": labels,
            "OpenStdin": True, "StdinOnce": True, "AttachStdin": True,
            "NetworkDisabled": True,
            "HostConfig": {"NetworkMode": "none", "Memory": 16 << 20, "PidsLimit": 8,
                           "CapDrop": ["ALL"], "SecurityOpt": ["no-new-privileges"],
                           "AutoRemove": False},
        }
        timeout = min(self.config.api_timeout_s, 30.0)
        container_id = ""
        try:
            await self._images.ensure_present(host, self.config.base_image)
            with anyio.CancelScope(shield=True), anyio.fail_after(timeout), docker_errors(
                f"lease on {host.url}", url=host.url
            ):
                created = await host.docker.containers.create(config)
                container_id = str(created.id)
                stream = created.attach(stdin=True)
                await stream._init()  # attached before the start: no moment unheld
                await created.start()
        except SandboxError as exc:
            if container_id:
                await remove_container(host.docker, container_id, timeout_s=timeout)
            log.warning("no lease on %s (%s): its containers of this run can be swept by "
                        "another machine only through this run's directory lock", host.url, exc)
            return
        self._leases[host.url] = (container_id, stream)

    async def _end_lease(self, host: DockerHost) -> None:
        """Let go of the lease (its container exits) and remove its container."""
        lease = self._leases.pop(host.url, None)
        if lease is None:
            return
        container_id, stream = lease
        with anyio.CancelScope(shield=True):
            await close_quietly(stream, what=f"lease on {host.url}: close")
            if host.up:
                await remove_container(host.docker, container_id, timeout_s=min(self.config.api_timeout_s, 30.0))

    async def _place(self) -> DockerHost:
        """The least loaded host that is up; down hosts due for a ``/_ping`` are asked
        first (each at most every ``host_retry_s``) and used again when they answer."""
        if not self._hosts:
            raise SandboxError("SandboxPool used outside `async with`")
        due = [h for h in self._hosts if h.probe_due()]
        if due:
            for host in due:
                host.mark_down(host.down_reason, retry_after_s=self.config.host_retry_s)
            async with anyio.create_task_group() as tg:
                for host in due:
                    tg.start_soon(self._reprobe, host)
        up = [h for h in self._hosts if h.up]
        if not up:
            raise DockerUnavailableError(
                "every Docker host is down: "
                + "; ".join(f"{h.url} ({h.down_reason})" for h in self._hosts)
                + f"; each is asked again every {self.config.host_retry_s:g} s"
            )
        return min(up, key=lambda h: h.live)

    async def _reprobe(self, host: DockerHost) -> None:
        if not await host.answers(min(self.config.api_timeout_s, 5.0)):
            return
        try:
            await host.probe_storage(min(self.config.api_timeout_s, 15.0))
            # A daemon that restarted stopped our old containers, our old lease and our
            # verifier station (the sweep below removes it; a new one starts on demand).
            self._stations.pop(host.url, None)
            old = self._leases.pop(host.url, None)
            await self._take_lease(host)
            if old is not None:
                await close_quietly(old[1], what=f"old lease on {host.url}: close")
            tracked = {cid for cid, (h, _) in self._containers.items() if h is host}
            lease = self._leases.get(host.url)
            await self._sweep_own_on(host, keep=frozenset(tracked | ({lease[0]} if lease else set())))
        except SandboxError as exc:
            host.mark_down(str(exc), retry_after_s=self.config.host_retry_s)
            return
        log.warning("Docker host %s answers again after %.0f s: placing episodes there",
                    host.url, time.monotonic() - host.down_since)
        host.mark_up()

    async def _check_host(self, host: DockerHost, error: BaseException | None = None) -> None:
        """After a failure on ``host``: out of placement when it is unreachable (said by
        ``error``, or by a ``/_ping`` that gets no answer)."""
        if not host.up:
            return
        if isinstance(error, DockerUnavailableError):
            reason = str(error)
        elif await host.answers(min(self.config.api_timeout_s, 5.0)):
            return
        else:
            reason = "stopped answering /_ping"
        if host.mark_down(reason, retry_after_s=self.config.host_retry_s):
            log.warning("Docker host %s is down (%s): its episodes are retried on the other "
                        "hosts; it is asked again every %g s",
                        host.url, reason, self.config.host_retry_s)

    # ------------------------------------------------------------------ images

    async def ensure_image(self, task: Task) -> str:
        """The task's image tag, present on every host that is up (built once, cached by
        content hash). A host down now gets it when an episode is first placed there."""
        if not self._hosts:
            raise SandboxError("SandboxPool used outside `async with`")
        if len(self._hosts) == 1:
            return await self._images.ensure_on(self._hosts[0], task)
        tags: list[str] = []
        errors: list[Exception] = []

        async def one(host: DockerHost) -> None:
            try:
                tags.append(await self._images.ensure_on(host, task))
            except DockerUnavailableError as exc:
                await self._check_host(host, exc)  # out of placement; asked again later
            except Exception as exc:  # raised below, unwrapped, once every host is done
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for host in self._hosts:
                if host.up:
                    tg.start_soon(one, host)
        if errors:
            raise errors[0]
        if not tags:
            raise DockerUnavailableError(
                f"task {task.name!r}: no Docker host is up to hold its image: "
                + "; ".join(f"{h.url} ({h.down_reason})" for h in self._hosts if not h.up)
            )
        return tags[0]

    async def image_files(self, task: Task, *, url: str | None = None) -> ImageFiles:
        """What the task's image (a compose task: its ``main`` service's) holds beyond the
        base image, listed on host ``url`` (default: the first up) once per image id.

        For the leak audit: the episode runner puts it in the episode's result, so it
        reaches the head with the outcome even from a remote actor. The listing runs in a
        short-lived container labelled like every container of this pool (its sweeps
        cover it) and removed at once; see :func:`~rsr_async.sandbox.images.list_image_paths`
        for its prunes, cap and deadline. Raises :class:`SandboxError` when it fails.
        """
        # Only the episode's own host: elsewhere the image might have to be built first.
        host = next((h for h in self._hosts if h.up and url in (None, h.url)), None)
        if host is None:
            raise DockerUnavailableError(
                f"task {task.name!r}: {url or 'no Docker host'} is not up to list its image"
            )
        image = await self._images.ensure_on(host, task)
        labels = self._labels(task, "image-files")
        if host.url in self._leases:
            labels[LABEL_LEASE] = LEASE_HELD
        return await self._listings.files(
            host.docker, image, base_image=self.config.base_image, labels=labels, url=host.url,
            api_timeout_s=self.config.api_timeout_s, start_slot=host.start_slot,
        )

    # ------------------------------------------------------------------ compose tasks

    @contextlib.asynccontextmanager
    async def _compose_sandbox(
        self, task: Task, spec: ComposeSpec, *, key: str, setup: float
    ) -> AsyncIterator[DockerSandbox]:
        """Every service on a private network of this episode, ``main`` as the sandbox;
        all of it removed on exit whatever happens."""
        host = await self._place()
        images = await self._images.compose_images(host, task, spec)
        network_id, network = await self._create_network(host, task, key, len(spec.services))
        started: list[str] = []
        running: dict[str, tuple[Any, float]] = {}
        main: Any = None
        error: BaseException | None = None
        teardown: float | None = None  # when the episode let go of its sandbox
        try:
            for service in spec.services:
                for dep in service.depends_on:
                    container, since = running[dep.service]
                    await wait_for_service(host, task, key, spec.service(dep.service), container,
                                           since=since, condition=dep.condition,
                                           api_timeout_s=self.config.api_timeout_s)
                since = time.time() - 1.0  # events are asked from here: none is missed
                if service.name == MAIN_SERVICE:
                    config = self._container_config(task, images[service.name], key)
                    config["Env"] = [f"{k}={v}" for k, v in {**service.environment, **task.env}.items()]
                    if service.working_dir and not task.workdir:
                        config["WorkingDir"] = service.working_dir
                    self._limit_storage(config, host, task)
                else:
                    config = self._service_config(task, service, images[service.name], key)
                config["Labels"][LABEL_SERVICE] = service.name
                _join(config, network, service.aliases)
                container = await self._start(host, task, images[service.name], key, config=config,
                                              service=service.name)
                started.append(container.id)
                running[service.name] = (container, since)
                if service.name == MAIN_SERVICE:
                    main = container
            self._episode_network[main.id] = network
            _add_phase("sandbox", setup)
            async with anyio.create_task_group() as tg:
                sandbox = self._wrap(main, task, key, host, tg)
                try:
                    yield sandbox
                except BaseException as exc:
                    error = exc  # raised after the task group closes, unwrapped
                finally:
                    teardown = time.perf_counter()
                    with anyio.CancelScope(shield=True):
                        await sandbox.aclose()
                    tg.cancel_scope.cancel()
        finally:
            if teardown is None:
                teardown = time.perf_counter()
            with anyio.CancelScope(shield=True):
                if main is not None:
                    self._episode_network.pop(main.id, None)
                async with anyio.create_task_group() as tg:
                    for container_id in started:
                        tg.start_soon(self._discard, host, container_id)
                await self._discard_network(host, network_id)
            _add_phase("teardown", teardown)
        if error is not None:
            raise error

    def _service_config(
        self, task: Task, service: ComposeService, image: str, key: str
    ) -> dict[str, Any]:
        """A sidecar: the sandbox's privileges, its own ``deploy.resources.limits`` or else
        the default limits (not the task's: those are the agent's container's, as in
        Harbor), its own command and env."""
        memory = (service.memory_mb or self.config.default_memory_mb) * 1024 * 1024
        config: dict[str, Any] = {
            "Image": image,
            "Hostname": service.hostname or service.name,
            "Labels": self._labels(task, key),
            "Env": [f"{k}={v}" for k, v in service.environment.items()],
            "AttachStdin": False,
            "AttachStdout": False,
            "AttachStderr": False,
            "Tty": False,
            "HostConfig": {
                "Init": True,
                "NanoCpus": int((service.cpus or self.config.default_cpus) * 1e9),
                "Memory": memory,
                "MemorySwap": memory,
                "PidsLimit": self.config.pids_limit,
                "Privileged": False,
                "CapDrop": ["ALL"],
                "CapAdd": _CAPABILITIES,
                "SecurityOpt": ["no-new-privileges"],
                "Binds": [],
                "AutoRemove": False,
            },
        }
        if service.entrypoint is not None:
            config["Entrypoint"] = list(service.entrypoint)
        if service.command is not None:
            config["Cmd"] = list(service.command)
        if service.working_dir:
            config["WorkingDir"] = service.working_dir
        if service.user:
            config["User"] = service.user
        if service.healthcheck is not None:
            config["Healthcheck"] = service.healthcheck.docker()
        return config

    async def _create_network(
        self, host: DockerHost, task: Task, key: str, containers: int
    ) -> tuple[str, str]:
        """A fresh bridge network for one episode, labelled like its containers; internal
        (no route out) unless both the task and ``sandbox.allow_network`` allow network.
        Its subnet is a small one of ``sandbox.compose_subnets`` with room for
        ``containers`` (:mod:`.subnets`), so Docker's default pools never run out."""
        name = f"rsr-{uuid.uuid4().hex[:16]}"
        internal = not (task.allow_internet and self.config.allow_network)
        where = f"task {task.name!r} (episode {key}): network create"
        # Shielded: a network the daemon makes after we stopped listening would be lost.
        with anyio.CancelScope(shield=True), anyio.fail_after(self.config.api_timeout_s), docker_errors(
            where, url=host.url
        ):
            labels = self._labels(task, key)
            if host.url in self._leases:
                labels[LABEL_LEASE] = LEASE_HELD
            network, subnet = await create_network(
                host.docker.networks.create,
                {"Name": name, "Driver": "bridge", "Internal": internal, "CheckDuplicate": True,
                 "Labels": labels},
                pool=self._subnets, host=host.url, containers=containers, where=where,
            )
        self._networks[network.id] = host
        if subnet is not None:
            self._network_subnet[network.id] = subnet
        return network.id, name

    async def _discard_network(self, host: DockerHost, network_id: str) -> None:
        with anyio.CancelScope(shield=True):
            ok = await remove_network(host.docker, network_id, timeout_s=self.config.api_timeout_s)
        self._networks.pop(network_id, None)
        subnet = self._network_subnet.pop(network_id, None)
        if not ok:
            self._remove_failures += 1
        elif subnet is not None and self._subnets is not None:
            self._subnets.give_back(host.url, subnet)  # a network left behind keeps its subnet

    # ------------------------------------------------------------------ containers

    def _labels(self, task: Task, key: str) -> dict[str, str]:
        """Whose a container or network is: what :func:`sweep` decides by."""
        labels = {
            LABEL_RUN: self.run_id,
            LABEL_EPISODE: key,
            LABEL_TASK: task.name,
            LABEL_OWNER: self._owner,
            LABEL_POOL: self._pool_id,
        }
        if self.run_dir is not None:
            labels[LABEL_RUN_DIR] = str(self.run_dir.resolve())
        return labels

    def _container_config(
        self, task: Task, image: str, key: str, snapshot_of: str | None = None
    ) -> dict[str, Any]:
        cpus = task.cpus or self.config.default_cpus
        memory = (task.memory_mb or self.config.default_memory_mb) * 1024 * 1024
        network = task.allow_internet and self.config.allow_network
        labels = self._labels(task, key)
        if snapshot_of is not None:
            labels[LABEL_SNAPSHOT] = snapshot_of
        config: dict[str, Any] = {
            "Image": image,
            "Entrypoint": ["sleep"],
            "Cmd": ["infinity"],
            "Hostname": "sandbox",
            "Labels": labels,
            "Env": [f"{k}={v}" for k, v in task.env.items()],
            "AttachStdin": False,
            "AttachStdout": False,
            "AttachStderr": False,
            "Tty": False,
            "NetworkDisabled": not network,
            "HostConfig": {
                "Init": True,
                "NanoCpus": int(cpus * 1e9),
                "Memory": memory,
                "MemorySwap": memory,
                "PidsLimit": self.config.pids_limit,
                "NetworkMode": "bridge" if network else "none",
                "Privileged": False,
                "CapDrop": ["ALL"],
                "CapAdd": _CAPABILITIES,
                "SecurityOpt": ["no-new-privileges"],
                "Binds": [],
                "AutoRemove": False,
            },
        }
        if task.workdir:
            config["WorkingDir"] = task.workdir
        return config

    async def _start(
        self,
        host: DockerHost,
        task: Task,
        image: str,
        key: str,
        *,
        snapshot_of: str | None = None,
        warm_slot: str | None = None,
        config: dict[str, Any] | None = None,
        service: str | None = None,
    ) -> Any:
        """Create and start one container; ``config`` given (a compose sidecar) is used
        as it is, else the episode container's is made here."""
        if config is None:
            config = self._container_config(task, image, key, snapshot_of)
            if warm_slot is not None:
                config["Labels"][LABEL_WARM] = warm_slot
            self._limit_storage(config, host, task)
        if host.url in self._leases:
            config["Labels"][LABEL_LEASE] = LEASE_HELD
        where = f"task {task.name!r} (episode {key})" + (f" service {service!r}" if service else "")
        # An RSRT copy's create and start are its verification's ("snapshot"), not the
        # episode's sandbox's.
        timed = phases.phase if snapshot_of is None else _untimed
        with timed("start"):  # the host's start limiter: part of starting
            slot = await host.start_slot()
        container_id: str | None = None
        host.live += 1
        # A refusal of our config is permanent: Docker refuses it on every attempt.
        failed = f"{where}: container start failed"
        missing = f"{where}: image {image} not found on {host.url}"  # 404 to create or start

        def expected(status: int, message: str) -> bool:
            # overlay2 on xfs without `pquota` refuses a quota: the fallback below.
            quota_refused = "StorageOpt" in config["HostConfig"] and "storage" in message.lower()
            return status == 404 or quota_refused

        try:
            # Shielded: a create the daemon finishes after we stopped listening would be
            # a container nobody knows the id of.
            with anyio.CancelScope(shield=True), anyio.fail_after(self.config.api_timeout_s):
                while True:
                    try:
                        with timed("create"), docker_errors(
                            failed, url=host.url, permanent_4xx=True, expected=expected
                        ):
                            created = await host.docker.containers.create(config)
                        break
                    except DockerAnswer as answer:
                        if answer.status == 404:
                            raise ImageError(missing) from answer
                        host.storage_quota = False  # once: the next create has no quota
                        del config["HostConfig"]["StorageOpt"]
                        self._limit_storage(config, host, task, refused=answer.message)
                container_id = str(created.id)
                self._containers[container_id] = (host, key)
                self._tmpfs[container_id] = tuple(config["HostConfig"].get("Tmpfs") or ())
            try:
                with anyio.fail_after(self.config.api_timeout_s), timed("start"), docker_errors(
                    failed, url=host.url, permanent_4xx=True, expected={404}
                ):
                    await created.start()
            except DockerAnswer as answer:
                raise ImageError(missing) from answer
        except BaseException as exc:
            self._start_failures += 1
            if container_id is None:
                host.live -= 1
            else:
                await self._discard(host, container_id)
            if isinstance(exc, (DockerUnavailableError, TimeoutError)):
                await self._check_host(host)
            if isinstance(exc, TimeoutError):
                raise ContainerError(
                    f"{where}: container start took over {self.config.api_timeout_s:.0f} s"
                ) from exc
            raise
        finally:
            slot.release()
        self._started += 1
        self._peak = max(self._peak, sum(h.live for h in self._hosts))
        return created

    def _limit_storage(
        self, config: dict[str, Any], host: DockerHost, task: Task, *, refused: str = ""
    ) -> None:
        """Apply the task's ``storage_mb``: a disk quota where the storage driver has one,
        else a size-limited tmpfs on ``/tmp`` (said once per host, naming the driver)."""
        if not task.storage_mb:
            return
        if host.storage_quota:
            config["HostConfig"]["StorageOpt"] = {"size": f"{task.storage_mb}M"}
            return
        # tmpfs pages count against the memory limit: at half of it, a full /tmp is
        # "No space left on device" (what a full disk says), not an OOM kill.
        memory_mb = task.memory_mb or self.config.default_memory_mb
        size_mb = max(1, min(task.storage_mb, memory_mb // 2))
        config["HostConfig"]["Tmpfs"] = {
            TMPFS_PATH: f"rw,nosuid,nodev,exec,mode=1777,size={size_mb}m"
        }
        if not host.quota_warned:
            host.quota_warned = True
            why = f" (it refused: {refused})" if refused else ""
            log.warning(
                "Docker on %s uses storage driver %r, which cannot cap a container's disk%s "
                "(StorageOpt size needs overlay2 on xfs with pquota, devicemapper, btrfs or "
                "zfs): a task's storage_mb is enforced only on %s, as a tmpfs of min(storage_mb, "
                "memory_mb/2) MiB; writes elsewhere in the container are not limited",
                host.url, host.storage_driver or "unknown", why, TMPFS_PATH,
            )

    async def _discard(self, host: DockerHost, container_id: str) -> None:
        """Remove one container we started (shielded: it must go even on cancellation).
        On a host that is down it is left for later: this pool's sweep when the host is
        back, or anyone's sweep once the lease ended with the daemon."""
        with anyio.CancelScope(shield=True):
            ok = host.up and await remove_container(host.docker, container_id,
                                                    timeout_s=self.config.api_timeout_s)
            if not ok:
                await self._check_host(host)
        self._claims.pop(container_id, None)
        self._warm_slots.pop(container_id, None)
        self._tmpfs.pop(container_id, None)
        if self._containers.pop(container_id, None) is not None:
            host.live -= 1
        if ok:
            self._removed += 1
        else:
            self._remove_failures += 1

    @contextlib.asynccontextmanager
    async def sandbox(self, task: Task, *, key: str) -> AsyncIterator[DockerSandbox]:
        """A fresh container for one episode, removed on exit whatever happens. A compose
        task gets all its services on a private network, ``main`` as the sandbox."""
        setup = time.perf_counter()
        spec = await self._images.compose_spec(task)
        if spec is not None:
            async with self._compose_sandbox(task, spec, key=key, setup=setup) as sandbox:
                yield sandbox
            return
        host = await self._place()
        try:
            image = await self._images.ensure_on(host, task)
        except DockerUnavailableError as exc:
            await self._check_host(host, exc)
            raise
        queue = self._warm.get((host.url, task.name, image))
        container: Any = None
        if queue:
            container = queue.popleft()
            host.live += 1
            self._containers[container.id] = (host, key)
            self._peak = max(self._peak, sum(h.live for h in self._hosts))
            try:
                with phases.phase("claim"):
                    await self._record_claim(container, key)
            except BaseException:
                await self._discard(host, container.id)
                raise
            if (recorder := phases.current()) is not None:
                recorder.prewarmed = True
        if container is None:
            container = await self._start(host, task, image, key)
        error: BaseException | None = None
        _add_phase("sandbox", setup)
        teardown: float | None = None  # when the episode let go of its sandbox
        try:
            async with anyio.create_task_group() as tg:
                sandbox = self._wrap(container, task, key, host, tg)
                try:
                    yield sandbox
                except BaseException as exc:
                    # Raised after the task group closes, so callers see it unwrapped.
                    error = exc
                    if isinstance(exc, SandboxError):
                        await self._check_host(host, exc)
                finally:
                    teardown = time.perf_counter()
                    with anyio.CancelScope(shield=True):
                        await sandbox.aclose()
                    tg.cancel_scope.cancel()
        finally:
            await self._discard(host, container.id)
            _add_phase("teardown", time.perf_counter() if teardown is None else teardown)
        if error is not None:
            raise error

    @contextlib.asynccontextmanager
    async def snapshot(
        self, source: DockerSandbox, task: Task, *, key: str
    ) -> AsyncIterator[DockerSandbox]:
        """A sibling container started from a commit of ``source``: the agent's files as
        they are now, with none of its processes and no way back into its container.

        RSRT runs the hidden tests here, so they never enter the container the agent
        keeps working in. The copy is labelled like every container (plus
        :data:`LABEL_SNAPSHOT`) and both it and the committed image are removed on exit.
        """
        host = next((h for h in self._hosts if h.url == source.url), None)
        if host is None:
            raise SandboxError(f"{source.name}: its Docker host {source.url} is not in this pool")
        tag = uuid.uuid4().hex[:16]
        image = f"{SNAPSHOT_REPOSITORY}:{tag}"
        labels = {LABEL_RUN: self.run_id, LABEL_POOL: self._pool_id, LABEL_SNAPSHOT: key}
        setup = time.perf_counter()
        try:
            await source.commit(repository=SNAPSHOT_REPOSITORY, tag=tag, labels=labels)
            config = None
            network = self._episode_network.get(source.id)
            if network is not None:
                # A compose episode's copy joins its network: the tests see its services
                # as the agent left them.
                config = self._container_config(task, image, f"{key}#copy", key)
                _join(config, network, ())
                self._limit_storage(config, host, task)
            container = await self._start(host, task, image, f"{key}#copy", snapshot_of=key,
                                          config=config)
            _add_phase("snapshot", setup)
            try:
                async with anyio.create_task_group() as tg:
                    sandbox = self._wrap(container, task, f"{key}#copy", host, tg)
                    try:
                        yield sandbox
                    finally:
                        with anyio.CancelScope(shield=True):
                            await sandbox.aclose()
                        tg.cancel_scope.cancel()
            finally:
                await self._discard(host, container.id)
        finally:
            await self._remove_image(host, image)

    async def _remove_image(self, host: DockerHost, image: str) -> None:
        """Delete a committed snapshot image (shielded; absent is fine)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.config.api_timeout_s):
            try:
                with docker_errors(f"remove snapshot image {image}", url=host.url,
                                   error=ImageError, expected={404}):
                    await host.docker.images.delete(image, force=True)
            except DockerAnswer:
                pass  # 404: already gone
            except SandboxError:  # refused, or the daemon is gone: a sweep takes it later
                self._remove_failures += 1

    async def _record_claim(self, container: Any, key: str) -> None:
        """Say, before the episode starts, which episode took a prewarmed container: its
        labels cannot (Docker fixes them at create), the run directory's claims can."""
        slot = self._warm_slots.pop(container.id, "")
        self._claims[container.id] = key
        if self.run_dir is None:
            return
        await anyio.to_thread.run_sync(functools.partial(
            append_claim, self.run_dir, container=container.id, slot=slot, episode=key,
            at=time.time(),
        ))

    def episode_of(self, container_id: str) -> str | None:
        """The episode key a container of this pool serves (a prewarmed one: the episode
        that claimed it); None for one it does not know or an unclaimed warm one."""
        if container_id in self._claims:
            return self._claims[container_id]
        entry = self._containers.get(container_id)
        return None if entry is None else entry[1]

    async def prewarm(self, task: Task, count: int | None = None) -> int:
        """Start ``count`` (default ``sandbox.warm_pool``) containers of ``task``'s image ahead
        of demand; :meth:`sandbox` takes them first. Call it from the engine's task group."""
        count = self.config.warm_pool if count is None else count
        if await self._images.compose_spec(task) is not None:
            return 0  # a compose episode is several containers and a network: not prewarmed
        started = 0
        for _ in range(count):
            host = await self._place()
            image = await self._images.ensure_on(host, task)
            slot = uuid.uuid4().hex[:12]
            container = await self._start(host, task, image, WARM_EPISODE, warm_slot=slot)
            self._warm_slots[container.id] = slot
            self._containers.pop(container.id, None)
            host.live -= 1
            self._warm.setdefault((host.url, task.name, image), deque()).append(container)
            started += 1
        return started

    def statistics(self) -> SandboxStats:
        """Counters now: live containers, peak, starts, removals, failures."""
        return SandboxStats(
            live=len(self._containers),
            peak_live=self._peak,
            started=self._started,
            removed=self._removed,
            start_failures=self._start_failures,
            remove_failures=self._remove_failures,
            images_built=self._images.images_built,
            images_shipped=self._images.images_shipped,
            hosts_down=tuple(h.url for h in self._hosts if not h.up),
            warm=sum(len(q) for q in self._warm.values()),
            per_host={h.url: h.live for h in self._hosts},
        )

    async def containers(self) -> list[str]:
        """Ids of this run's sandboxes (and their compose services) that Docker knows
        about, for checks and tests: not its lease or verifier station containers."""
        ids: list[str] = []
        for host in self._hosts:
            with docker_errors(f"list containers on {host.url}", url=host.url), anyio.fail_after(
                self.config.api_timeout_s
            ):
                found = await host.docker.containers.list(
                    all=True, filters={"label": [f"{LABEL_RUN}={self.run_id}"]}
                )
            ids.extend(c.id for c in found
                       if (c._container.get("Labels") or {}).get(LABEL_LEASE) != LEASE_HOLDER
                       and (c._container.get("Labels") or {}).get(LABEL_EPISODE) != STATION_EPISODE)
        return ids

