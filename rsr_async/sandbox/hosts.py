"""Docker hosts: one aiodocker client each, with no cap on open streams, and start limits."""

from __future__ import annotations

import time

import aiodocker
import aiohttp
import anyio

from ..errors import DockerUnavailableError, SandboxError
from .docker_errors import docker_errors

__all__ = ["QUOTA_DRIVERS", "DockerHost", "open_client"]

QUOTA_DRIVERS = frozenset({"devicemapper", "btrfs", "zfs"})
"""Storage drivers that always take ``StorageOpt size`` (overlay2 does on xfs + pquota)."""


def open_client(url: str) -> tuple[aiodocker.Docker, aiohttp.BaseConnector]:
    """An aiodocker client for ``url`` (``unix:///path`` or ``tcp://host:port``).

    aiodocker's own connector allows 100 connections, and every attached exec stream
    holds one for its whole life: a 101st shell would hang. Ours has no limit. The
    caller owns the connector and closes it after the client.
    """
    connector: aiohttp.BaseConnector
    if url.startswith("unix://"):
        connector = aiohttp.UnixConnector(path=url[len("unix://") :], limit=0)
        return aiodocker.Docker(url="unix://localhost", connector=connector), connector
    if url.startswith(("tcp://", "http://", "https://")):
        connector = aiohttp.TCPConnector(limit=0)
        return aiodocker.Docker(url=url, connector=connector), connector
    raise DockerUnavailableError(
        f"sandbox.docker_urls: {url!r} is not a Docker URL (expected unix:///path or tcp://host:port)"
    )


class DockerHost:
    """One Docker daemon: its client, its load, and its container-start limiter."""

    def __init__(self, url: str, *, starts_per_s: float, max_concurrent_starts: int) -> None:
        self.url = url
        self.docker, self._connector = open_client(url)
        self.live = 0
        """Containers of this pool alive (or starting) on this host."""
        self._interval = 1.0 / starts_per_s
        self._next_start = 0.0
        self._starting = anyio.Semaphore(max(1, max_concurrent_starts))
        self.storage_driver = ""
        """The daemon's storage driver (``docker info``), once :meth:`probe_storage` ran."""
        self.storage_quota = False
        """Whether containers here can get a disk quota (``StorageOpt size``)."""
        self.quota_warned = False
        """The pool said once that this host cannot apply ``storage_mb``."""
        self.down_reason = ""
        """Why this host is out of placement (empty: it is up)."""
        self.down_since = 0.0
        self._next_probe = 0.0

    @property
    def up(self) -> bool:
        """Whether new containers may be placed here."""
        return not self.down_reason

    def mark_down(self, reason: str, *, retry_after_s: float) -> bool:
        """Take this host out of placement; True when it was up until now."""
        was_up = self.up
        self.down_reason = reason or "did not answer"
        if was_up:
            self.down_since = time.monotonic()
        self._next_probe = time.monotonic() + retry_after_s
        return was_up

    def probe_due(self) -> bool:
        """Whether a down host is due for another ``/_ping``."""
        return not self.up and time.monotonic() >= self._next_probe

    async def answers(self, timeout_s: float) -> bool:
        """Whether ``/_ping`` answers within ``timeout_s`` (never raises)."""
        try:
            with docker_errors(f"Docker host {self.url}: ping", url=self.url), anyio.fail_after(
                timeout_s
            ):
                async with self.docker._query("_ping", versioned_api=False) as response:
                    return (await response.read()) == b"OK"
        except SandboxError:
            return False

    def mark_up(self) -> None:
        """Back in placement."""
        self.down_reason = ""

    async def check(self, timeout_s: float) -> None:
        """Fail fast with DockerUnavailableError when the daemon does not answer."""
        try:
            with docker_errors(f"Docker host {self.url}", url=self.url), anyio.fail_after(timeout_s):
                await self.docker.version()
        except DockerUnavailableError:
            raise
        except Exception as exc:
            raise DockerUnavailableError(
                f"Docker host {self.url} is unusable: {exc}; check sandbox.docker_urls"
            ) from exc

    async def probe_storage(self, timeout_s: float) -> None:
        """Learn the daemon's storage driver, and whether it can cap a container's disk.

        ``HostConfig.StorageOpt`` ``size`` works on devicemapper, btrfs, zfs and on
        overlay2 over xfs mounted with ``pquota`` (the mount option cannot be seen from
        the API: a refused create clears :attr:`storage_quota`, see the pool)."""
        with docker_errors(f"Docker host {self.url}: info", url=self.url), anyio.fail_after(timeout_s):
            info = await self.docker.system.info()
        self.storage_driver = str(info.get("Driver", "") or "")
        status = {str(k): str(v) for k, v in (info.get("DriverStatus") or [])}
        backing = status.get("Backing Filesystem", "")
        self.storage_quota = self.storage_driver in QUOTA_DRIVERS or (
            self.storage_driver == "overlay2" and backing == "xfs"
        )

    async def start_slot(self) -> anyio.Semaphore:
        """Wait for this host's start rate, then return the held concurrency semaphore.

        Starts are spaced ``1/starts_per_s`` apart: the daemon slows for everyone when
        many containers start at once.
        """
        await self._starting.acquire()
        try:
            now = time.monotonic()
            slot = max(now, self._next_start)
            self._next_start = slot + self._interval
            if slot > now:
                await anyio.sleep(slot - now)
        except BaseException:
            self._starting.release()
            raise
        return self._starting

    async def close(self) -> None:
        """Close the client and its connector."""
        with anyio.move_on_after(5, shield=True):
            await self.docker.close()
            await self._connector.close()
