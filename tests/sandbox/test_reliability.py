"""Issue 15, against the real Docker daemon: permanent vs transient Docker errors, labels
that say which episode a prewarmed container serves, and the task's disk quota."""

from __future__ import annotations

import aiodocker
import pytest

from rsr_async.errors import ContainerError, ImageBuildError, ImageError
from rsr_async.sandbox import SandboxPool
from rsr_async.sandbox.container import docker_errors, permanent_status

from .conftest import fixture_task, make_task

pytestmark = pytest.mark.docker


def test_which_docker_statuses_are_permanent() -> None:
    assert [s for s in (400, 401, 403, 404, 408, 409, 422, 429, 500, 502, 503, 900, 0)
            if permanent_status(s)] == [400, 401, 403, 422]


async def test_invalid_image_reference_is_permanent(pool: SandboxPool) -> None:
    task = make_task("bad-reference", docker_image="UPPER/Case:bad tag")
    with pytest.raises(ImageError, match="invalid reference format") as caught:
        await pool.ensure_image(task)
    assert caught.value.permanent and not caught.value.retryable
    with pytest.raises(ImageError) as again:  # the episode's way in says the same
        async with pool.sandbox(task, key="bad-reference/a0"):
            pass
    assert again.value.permanent
    assert pool.statistics().started == 0


async def test_absent_image_is_permanent_here(pool: SandboxPool) -> None:
    # Nothing is pulled on this host, so no later attempt finds it either.
    with pytest.raises(ImageError, match="is not on") as caught:
        await pool.ensure_image(make_task("ghost", docker_image="no-such-image:1"))
    assert caught.value.permanent


async def test_failing_dockerfile_is_permanent_and_built_once(pool: SandboxPool) -> None:
    task = fixture_task("run-false")
    with pytest.raises(ImageBuildError, match="'fixture-run-false'.*build failed") as caught:
        await pool.ensure_image(task)
    assert caught.value.permanent and not caught.value.retryable
    assert "RUN false" in caught.value.log
    with pytest.raises(ImageBuildError) as again:  # remembered: no second build
        await pool.ensure_image(task)
    assert again.value is caught.value
    assert pool.statistics().images_built == 0


async def test_a_config_docker_refuses_is_permanent(pool: SandboxPool) -> None:
    # More CPUs than the host has: Docker answers 400 to the create, on every attempt.
    with pytest.raises(ContainerError, match="start failed: Docker said 400") as caught:
        async with pool.sandbox(make_task("greedy", cpus=4096.0), key="greedy/a0"):
            pass
    assert caught.value.permanent and not caught.value.retryable
    assert pool.statistics().live == 0


def test_transient_statuses_stay_retryable() -> None:
    for status in (500, 503, 409, 429, 408):
        with pytest.raises(ContainerError) as caught, docker_errors(
            "create", permanent_4xx=True
        ):
            raise aiodocker.DockerError(status, {"message": "busy"})
        assert not caught.value.permanent and caught.value.retryable, status
