"""Fixtures for sandbox tests: the real Docker daemon, the offline base image, tiny tasks."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from rsr_async.config import SandboxConfig
from rsr_async.sandbox import SandboxPool, bootstrap_base_image
from rsr_async.sandbox.hosts import open_client
from rsr_async.sandbox.images import ship_between
from rsr_async.sandbox.pool import LABEL_RUN
from rsr_async.schema import Task

from .second_daemon import SecondDaemon, unavailable

FIXTURES = Path(__file__).resolve().parent / "fixtures"
BASE = SandboxConfig().base_image


@pytest.fixture(scope="session", autouse=True)
def base_image() -> str:
    """The base image, bootstrapped if absent (idempotent: instant when present)."""
    return anyio.run(bootstrap_base_image, SandboxConfig())


def make_task(name: str = "base", **fields: object) -> Task:
    """A task on the base image unless ``environment_dir`` or ``docker_image`` says otherwise."""
    if "environment_dir" not in fields and "docker_image" not in fields:
        fields["docker_image"] = BASE
    return Task(name=name, path=str(FIXTURES), instruction="test", **fields)  # type: ignore[arg-type]


def fixture_task(fixture: str, **fields: object) -> Task:
    return make_task(f"fixture-{fixture}", environment_dir=str(FIXTURES / fixture), **fields)


async def remove_image(tag: str) -> None:
    """Delete ``tag`` from the main daemon (an image a test built and owns)."""
    docker, connector = open_client(MAIN_URL)
    try:
        with anyio.fail_after(60):
            await docker.images.delete(tag, force=True)
    finally:
        await docker.close()
        await connector.close()


def new_run_id() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def config() -> SandboxConfig:
    return SandboxConfig(starts_per_s=20.0, api_timeout_s=60.0)


@pytest.fixture
async def pool(config: SandboxConfig, tmp_path: Path) -> AsyncIterator[SandboxPool]:
    async with SandboxPool(config, run_id=new_run_id(), run_dir=tmp_path / "run") as pool:
        yield pool
    assert await containers_of(pool.run_id) == []


async def containers_of(run_id: str) -> list[str]:
    """Ids of containers labelled with ``run_id``, asked of Docker directly."""
    docker, connector = open_client("unix:///var/run/docker.sock")
    try:
        with anyio.fail_after(30):
            found = await docker.containers.list(all=True, filters={"label": [f"{LABEL_RUN}={run_id}"]})
        return [c.id for c in found]
    finally:
        await docker.close()
        await connector.close()


MAIN_URL = "unix:///var/run/docker.sock"


@pytest.fixture(scope="session")
def second_daemon(base_image: str) -> Iterator[SecondDaemon]:
    """A private second dockerd for the whole session, with the base image shipped to it
    from the main daemon; stopped and deleted at the end (nothing in it is anyone else's)."""
    why = unavailable()
    if why:
        pytest.skip(f"no second Docker daemon: {why}")
    bridge = Path("/sys/class/net/docker0")
    had_bridge = bridge.exists()
    daemon = SecondDaemon()
    try:
        try:
            daemon.start()
        except RuntimeError as exc:
            pytest.skip(str(exc))
        # Its own network namespace keeps it off the host's links: a dockerd started with
        # --bridge=none in ours deletes docker0, and every build's RUN step with it.
        assert bridge.exists() == had_bridge, "the second dockerd removed the host's docker0"
        anyio.run(lambda: ship_between(MAIN_URL, daemon.url, base_image, timeout_s=600))
        yield daemon
    finally:
        daemon.stop()
