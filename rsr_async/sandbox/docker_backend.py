"""The Docker backend (``sandbox.backend = "docker"``, the default).

What the runtime, the Ray actors and ``tasks validate`` ask of a backend
(:class:`~rsr_async.sandbox.base.SandboxBackend`), on the Docker hosts of
``sandbox.docker_urls``: the offline base image (:func:`.images.bootstrap_base_image`),
a :class:`~.pool.SandboxPool` per run, the storage-cap check of the hosts, and the sweep
of lost actors' containers (:func:`.ownership.sweep`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ..config import SandboxConfig
from ..errors import ConfigError, DockerUnavailableError
from ..schema import Task
from .base import SandboxBackend, SandboxProvider
from .hosts import DockerHost
from .images import bootstrap_base_image
from .ownership import sweep
from .pool import SandboxPool

__all__ = ["DockerBackend"]


class DockerBackend:
    """Docker sandboxes with the settings ``config`` (one :class:`SandboxPool` per run)."""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config

    async def prepare(self, *, force: bool = False, log: Callable[[str], None] | None = None) -> None:
        """Bootstrap the offline base image ``sandbox.base_image`` when it is missing
        (debootstrap + docker import; instant when present), or anew with ``force``."""
        await bootstrap_base_image(self.config, force=force, log=log)

    def open(self, *, run_id: str, run_dir: Path | None = None) -> SandboxPool:
        """A :class:`SandboxPool` over every configured host, labelled ``run_id``."""
        return SandboxPool(self.config, run_id=run_id, run_dir=run_dir)

    async def check_tasks(self, tasks: Sequence[Task]) -> None:
        """Refuse tasks that set ``storage_mb`` where no cap can hold it.

        A Docker host whose storage driver takes no ``StorageOpt size`` caps only ``/tmp``
        (the pool mounts a tmpfs there); the rest of the container's writable layer is
        unlimited, so a task's ``storage_mb`` would be a promise not kept. Unless
        ``sandbox.allow_uncapped_storage`` opts in, such a run is a
        :class:`~rsr_async.errors.ConfigError` naming the tasks and the hosts. A host that
        does not answer is left to the pool, which reports it when it opens.
        """
        sandbox = self.config
        wanting = [task.name for task in tasks if task.storage_mb]
        if not wanting or sandbox.allow_uncapped_storage:
            return
        uncapped: list[str] = []
        for url in sandbox.docker_urls:
            host = DockerHost(url, starts_per_s=sandbox.starts_per_s, max_concurrent_starts=1)
            try:
                await host.probe_storage(min(sandbox.api_timeout_s, 15.0))
            except DockerUnavailableError:
                continue
            finally:
                await host.close()
            if not host.storage_quota:
                uncapped.append(f"{url} (storage driver {host.storage_driver or 'unknown'!r})")
        if uncapped:
            shown = ", ".join(wanting[:3]) + (f" and {len(wanting) - 3} more" if len(wanting) > 3 else "")
            raise ConfigError(
                f"{len(wanting)} task(s) set storage_mb ({shown}), but Docker on {', '.join(uncapped)} "
                "cannot cap a container's disk (StorageOpt size needs overlay2 on xfs with pquota, "
                "devicemapper, btrfs or zfs): only /tmp would be capped. Nothing was started. Run on "
                "such a host, or pass --set sandbox.allow_uncapped_storage=true to run them with "
                "only /tmp capped"
            )

    async def sweep(self, run_ids: Sequence[str]) -> int:
        """Remove every container of ``run_ids`` on the configured hosts, live owner or not."""
        removed = 0
        for run_id in run_ids:
            found = await sweep(
                self.config.docker_urls, run_id=run_id, everything_of_run=True,
                timeout_s=self.config.api_timeout_s,
            )
            removed += sum(item.removed for item in found)
        return removed


def _implements_the_contract(backend: DockerBackend, pool: SandboxPool) -> tuple[SandboxBackend, SandboxProvider]:
    """Never called: mypy checks here that the Docker classes satisfy the base protocols."""
    return backend, pool
