"""The sandbox pool: every container of one engine run, over all configured Docker hosts.

Containers carry labels saying whose they are (run id, episode key, owner process and
host, run directory), so a start-up sweep or ``sandbox gc`` can remove leftovers whose
owner is provably gone and never touch another live run's.

A prewarmed container is started before any episode exists and Docker cannot relabel it,
so it is labelled ``rsr_async.episode=warm`` plus a slot id (:data:`LABEL_WARM`); when an
episode takes it, the pool appends ``{container, slot, episode, at}`` to the run
directory's :data:`CLAIMS_NAME` before the episode starts, and :func:`sweep` (so
``sandbox ls`` and ``gc``) reports the claiming episode from there.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import aiodocker
import anyio
import anyio.abc
import msgspec

from ..config import SandboxConfig
from ..errors import ContainerError, DockerUnavailableError, ImageError, SandboxError, TaskError
from ..schema import ImageFiles, Task
from .compose import (
    MAIN_SERVICE,
    ComposeService,
    ComposeSpec,
    compose_file,
    compose_variables,
    load_compose,
)
from .container import DockerSandbox, docker_errors, permanent_status
from .hosts import DockerHost, open_client
from .images import (
    BuildOnce,
    ImageListings,
    build_context_image,
    build_task_image,
    image_id,
    ship_image,
)

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

LABEL_RUN = "rsr_async.run"
LABEL_EPISODE = "rsr_async.episode"
LABEL_TASK = "rsr_async.task"
LABEL_OWNER = "rsr_async.owner"
"""``<host id>:<pid>:<process start ticks>`` of the process that started the container."""
LABEL_RUN_DIR = "rsr_async.run_dir"
LABEL_SERVICE = "rsr_async.service"
"""On the containers of a compose task: the service each one runs (``main``: the agent's)."""
LABEL_SNAPSHOT = "rsr_async.snapshot"
"""On a verification copy and its committed image: the episode key it was copied from."""
SNAPSHOT_REPOSITORY = "rsr-async-snapshot"
"""Repository of committed snapshot images (removed right after their copy)."""
LABEL_POOL = "rsr_async.pool"
"""A random id per :class:`SandboxPool`: its exit sweep touches only its own containers."""
LOCK_NAME = "sandbox.lock"
"""Held (flock) by a live pool in its run directory: a free lock proves the owner gone."""
_SHIP_TIMEOUT_S = 1800.0
"""Deadline for copying one image between two daemons (the base image: ~25 s here)."""
TMPFS_PATH = "/tmp"
"""Where ``storage_mb`` is enforced as a tmpfs when the storage driver has no quota."""
LABEL_WARM = "rsr_async.warm"
"""On a container :meth:`SandboxPool.prewarm` started: its slot id. Docker cannot change
the labels of a container, so a prewarmed one keeps ``rsr_async.episode=warm`` for life;
which episode claimed it is in the run directory's :data:`CLAIMS_NAME`, keyed by
container id, and :func:`sweep` (so ``sandbox ls``/``gc``) reads it from there."""
WARM_EPISODE = "warm"
"""The episode label of a prewarmed container (it has no episode when it starts)."""
CLAIMS_NAME = "sandbox-claims.jsonl"
"""One JSON line per prewarmed container an episode took: container, slot, episode, at."""
LABEL_LEASE = "rsr_async.lease"
"""On a pool's lease container on one host (value ``holder``), and on every container and
network the pool made there while it held that lease (value ``held``).

The lease is an open connection, not a clock: the lease container's only process reads
its stdin (``StdinOnce``), which the owning pool holds attached for its whole life. When
the owner dies, however it dies, the kernel closes its socket, Docker closes the
container's stdin and the lease container exits. So on a host whose ``/proc`` the
sweeper cannot see, a ``held`` container whose pool has no *running* lease container on
that same host has a provably gone owner (:func:`sweep`). Two pools never share one."""
LEASE_HOLDER = "holder"
LEASE_HELD = "held"
LEASE_EPISODE = "lease"
"""The episode label of a lease container."""

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


def _host_id() -> str:
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = "noboot"
    return f"{socket.gethostname()}/{boot[:8]}"


def _start_ticks(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def owner_label() -> str:
    """This process, as recorded on its containers."""
    return f"{_host_id()}:{os.getpid()}:{_start_ticks(os.getpid()) or '0'}"


def _lock_free(run_dir: str) -> bool | None:
    """True when nobody holds the run directory's lock; None when it cannot be told."""
    path = Path(run_dir) / LOCK_NAME
    if not path.is_file():
        return None
    try:
        with open(path, "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(fh, fcntl.LOCK_UN)
            return True
    except OSError:
        return None


def owner_gone(labels: dict[str, str]) -> bool:
    """Whether the process that started a container is provably gone.

    Proof is one of: the owner ran on this host and its pid is dead (or reused by a
    process that started later), or its run directory's lock file exists here and no
    one holds it. Anything else (another host, no labels) is not proof.
    """
    owner = labels.get(LABEL_OWNER, "")
    host, _, rest = owner.rpartition(":")
    host, _, pid_text = host.rpartition(":")
    ticks = rest
    if host == _host_id() and pid_text.isdigit():
        pid = int(pid_text)
        current = _start_ticks(pid)
        if current is None or current != ticks:
            return True
        if pid == os.getpid():
            return False
    run_dir = labels.get(LABEL_RUN_DIR, "")
    if run_dir and _lock_free(run_dir):
        return True
    return False


def _live_leases(containers: Iterable[dict[str, Any]]) -> frozenset[str]:
    """Pool ids holding a running lease container in one host's container listing."""
    return frozenset(
        str((c.get("Labels") or {}).get(LABEL_POOL, ""))
        for c in containers
        if (c.get("Labels") or {}).get(LABEL_LEASE) == LEASE_HOLDER and c.get("State") == "running"
    )


def lease_ended(labels: dict[str, str], state: str, leases: frozenset[str]) -> bool:
    """Whether a container's (or network's) owner is provably gone by its lease on this
    host (:data:`LABEL_LEASE`): a lease container that no longer runs, or a ``held``
    one whose pool has no running lease container here. Unleased ones: no proof."""
    lease = labels.get(LABEL_LEASE, "")
    if lease == LEASE_HOLDER:
        return state not in ("running", "created", "restarting")
    return lease == LEASE_HELD and labels.get(LABEL_POOL, "") not in leases


class LeftoverContainer(msgspec.Struct, frozen=True, kw_only=True):
    """A labelled container (or a compose episode's network) found by :func:`sweep`."""

    url: str
    kind: str = "container"
    """``container``, or ``network`` for the private network of a compose episode."""
    service: str = ""
    """The compose service a container ran (``main`` for the agent's); empty otherwise."""
    id: str
    run: str
    episode: str
    state: str
    warm_slot: str = ""
    """Set on a prewarmed container: its slot; ``episode`` then comes from the run
    directory's claims (``warm (unclaimed)`` when no episode took it yet)."""
    removable: bool
    """Safe to remove: the owner is provably gone, or the run was named."""
    removed: bool


async def sweep(
    urls: Iterable[str],
    *,
    run_id: str | None = None,
    everything_of_run: bool = False,
    dry_run: bool = False,
    timeout_s: float = 60.0,
) -> list[LeftoverContainer]:
    """Find labelled containers and remove those that are safe to remove.

    Removed: containers whose owner is provably gone (:func:`owner_gone`), and those of
    ``run_id`` started by another process (a resumed run's leftovers) or, with
    ``everything_of_run``, all of ``run_id``'s. Never another live run's.
    """
    found: list[LeftoverContainer] = []
    me = owner_label()
    claims: dict[str, dict[str, str]] = {}
    for url in urls:
        docker, connector = open_client(url)
        try:
            with docker_errors(f"sweep {url}", url=url), anyio.fail_after(timeout_s):
                containers = await docker.containers.list(
                    all=True, filters={"label": [LABEL_RUN]}
                )
            # One listing: a held container's lease was made before it, so it is in the
            # same list unless its pool ended it.
            leases = _live_leases(item._container for item in containers)
            for item in containers:
                labels: dict[str, str] = item._container.get("Labels") or {}
                state = str(item._container.get("State", ""))
                episode = labels.get(LABEL_EPISODE, "")
                slot = labels.get(LABEL_WARM, "")
                if slot:
                    run_dir = labels.get(LABEL_RUN_DIR, "")
                    if run_dir not in claims:
                        claims[run_dir] = await anyio.to_thread.run_sync(read_claims, run_dir)
                    unknown = "unclaimed" if run_dir else "no run directory to record a claim"
                    episode = claims[run_dir].get(item.id, f"{WARM_EPISODE} ({unknown})")
                run = labels.get(LABEL_RUN, "")
                same_run = run_id is not None and run == run_id
                remove = owner_gone(labels) or lease_ended(labels, state, leases) or (
                    same_run and (everything_of_run or labels.get(LABEL_OWNER) != me)
                )
                if remove and not dry_run:
                    await _remove(docker, item.id, timeout_s=timeout_s)
                found.append(
                    LeftoverContainer(
                        url=url,
                        id=item.id,
                        service=labels.get(LABEL_SERVICE, ""),
                        run=run,
                        episode=episode,
                        state=state,
                        warm_slot=slot,
                        removable=remove,
                        removed=remove and not dry_run,
                    )
                )
            # After the containers: a network goes only once nothing is attached to it.
            found += await _sweep_networks(
                docker, url, run_id=run_id, me=me, everything_of_run=everything_of_run,
                dry_run=dry_run, timeout_s=timeout_s, leases=leases,
            )
            if not dry_run:
                await _sweep_snapshots(docker, run_id, timeout_s=timeout_s)
        finally:
            await docker.close()
            await connector.close()
    return found


async def _sweep_networks(
    docker: aiodocker.Docker,
    url: str,
    *,
    run_id: str | None,
    me: str,
    everything_of_run: bool,
    dry_run: bool,
    timeout_s: float,
    leases: frozenset[str],
) -> list[LeftoverContainer]:
    """The labelled networks of compose episodes, by the same rule as their containers."""
    with docker_errors(f"sweep networks {url}", url=url), anyio.fail_after(timeout_s):
        networks = await docker.networks.list(filters={"label": [LABEL_RUN]})
    found: list[LeftoverContainer] = []
    for network in networks:
        labels: dict[str, str] = network.get("Labels") or {}
        run = labels.get(LABEL_RUN, "")
        same_run = run_id is not None and run == run_id
        remove = owner_gone(labels) or lease_ended(labels, "", leases) or (
            same_run and (everything_of_run or labels.get(LABEL_OWNER) != me)
        )
        removed = remove and not dry_run and await _remove_network(docker, network["Id"], timeout_s=timeout_s)
        found.append(
            LeftoverContainer(
                url=url,
                kind="network",
                id=str(network["Id"]),
                run=run,
                episode=labels.get(LABEL_EPISODE, ""),
                state=str(network.get("Name", "")),
                removable=remove,
                removed=removed,
            )
        )
    return found


async def _remove_network(docker: aiodocker.Docker, network_id: str, *, timeout_s: float) -> bool:
    """Remove a network; True when it is gone (or was already)."""
    with anyio.move_on_after(timeout_s, shield=True):
        try:
            network = await docker.networks.get(network_id)
            await network.delete()
            return True
        except aiodocker.DockerError as exc:
            return exc.status == 404
    return False


class _Claim(msgspec.Struct, frozen=True, kw_only=True):
    container: str
    slot: str
    episode: str
    at: float


_claim_decoder = msgspec.json.Decoder(_Claim)


def read_claims(run_dir: str | Path) -> dict[str, str]:
    """``container id → episode key`` of the prewarmed containers episodes took, from
    ``run_dir``'s :data:`CLAIMS_NAME` (empty when it is absent or unreadable; a line cut
    off by a crash is skipped)."""
    if not run_dir:
        return {}
    try:
        lines = (Path(run_dir) / CLAIMS_NAME).read_bytes().splitlines()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in lines:
        try:
            claim = _claim_decoder.decode(line)
        except msgspec.DecodeError:
            continue
        out[claim.container] = claim.episode
    return out


async def _sweep_snapshots(docker: aiodocker.Docker, run_id: str | None, *, timeout_s: float) -> None:
    """Remove RSRT verification images a killed process left: those of ``run_id`` (a run
    directory has one live process at most, so none is in use when it starts again) and
    those whose owner is provably gone. Their containers are gone by now."""
    with anyio.fail_after(timeout_s):
        images = await docker.images.list(filters={"label": [LABEL_SNAPSHOT]})
    for image in images:
        labels: dict[str, str] = image.get("Labels") or {}
        if (run_id is not None and labels.get(LABEL_RUN) == run_id) or owner_gone(labels):
            with anyio.move_on_after(timeout_s, shield=True), contextlib.suppress(aiodocker.DockerError):
                await docker.images.delete(image["Id"], force=True)


async def _remove(docker: aiodocker.Docker, container_id: str, *, timeout_s: float) -> bool:
    """Force-remove a container; True when it is gone (or was already)."""
    with anyio.move_on_after(timeout_s, shield=True):
        try:
            await docker.containers.container(container_id).delete(force=True, v=True)
            return True
        except aiodocker.DockerError as exc:
            if exc.status == 404:
                return True
            if exc.status == 409 and "already in progress" in exc.message:
                return True
            return False
    return False


def _join(config: dict[str, Any], network: str, aliases: tuple[str, ...]) -> None:
    """Put a container on a compose episode's network, answering to ``aliases``."""
    config["NetworkDisabled"] = False
    config["HostConfig"]["NetworkMode"] = network
    config["NetworkingConfig"] = {"EndpointsConfig": {network: {"Aliases": list(aliases)}}}


def _judge_state(info: dict[str, Any], *, healthy: bool) -> str | None:
    """``ok``, why the wait failed, or None (not decided yet), from ``inspect``."""
    state = info.get("State") or {}
    health = str((state.get("Health") or {}).get("Status", ""))
    if healthy:
        if health == "healthy":
            return "ok"
        if health == "unhealthy":
            return "unhealthy"
    elif state.get("Status") == "exited":
        code = state.get("ExitCode")
        return "ok" if code == 0 else f"exited with code {code}"
    if state.get("Status") in ("exited", "dead"):
        return f"exited with code {state.get('ExitCode')}"
    return None


def _judge_event(line: bytes, *, healthy: bool) -> str | None:
    """The same, from one line of Docker's event stream."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    action = str(event.get("Action") or event.get("status") or "")
    if healthy and action == "health_status: healthy":
        return "ok"
    if healthy and action == "health_status: unhealthy":
        return "unhealthy"
    if action == "die":
        code = ((event.get("Actor") or {}).get("Attributes") or {}).get("exitCode")
        if not healthy and code == "0":
            return "ok"
        return f"exited with code {code}"
    return None


class SandboxStats(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of the pool's counters."""

    live: int
    peak_live: int
    started: int
    removed: int
    start_failures: int
    remove_failures: int
    images_built: int
    warm: int
    images_shipped: int = 0
    """Images copied from one host to another that lacked them."""
    hosts_down: tuple[str, ...] = ()
    """Docker hosts out of placement now (they stopped answering)."""
    per_host: dict[str, int]


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
        self._builds = BuildOnce()
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
        self._episode_network: dict[str, str] = {}
        """Main container id → its compose episode's network (a snapshot joins it)."""
        self._compose: dict[str, ComposeSpec | None] = {}
        """Task path → its parsed docker-compose.yaml (None: not a compose task)."""
        self._lock_file: Any = None
        self._leases: dict[str, tuple[str, Any]] = {}
        """Host URL → (lease container id, its attached stdin stream), see LABEL_LEASE."""
        self._ships = BuildOnce()
        self._listings = ImageListings()
        self._images_shipped = 0
        self._build_limiter = anyio.Semaphore(max(1, config.build_concurrency))
        self._started = 0
        self._removed = 0
        self._start_failures = 0
        self._remove_failures = 0
        self._images_built = 0
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
                await anyio.to_thread.run_sync(self._take_lock)
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
        )

    async def _sweep_own(self) -> None:
        """Last resort at exit: anything Docker still lists as this pool's goes."""
        for host in self._hosts:
            if not host.up:
                continue  # its leftovers: ours when it is back, or any sweep's (lease ended)
            await self._sweep_own_on(host)

    async def _sweep_own_on(self, host: DockerHost, *, keep: frozenset[str] = frozenset()) -> None:
        """Remove this pool's containers (but ``keep``), networks and snapshots on ``host``."""
        try:
            with anyio.fail_after(self.config.api_timeout_s):
                found = await host.docker.containers.list(
                    all=True,
                    filters={"label": [f"{LABEL_POOL}={self._pool_id}"]},
                )
        except (aiodocker.DockerError, TimeoutError, OSError):
            return  # the daemon is gone; the next start-up sweep will find them
        for item in found:
            if item.id in keep:
                continue
            if await _remove(host.docker, item.id, timeout_s=self.config.api_timeout_s):
                self._removed += 1
        with contextlib.suppress(aiodocker.DockerError, TimeoutError, OSError):
            with anyio.fail_after(self.config.api_timeout_s):
                networks = await host.docker.networks.list(
                    filters={"label": [f"{LABEL_POOL}={self._pool_id}"]}
                )
            for network in networks:
                await _remove_network(host.docker, network["Id"], timeout_s=self.config.api_timeout_s)
        # A commit a killed predecessor asked for can land after our start-up sweep
        # (the daemon finishes it alone); at exit no snapshot of this run is in use.
        with contextlib.suppress(aiodocker.DockerError, TimeoutError, OSError):
            await _sweep_snapshots(host.docker, self.run_id, timeout_s=self.config.api_timeout_s)

    async def _close_hosts(self) -> None:
        for host in self._hosts:
            await host.close()
        self._hosts = []

    def _take_lock(self) -> None:
        assert self.run_dir is not None
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fh = open(self.run_dir / LOCK_NAME, "a+")  # noqa: SIM115 - held for the pool's life
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise SandboxError(
                f"run directory {self.run_dir} is in use by another live sandbox pool "
                f"({LOCK_NAME} is locked); one run directory serves one engine at a time"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(self._owner + "\n")
        fh.flush()
        self._lock_file = fh

    def _release_lock(self) -> None:
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    # ------------------------------------------------------------------ images

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
            await self._ensure_present(host, self.config.base_image)
            with anyio.CancelScope(shield=True), anyio.fail_after(timeout), docker_errors(
                f"lease on {host.url}", url=host.url
            ):
                created = await host.docker.containers.create(config)
                container_id = str(created.id)
                stream = created.attach(stdin=True)
                await stream._init()  # attached before the start: no moment unheld
                await created.start()
        except (SandboxError, aiodocker.DockerError) as exc:
            if container_id:
                await _remove(host.docker, container_id, timeout_s=timeout)
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
            with contextlib.suppress(Exception), anyio.move_on_after(5):
                await stream.close()
            if host.up:
                await _remove(host.docker, container_id, timeout_s=min(self.config.api_timeout_s, 30.0))

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
            # A daemon that restarted stopped our old containers and our old lease.
            old = self._leases.pop(host.url, None)
            await self._take_lease(host)
            if old is not None:
                with contextlib.suppress(Exception), anyio.move_on_after(5):
                    await old[1].close()
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

    async def _ensure_present(self, host: DockerHost, name: str) -> str | None:
        """``name``'s id on ``host``, shipped there from another up host that has it
        (``images/get`` streamed into ``images/load``) when it is missing; None when no
        host has it."""
        timeout = self.config.api_timeout_s
        with docker_errors(f"image {name}", url=host.url, permanent_4xx=True, error=ImageError):
            present = await image_id(host.docker, name, timeout_s=timeout)
        if present is not None:
            return present
        for source in self._hosts:
            if source is host or not source.up:
                continue
            with docker_errors(f"image {name}", url=source.url, permanent_4xx=True, error=ImageError):
                if await image_id(source.docker, name, timeout_s=timeout) is None:
                    continue

            async def ship(source: DockerHost = source) -> str:
                async with self._build_limiter:
                    shipped = await ship_image(source.docker, host.docker, name,
                                               timeout_s=_SHIP_TIMEOUT_S,
                                               source_url=source.url, target_url=host.url)
                self._images_shipped += 1
                log.info("shipped image %s from %s to %s", name, source.url, host.url)
                return shipped

            return await self._ships.get(f"{host.url}\0{name}", ship)
        return None

    async def ensure_image(self, task: Task) -> str:
        """The task's image tag, present on every host that is up (built once, cached by
        content hash). A host down now gets it when an episode is first placed there."""
        if not self._hosts:
            raise SandboxError("SandboxPool used outside `async with`")
        if len(self._hosts) == 1:
            return await self._ensure_on(self._hosts[0], task)
        tags: list[str] = []
        errors: list[Exception] = []

        async def one(host: DockerHost) -> None:
            try:
                tags.append(await self._ensure_on(host, task))
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

    async def _ensure_on(self, host: DockerHost, task: Task) -> str:
        spec = await self._compose_spec(task)
        if spec is not None:
            images = await self._compose_images(host, task, spec)
            return images[MAIN_SERVICE]
        timeout = self.config.api_timeout_s
        # A 400 here is a malformed reference (e.g. `UPPER/Case:bad tag`): the task's fault.
        where = f"task {task.name!r}: image {task.docker_image}"
        if task.docker_image and not task.environment_dir:
            with docker_errors(where, url=host.url, permanent_4xx=True, error=ImageError):
                present = await self._ensure_present(host, task.docker_image)
            if present is None:
                # Nothing is ever pulled here, so no later attempt finds it either.
                raise ImageError(
                    f"task {task.name!r}: image {task.docker_image} is not on {host.url} and "
                    "no registry is reachable; build or load it, or give the task an environment/"
                ).as_permanent()
            return task.docker_image
        if task.docker_image:
            with docker_errors(where, url=host.url, permanent_4xx=True, error=ImageError):
                if await image_id(host.docker, task.docker_image, timeout_s=timeout):
                    return task.docker_image
        key = f"{host.url}\0{task.name}\0{task.environment_dir}"

        async def build() -> str:
            # Task images build on each host (seconds over a present base, measured
            # cheaper than shipping the whole image); the base itself is shipped.
            await self._ensure_present(host, self.config.base_image)
            async with self._build_limiter:
                tag, built = await build_task_image(
                    host.docker,
                    task,
                    base_image=self.config.base_image,
                    url=host.url,
                    api_timeout_s=timeout,
                    log_dir=self.run_dir / "builds" if self.run_dir else None,
                )
            self._images_built += built
            return tag

        return await self._builds.get(key, build)

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
        image = await self._ensure_on(host, task)
        labels = self._labels(task, "image-files")
        if host.url in self._leases:
            labels[LABEL_LEASE] = LEASE_HELD
        return await self._listings.files(
            host.docker, image, base_image=self.config.base_image, labels=labels, url=host.url,
            api_timeout_s=self.config.api_timeout_s, start_slot=host.start_slot,
        )

    # ------------------------------------------------------------------ compose tasks

    async def _compose_spec(self, task: Task) -> ComposeSpec | None:
        """The task's parsed ``docker-compose.yaml`` (once per task), None without one. The
        loader refused a bad file already; one changed since is the task's fault too."""
        cache_key = f"{task.path}\0{task.environment_dir}"
        if cache_key not in self._compose:

            def parse() -> ComposeSpec | None:
                path = compose_file(task)
                if path is None:
                    return None
                variables = compose_variables(
                    task, cpus=self.config.default_cpus, memory_mb=self.config.default_memory_mb
                )
                return load_compose(path, task=task, variables=variables)

            try:
                self._compose[cache_key] = await anyio.to_thread.run_sync(parse)
            except TaskError as exc:
                raise ImageError(str(exc)).as_permanent() from exc
        return self._compose[cache_key]

    async def _compose_images(self, host: DockerHost, task: Task, spec: ComposeSpec) -> dict[str, str]:
        """Service name → image on ``host``, each built once (or found: never pulled)."""
        return {service.name: await self._service_image(host, task, service) for service in spec.services}

    async def _service_image(self, host: DockerHost, task: Task, service: ComposeService) -> str:
        timeout = self.config.api_timeout_s
        where = f"task {task.name!r} service {service.name!r}"
        if service.build_context is None:
            assert service.image is not None  # the parser gives every service one or the other
            with docker_errors(f"{where}: image {service.image}", url=host.url, permanent_4xx=True,
                               error=ImageError):
                present = await image_id(host.docker, service.image, timeout_s=timeout)
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
        key = f"{host.url}\0{task.name}\0{label}\0{service.build_context}\0{service.dockerfile}\0{args}"
        context = Path(service.build_context)

        async def build() -> str:
            await self._ensure_present(host, self.config.base_image)
            async with self._build_limiter:
                tag, built = await build_context_image(
                    host.docker,
                    task,
                    context=context,
                    dockerfile=service.dockerfile,
                    build_args=service.build_args,
                    service=label,
                    base_image=self.config.base_image,
                    url=host.url,
                    api_timeout_s=timeout,
                    log_dir=self.run_dir / "builds" if self.run_dir else None,
                )
            self._images_built += built
            return tag

        return await self._builds.get(key, build)

    @contextlib.asynccontextmanager
    async def _compose_sandbox(
        self, task: Task, spec: ComposeSpec, *, key: str
    ) -> AsyncIterator[DockerSandbox]:
        """Every service on a private network of this episode, ``main`` as the sandbox;
        all of it removed on exit whatever happens."""
        host = await self._place()
        images = await self._compose_images(host, task, spec)
        network_id, network = await self._create_network(host, task, key)
        started: list[str] = []
        running: dict[str, tuple[Any, float]] = {}
        main: Any = None
        error: BaseException | None = None
        try:
            for service in spec.services:
                for dep in service.depends_on:
                    container, since = running[dep.service]
                    await self._wait_for(host, task, key, spec.service(dep.service), container,
                                         since=since, condition=dep.condition)
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
            async with anyio.create_task_group() as tg:
                sandbox = self._wrap(main, task, key, host, tg)
                try:
                    yield sandbox
                except BaseException as exc:
                    error = exc  # raised after the task group closes, unwrapped
                finally:
                    with anyio.CancelScope(shield=True):
                        await sandbox.aclose()
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                if main is not None:
                    self._episode_network.pop(main.id, None)
                async with anyio.create_task_group() as tg:
                    for container_id in started:
                        tg.start_soon(self._discard, host, container_id)
                await self._discard_network(host, network_id)
        if error is not None:
            raise error

    def _service_config(
        self, task: Task, service: ComposeService, image: str, key: str
    ) -> dict[str, Any]:
        """A sidecar: the sandbox's limits and privileges (the defaults, not the task's:
        those are the agent's container's, as in Harbor), its own command and env."""
        memory = self.config.default_memory_mb * 1024 * 1024
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
                "NanoCpus": int(self.config.default_cpus * 1e9),
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

    async def _create_network(self, host: DockerHost, task: Task, key: str) -> tuple[str, str]:
        """A fresh bridge network for one episode, labelled like its containers; internal
        (no route out) unless both the task and ``sandbox.allow_network`` allow network."""
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
            network = await host.docker.networks.create({
                "Name": name,
                "Driver": "bridge",
                "Internal": internal,
                "CheckDuplicate": True,
                "Labels": labels,
            })
        self._networks[network.id] = host
        return network.id, name

    async def _discard_network(self, host: DockerHost, network_id: str) -> None:
        with anyio.CancelScope(shield=True):
            ok = await _remove_network(host.docker, network_id, timeout_s=self.config.api_timeout_s)
        self._networks.pop(network_id, None)
        if not ok:
            self._remove_failures += 1

    async def _wait_for(
        self,
        host: DockerHost,
        task: Task,
        key: str,
        service: ComposeService,
        container: Any,
        *,
        since: float,
        condition: str,
    ) -> None:
        """Wait, on Docker's events, until ``service`` meets a ``depends_on`` condition.

        ``service_healthy`` waits as long as Docker may take to decide (the healthcheck's
        start period and retries); ``service_completed_successfully`` as long as a build
        may take (``build_timeout_sec``: it is environment set-up). A service that dies,
        turns unhealthy or exits non-zero is a :class:`ContainerError` with its last output.
        """
        if condition == "service_started":
            return  # started in order before its dependants
        where = f"task {task.name!r} (episode {key}) service {service.name!r}"
        healthy = condition == "service_healthy"
        if healthy:
            assert service.healthcheck is not None  # the parser insists
            deadline = service.healthcheck.deadline_s() + self.config.api_timeout_s
        else:
            deadline = task.build_timeout_s
        params = {
            "since": f"{since:.3f}",
            "filters": json.dumps({"container": [container.id], "type": ["container"]}),
        }
        verdict: str | None = None
        try:
            with anyio.fail_after(deadline), docker_errors(f"{where}: events", url=host.url):
                async with host.docker._query("events", params=params, timeout=None) as response:
                    # Subscribed first, then asked: a change between the two is in the stream.
                    verdict = _judge_state(await container.show(), healthy=healthy)
                    if verdict is None:
                        async for line in response.content:
                            verdict = _judge_event(line, healthy=healthy)
                            if verdict is not None:
                                break
        except TimeoutError as exc:
            raise ContainerError(
                f"{where}: not {'healthy' if healthy else 'completed'} after {deadline:.0f} s"
            ) from exc
        if verdict != "ok":
            detail = await self._last_words(container, host)
            raise ContainerError(
                f"{where}: {verdict or 'event stream ended'} while "
                f"{'waiting for it to be healthy' if healthy else 'waiting for it to complete'}"
                f"; last output: {detail}"
            )

    async def _last_words(self, container: Any, host: DockerHost) -> str:
        """The end of a failed service's log and health log, for its error message."""
        parts: list[str] = []
        with contextlib.suppress(aiodocker.DockerError, TimeoutError, OSError), anyio.fail_after(
            self.config.api_timeout_s
        ):
            info = await container.show()
            checks = ((info.get("State") or {}).get("Health") or {}).get("Log") or []
            parts.extend(f"healthcheck: {str(c.get('Output', '')).strip()}" for c in checks[-1:])
            lines = await container.log(stdout=True, stderr=True, tail=20)
            parts.append("".join(lines).strip())
        text = " | ".join(p for p in parts if p).replace("\n", " / ")
        return text[-800:] or "(none)"

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
        slot = await host.start_slot()
        container_id: str | None = None
        host.live += 1
        try:
            # Shielded: a create the daemon finishes after we stopped listening would be
            # a container nobody knows the id of.
            with anyio.CancelScope(shield=True), anyio.fail_after(self.config.api_timeout_s):
                try:
                    created = await host.docker.containers.create(config)
                except aiodocker.DockerError as exc:
                    # overlay2 on xfs without `pquota` refuses the quota: fall back.
                    if "StorageOpt" not in config["HostConfig"] or "storage" not in exc.message.lower():
                        raise
                    host.storage_quota = False
                    del config["HostConfig"]["StorageOpt"]
                    self._limit_storage(config, host, task, refused=exc.message)
                    created = await host.docker.containers.create(config)
                container_id = str(created.id)
                self._containers[container_id] = (host, key)
                self._tmpfs[container_id] = tuple(config["HostConfig"].get("Tmpfs") or ())
            with anyio.fail_after(self.config.api_timeout_s):
                await created.start()
        except BaseException as exc:
            self._start_failures += 1
            if container_id is None:
                host.live -= 1
            else:
                await self._discard(host, container_id)
            if isinstance(exc, (aiodocker.DockerError, OSError, TimeoutError)) and (
                not isinstance(exc, aiodocker.DockerError) or exc.status == 900
            ):
                await self._check_host(host)
            if isinstance(exc, aiodocker.DockerError):
                if exc.status == 900:
                    raise DockerUnavailableError(
                        f"{where}: Docker daemon unreachable at {host.url}"
                    ) from exc
                if exc.status == 404:
                    raise ImageError(f"{where}: image {image} not found on {host.url}") from exc
                failed = ContainerError(
                    f"{where}: container start failed: Docker said {exc.status}: {exc.message}"
                )
                if permanent_status(exc.status):  # Docker refuses this config: always will
                    raise failed.as_permanent() from exc
                raise failed from exc
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
            ok = host.up and await _remove(host.docker, container_id,
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
        spec = await self._compose_spec(task)
        if spec is not None:
            async with self._compose_sandbox(task, spec, key=key) as sandbox:
                yield sandbox
            return
        host = await self._place()
        try:
            image = await self._ensure_on(host, task)
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
                await self._record_claim(container, key)
            except BaseException:
                await self._discard(host, container.id)
                raise
        if container is None:
            container = await self._start(host, task, image, key)
        error: BaseException | None = None
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
                    with anyio.CancelScope(shield=True):
                        await sandbox.aclose()
                    tg.cancel_scope.cancel()
        finally:
            await self._discard(host, container.id)
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
                await host.docker.images.delete(image, force=True)
            except aiodocker.DockerError as exc:
                if exc.status != 404:
                    self._remove_failures += 1

    async def _record_claim(self, container: Any, key: str) -> None:
        """Say, before the episode starts, which episode took a prewarmed container: its
        labels cannot (Docker fixes them at create), the run directory's claims can."""
        slot = self._warm_slots.pop(container.id, "")
        self._claims[container.id] = key
        if self.run_dir is None:
            return
        line = msgspec.json.encode(
            _Claim(container=container.id, slot=slot, episode=key, at=time.time())
        )
        path = self.run_dir / CLAIMS_NAME

        def append() -> None:
            with open(path, "ab") as fh:  # one short write: lines of racing claims stay whole
                fh.write(line + b"\n")

        await anyio.to_thread.run_sync(append)

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
        if await self._compose_spec(task) is not None:
            return 0  # a compose episode is several containers and a network: not prewarmed
        started = 0
        for _ in range(count):
            host = await self._place()
            image = await self._ensure_on(host, task)
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
            images_built=self._images_built,
            images_shipped=self._images_shipped,
            hosts_down=tuple(h.url for h in self._hosts if not h.up),
            warm=sum(len(q) for q in self._warm.values()),
            per_host={h.url: h.live for h in self._hosts},
        )

    async def containers(self) -> list[str]:
        """Ids of this run's containers that Docker knows about (for checks and tests)."""
        ids: list[str] = []
        for host in self._hosts:
            with docker_errors(f"list containers on {host.url}", url=host.url), anyio.fail_after(
                self.config.api_timeout_s
            ):
                found = await host.docker.containers.list(
                    all=True, filters={"label": [f"{LABEL_RUN}={self.run_id}"]}
                )
            ids.extend(c.id for c in found
                       if (c._container.get("Labels") or {}).get(LABEL_LEASE) != LEASE_HOLDER)
        return ids

