"""The Docker error table (issue 32), driven by the real daemon's answers: 404 for an
image or container that is not there, 400 for a malformed reference, 409 for removing a
running container, an error inside a 200 build stream, aiodocker's 900 for a socket
nobody serves, and a deadline. Each must come out as the table says: its class, whether
it is permanent, and that an answer the caller expects is a result, not an error."""

from __future__ import annotations

import io
import tarfile
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path

import aiodocker
import anyio
import pytest

from rsr_async.errors import (
    ContainerError,
    DockerUnavailableError,
    ImageBuildError,
    ImageError,
    SandboxError,
)
from rsr_async.sandbox.docker_errors import (
    BY_STATUS,
    DockerAnswer,
    Fate,
    docker_errors,
    fate_of,
)
from rsr_async.sandbox.hosts import open_client
from rsr_async.sandbox.ownership import LABEL_RUN, remove_container, remove_network

from .conftest import BASE, new_run_id

pytestmark = pytest.mark.docker

URL = "unix:///var/run/docker.sock"


@pytest.fixture
async def docker() -> AsyncIterator[aiodocker.Docker]:
    client, connector = open_client(URL)
    try:
        yield client
    finally:
        await client.close()
        await connector.close()


async def test_404_is_transient_unless_the_caller_expects_it(docker: aiodocker.Docker) -> None:
    missing = f"rsr-no-such-image:{uuid.uuid4().hex[:8]}"
    # Not expected: an ImageError another attempt may fix (a ship or a build may bring
    # it), so not permanent even where a refusal of ours would be.
    with pytest.raises(ImageError, match=r"inspect: Docker said 404: .*No such image") as caught:
        with docker_errors("inspect", url=URL, permanent_4xx=True, error=ImageError):
            await docker.images.inspect(missing)
    assert not caught.value.permanent and caught.value.retryable
    # Expected: a result for this caller, with what Docker said and what it maps to otherwise.
    with pytest.raises(DockerAnswer) as answered:
        with docker_errors("inspect", url=URL, error=ImageError, expected={404}):
            await docker.images.inspect(missing)
    assert answered.value.status == 404 and "No such image" in answered.value.message
    assert isinstance(answered.value.error, ImageError)
    assert isinstance(answered.value.__cause__, aiodocker.DockerError)


async def test_a_malformed_reference_is_permanent_where_the_caller_says_4xx_is(
    docker: aiodocker.Docker,
) -> None:
    for permanent in (True, False):
        with pytest.raises(ImageError, match="Docker said 400: .*invalid reference format") as caught:
            with docker_errors("inspect", url=URL, permanent_4xx=permanent, error=ImageError):
                await docker.images.inspect("UPPER/Case:bad tag")
        assert caught.value.permanent is permanent and caught.value.retryable is not permanent


async def test_a_conflict_stays_transient_and_removal_treats_gone_as_done(
    docker: aiodocker.Docker,
) -> None:
    container = await docker.containers.create({
        "Image": BASE, "Cmd": ["sleep", "60"], "Labels": {LABEL_RUN: new_run_id()},
        "NetworkDisabled": True, "HostConfig": {"NetworkMode": "none", "AutoRemove": False},
    })
    try:
        await container.start()
        # Removing a running container without force: 409, busy, not our request's fault.
        with pytest.raises(ContainerError, match="Docker said 409") as caught:
            with docker_errors("remove", url=URL, permanent_4xx=True), anyio.fail_after(60):
                await container.delete()
        assert not caught.value.permanent and caught.value.retryable
    finally:
        assert await remove_container(docker, container.id, timeout_s=60)
    # Gone already: Docker answers 404, which removal expects.
    assert await remove_container(docker, container.id, timeout_s=60)
    assert await remove_network(docker, uuid.uuid4().hex, timeout_s=60)


async def test_an_error_inside_a_build_stream_is_the_dockerfiles_fault(
    docker: aiodocker.Docker, tmp_path: Path,
) -> None:
    buffer = io.BytesIO()
    dockerfile = f"FROM {BASE}\nRUN false\n".encode()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        archive.addfile(info, io.BytesIO(dockerfile))
    with pytest.raises(ImageBuildError, match=r"^build: The command .* returned a non-zero code") as caught:
        with docker_errors("build", url=URL, permanent_4xx=True, error=ImageBuildError), \
                anyio.fail_after(300):
            build = docker.images.build(
                fileobj=io.BytesIO(buffer.getvalue()), encoding="identity", rm=True,
                forcerm=True, stream=True, labels={LABEL_RUN: new_run_id()},
            )
            async with aclosing(build) as items:
                async for _ in items:
                    pass
    cause = caught.value.__cause__
    assert isinstance(cause, aiodocker.DockerError) and cause.status == 0  # HTTP 200, then error
    assert caught.value.permanent and not caught.value.retryable


async def test_a_socket_nobody_serves_is_an_unreachable_daemon(tmp_path: Path) -> None:
    url = f"unix://{tmp_path / 'no-dockerd.sock'}"
    client, connector = open_client(url)
    try:
        with pytest.raises(DockerUnavailableError) as caught:
            with docker_errors("version", url=url), anyio.fail_after(30):
                await client.version()
    finally:
        await client.close()
        await connector.close()
    assert url in str(caught.value) and "sandbox.docker_urls" in str(caught.value)
    cause = caught.value.__cause__
    assert isinstance(cause, aiodocker.DockerError) and cause.status == 900
    assert caught.value.retryable and not caught.value.permanent


async def test_a_deadline_inside_is_no_answer_in_time(docker: aiodocker.Docker) -> None:
    with pytest.raises(SandboxError, match="version: Docker did not answer in time") as caught:
        with docker_errors("version", url=URL), anyio.fail_after(0):
            await docker.version()
    assert type(caught.value) is SandboxError and caught.value.retryable


def test_the_status_table() -> None:
    # Rows this daemon cannot be made to answer here (throttled, a 5xx, a full disk) are
    # aiodocker's own exception types as it raises them, fed through the same table.
    def mapped(status: int, message: str = "busy") -> SandboxError:
        with pytest.raises(SandboxError) as caught, docker_errors("x", permanent_4xx=True):
            raise aiodocker.DockerError(status, message)
        return caught.value

    assert [s for s in (400, 401, 403, 404, 408, 409, 422, 429, 500, 503, 0)
            if mapped(s).permanent] == [400, 401, 403, 422, 0]
    assert type(mapped(900)) is DockerUnavailableError
    assert not mapped(0, "write /var/lib: no space left on device").permanent  # the host's trouble
    assert not mapped(400, "connection reset by peer").permanent
    assert fate_of(aiodocker.DockerError(404, "")) is BY_STATUS[404] is Fate.TRANSIENT
    assert fate_of(ValueError()) is None  # ours: passes unmapped
    with pytest.raises(ValueError), docker_errors("x"):
        raise ValueError("ours")
