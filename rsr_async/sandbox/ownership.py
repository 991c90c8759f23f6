"""Whose a sandbox container is, and the sweep that removes what is provably abandoned.

Every container and compose network a :class:`~rsr_async.sandbox.pool.SandboxPool`
makes carries labels saying whose it is (run id, episode key, owner process and host,
run directory, pool id), so a start-up sweep or ``sandbox gc`` (:func:`sweep`) can remove
leftovers whose owner is provably gone and never touch another live run's. Proof that
an owner is gone is one of:

- **its process**: it ran on this host and its pid is dead, or reused by a process that
  started later (:data:`LABEL_OWNER`, :func:`owner_gone`);
- **its run directory's lock**: a live pool holds :data:`LOCK_NAME` there for its whole
  life (:func:`hold_run_lock`), so a lock nobody holds proves its owner gone;
- **its lease**, on a host whose ``/proc`` the sweeper cannot see (another machine's
  daemon): the pool holds a lease container's stdin open, and a container it made there
  whose pool has no running lease container any more is abandoned (:data:`LABEL_LEASE`,
  :func:`lease_ended`).

Anything else (another host, no labels) is not proof, and the container stays.

A prewarmed container is started before any episode exists and Docker cannot relabel it,
so it is labelled ``rsr_async.episode=warm`` plus a slot id (:data:`LABEL_WARM`); when an
episode takes it, the pool appends ``{container, slot, episode, at}`` to the run
directory's :data:`CLAIMS_NAME` before the episode starts (:func:`append_claim`), and
:func:`sweep` (so ``sandbox ls`` and ``gc``) reports the claiming episode from there
(:func:`read_claims`).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aiodocker
import anyio
import msgspec

from ..errors import ImageError, SandboxError
from ..run_lock import RunLock, lock_free
from .docker_errors import DockerAnswer, docker_errors
from .hosts import open_client

__all__ = [
    "CLAIMS_NAME",
    "LABEL_EPISODE",
    "LABEL_LEASE",
    "LABEL_OWNER",
    "LABEL_POOL",
    "LABEL_RUN",
    "LABEL_RUN_DIR",
    "LABEL_SERVICE",
    "LABEL_SNAPSHOT",
    "LABEL_TASK",
    "LABEL_WARM",
    "LEASE_EPISODE",
    "LEASE_HELD",
    "LEASE_HOLDER",
    "LOCK_NAME",
    "WARM_EPISODE",
    "LeftoverContainer",
    "append_claim",
    "hold_run_lock",
    "lease_ended",
    "owner_gone",
    "owner_label",
    "read_claims",
    "release_run_lock",
    "remove_container",
    "remove_network",
    "sweep",
    "sweep_snapshots",
]

# ------------------------------------------------------------------ labels

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
LABEL_POOL = "rsr_async.pool"
"""A random id per :class:`SandboxPool`: its exit sweep touches only its own containers."""
LOCK_NAME = "sandbox.lock"
"""Held (flock) by a live pool in its run directory: a free lock proves the owner gone."""
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

# ------------------------------------------------------------------ the owner


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


def hold_run_lock(run_dir: Path, owner: str) -> RunLock:
    """Take ``run_dir``'s :data:`LOCK_NAME` for a pool's whole life and write ``owner``
    (:func:`owner_label`) into it; blocking file I/O, so call it from a thread. Raises
    :class:`SandboxError` when another live pool holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock(run_dir / LOCK_NAME)
    if not lock.try_acquire(owner):
        raise SandboxError(
            f"run directory {run_dir} is in use by another live sandbox pool "
            f"({LOCK_NAME} is locked); one run directory serves one engine at a time"
        )
    return lock


def release_run_lock(lock: RunLock) -> None:
    """Let go of a lock :func:`hold_run_lock` took."""
    lock.release()


def _lock_free(run_dir: str) -> bool | None:
    """True when nobody holds the run directory's lock; None when it cannot be told."""
    return lock_free(Path(run_dir) / LOCK_NAME)


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


# ------------------------------------------------------------------ leases


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


# ------------------------------------------------------------------ claims


class _Claim(msgspec.Struct, frozen=True, kw_only=True):
    container: str
    slot: str
    episode: str
    at: float


_claim_decoder = msgspec.json.Decoder(_Claim)


def append_claim(run_dir: Path, *, container: str, slot: str, episode: str, at: float) -> None:
    """Record in ``run_dir``'s :data:`CLAIMS_NAME` that ``episode`` took the prewarmed
    ``container`` of ``slot``; blocking file I/O, so call it from a thread."""
    line = msgspec.json.encode(_Claim(container=container, slot=slot, episode=episode, at=at))
    with open(run_dir / CLAIMS_NAME, "ab") as fh:  # one short write: lines of racing claims stay whole
        fh.write(line + b"\n")


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


# ------------------------------------------------------------------ the sweep


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
                    await remove_container(docker, item.id, timeout_s=timeout_s)
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
                await sweep_snapshots(docker, run_id, timeout_s=timeout_s, url=url)
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
        removed = remove and not dry_run and await remove_network(docker, network["Id"], timeout_s=timeout_s)
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


async def sweep_snapshots(
    docker: aiodocker.Docker, run_id: str | None, *, timeout_s: float, url: str = ""
) -> None:
    """Remove RSRT verification images a killed process left: those of ``run_id`` (a run
    directory has one live process at most, so none is in use when it starts again) and
    those whose owner is provably gone. Their containers are gone by now."""
    with docker_errors(f"sweep snapshots on {url or 'Docker'}", url=url, error=ImageError), \
            anyio.fail_after(timeout_s):
        images = await docker.images.list(filters={"label": [LABEL_SNAPSHOT]})
    for image in images:
        labels: dict[str, str] = image.get("Labels") or {}
        if (run_id is not None and labels.get(LABEL_RUN) == run_id) or owner_gone(labels):
            with anyio.move_on_after(timeout_s, shield=True), contextlib.suppress(SandboxError):
                # Refused (in use, gone meanwhile), or no daemon: the next sweep tries again.
                with docker_errors(f"remove snapshot {image['Id']}", url=url, error=ImageError):
                    await docker.images.delete(image["Id"], force=True)


def _gone(status: int, message: str) -> bool:
    """No such container, or its removal is already under way: gone (or going)."""
    return status == 404 or (status == 409 and "already in progress" in message)


async def remove_container(docker: aiodocker.Docker, container_id: str, *, timeout_s: float) -> bool:
    """Force-remove a container; True when it is gone (or was already), False when Docker
    refused, is unreachable or did not answer within ``timeout_s`` (never raises)."""
    with anyio.move_on_after(timeout_s, shield=True):
        try:
            with docker_errors(f"remove container {container_id[:12]}", expected=_gone):
                await docker.containers.container(container_id).delete(force=True, v=True)
            return True
        except DockerAnswer:
            return True
        except SandboxError:  # refused, or the daemon is gone: still there as far as we know
            return False
    return False


async def remove_network(docker: aiodocker.Docker, network_id: str, *, timeout_s: float) -> bool:
    """Remove a network; True when it is gone (or was already)."""
    with anyio.move_on_after(timeout_s, shield=True):
        try:
            with docker_errors(f"remove network {network_id[:12]}", expected={404}):
                network = await docker.networks.get(network_id)
                await network.delete()
            return True
        except DockerAnswer:
            return True
        except SandboxError:  # refused, or the daemon is gone: still there as far as we know
            return False
    return False
