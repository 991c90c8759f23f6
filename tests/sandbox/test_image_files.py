"""What a task image holds beyond the base image: listed once per image id, for the audit."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from rsr_async.config import SandboxConfig
from rsr_async.errors import DockerUnavailableError
from rsr_async.sandbox import SandboxPool
from rsr_async.sandbox.images import ImageListing, beyond_base
from rsr_async.schema import Task

from .conftest import BASE, FIXTURES, containers_of, make_task, new_run_id, remove_image

DOCKERFILE = """\
ARG BASE_IMAGE=rsr-base:bookworm
FROM ${BASE_IMAGE}
COPY data/ /app/data/
COPY ledger.py nonce.txt /app/
RUN printf '#!/bin/sh\\necho ok\\n' > /usr/local/bin/ledgertool2 \\
 && chmod 755 /usr/local/bin/ledgertool2 \\
 && mkdir -p /app/.git/objects/ab /var/log/ledger \\
 && touch /app/.git/objects/ab/cdef0123 /app/.git/HEAD /var/log/ledger/error.log \\
 && python3 -m compileall -q /app
WORKDIR /app
"""


def ledger_task(tmp_path: Path) -> Task:
    """A task image with data, a script, a command, a git directory and a log file."""
    env = tmp_path / "environment"
    (env / "data").mkdir(parents=True)
    (env / "Dockerfile").write_text(DOCKERFILE)
    (env / "data" / "input.csv").write_text("id,amount\n1,1200.25\n")
    (env / "ledger.py").write_text("print('ledger')\n")
    (env / "nonce.txt").write_text(uuid.uuid4().hex)  # a content never built before
    return make_task("image-files-ledger", environment_dir=str(env))


@pytest.mark.docker
async def test_a_task_image_lists_its_own_files_once_and_none_of_the_base_or_proc(
    tmp_path: Path,
) -> None:
    task = ledger_task(tmp_path)
    config = SandboxConfig(starts_per_s=20.0, api_timeout_s=60.0)
    tag = None
    try:
        async with SandboxPool(config, run_id=new_run_id(), run_dir=tmp_path / "run") as pool:
            tag = await pool.ensure_image(task)
            started = time.monotonic()
            files = await pool.image_files(task)
            first_s = time.monotonic() - started
            paths = set(files.paths)
            assert {"/app", "/app/data", "/app/data/input.csv", "/app/ledger.py", "/app/.git",
                    "/app/.git/HEAD", "/app/.git/objects", "/var/log/ledger/error.log",
                    "/usr/local/bin/ledgertool2"} <= paths
            assert files.commands == ("ledgertool2",)
            assert files.image.startswith("sha256:") and files.base.startswith("sha256:")
            assert not files.truncated and 0 < files.listed_s < 60
            # Not the base image's files, nor kernel views, caches or git's object store.
            assert not {"/usr/bin/bash", "/etc/passwd", "/usr/lib/python3"} & paths
            junk = [p for p in paths if p.startswith(("/proc", "/sys", "/dev", "/tmp", "/run",
                                                      "/usr/share/doc", "/var/cache"))
                    or "__pycache__" in p or "/.git/objects/" in p]
            assert junk == []
            assert list(files.paths) == sorted(files.paths, key=lambda p: (p.count("/"), p))
            # Once per image id: the second ask starts no container.
            started = time.monotonic()
            again = await pool.image_files(task, url=config.docker_urls[0])
            assert again is files and time.monotonic() - started < first_s
            assert await containers_of(pool.run_id) == []  # the listing container is gone
            with pytest.raises(DockerUnavailableError, match="not up"):
                await pool.image_files(task, url="tcp://127.0.0.1:1")
            # The base image itself holds nothing beyond the base.
            base = await pool.image_files(make_task("image-files-base", docker_image=BASE))
            assert base.paths == () and base.image == base.base
        assert await containers_of(pool.run_id) == []
    finally:
        if tag:
            await remove_image(tag)


def test_beyond_base_keeps_the_shallowest_paths_and_says_when_it_cut() -> None:
    base = ImageListing(paths={"/usr": 1, "/usr/bin": 2, "/usr/bin/ls": 3}, complete=True, seconds=0.5)
    image = ImageListing(
        paths={"/usr": 1, "/usr/bin": 2, "/usr/bin/ls": 3, "/app": 1, "/app/b.txt": 2,
               "/app/a.txt": 2, "/usr/bin/tool": 3, "/app/deep/x/y": 4},
        complete=True, seconds=1.0,
    )
    files = beyond_base(image, base, image="sha256:t", base_id="sha256:b")
    assert files.paths == ("/app", "/app/a.txt", "/app/b.txt", "/usr/bin/tool", "/app/deep/x/y")
    assert files.commands == ("tool",) and not files.truncated and files.listed_s == 1.0
    capped = beyond_base(image, base, image="sha256:t", cap=3)
    assert capped.paths == ("/app", "/app/a.txt", "/app/b.txt") and capped.truncated
    assert capped.commands == ()  # only those kept
    # A listing cut short (deadline, line cap) is marked too; without a base, all is new.
    partial = beyond_base(ImageListing(paths={"/app": 1}, complete=False, seconds=0.1), None,
                          image="sha256:t")
    assert partial.paths == ("/app",) and partial.truncated


@pytest.mark.docker
async def test_a_compose_task_lists_its_main_service_image(tmp_path: Path) -> None:
    from rsr_async.tasks.loader import load_task

    task = load_task(FIXTURES / "compose-web")
    config = SandboxConfig(starts_per_s=20.0, api_timeout_s=60.0)
    async with SandboxPool(config, run_id=new_run_id(), run_dir=tmp_path / "run") as pool:
        files = await pool.image_files(task)
        # main is the base plus WORKDIR /app; the store service's /srv is not the agent's.
        assert files.paths == ("/app",) and not files.truncated
    assert await containers_of(pool.run_id) == []


@pytest.mark.docker
async def test_an_image_that_cannot_be_listed_says_so_once(tmp_path: Path) -> None:
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text("ARG BASE_IMAGE=rsr-base:bookworm\nFROM ${BASE_IMAGE}\n"
                                    "COPY nonce.txt /app/\nRUN rm /usr/bin/find\n")
    (env / "nonce.txt").write_text(uuid.uuid4().hex)
    task = make_task("image-files-no-find", environment_dir=str(env))
    config = SandboxConfig(starts_per_s=20.0, api_timeout_s=60.0)
    tag = None
    try:
        async with SandboxPool(config, run_id=new_run_id(), run_dir=tmp_path / "run") as pool:
            tag = await pool.ensure_image(task)
            files = await pool.image_files(task)
            # Nothing known beyond the base, and said: the audit knows the base image only.
            assert files.paths == () and files.truncated
            assert await pool.image_files(task) is files  # the answer, not retried per episode
        assert await containers_of(pool.run_id) == []
    finally:
        if tag:
            await remove_image(tag)
