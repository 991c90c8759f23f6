"""Base image bootstrap and task image builds, against the real Docker daemon."""

from __future__ import annotations

import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import anyio
import pytest

from rsr_async.config import SandboxConfig
from rsr_async.errors import ImageBuildError, ImageError
from rsr_async.sandbox import SandboxPool, bootstrap_base_image
from rsr_async.sandbox.hosts import open_client
from rsr_async.sandbox.images import (
    BASE_PACKAGES,
    _import_rootfs,
    bootstrap_problem,
    context_digest,
    task_image_repository,
    task_image_tag,
)
from tests.conftest import run_cli_env

from .conftest import FIXTURES, fixture_task, make_task, new_run_id, remove_image

pytestmark = pytest.mark.docker


async def test_build_once_for_concurrent_requests_then_cache_hits(tmp_path: Path) -> None:
    env = tmp_path / "environment"
    shutil.copytree(FIXTURES / "ok", env)
    (env / "nonce.txt").write_text(uuid.uuid4().hex)  # a content never built before
    task = make_task("cache-test", environment_dir=str(env))
    tags: list[str] = []
    try:
        async with SandboxPool(SandboxConfig(), run_id=new_run_id(), run_dir=tmp_path / "run") as pool:
            async with anyio.create_task_group() as tg:
                for _ in range(4):

                    async def request() -> None:
                        tags.append(await pool.ensure_image(task))

                    tg.start_soon(request)
            assert len(set(tags)) == 1 and tags[0].startswith(f"{task_image_repository('cache-test')}:")
            assert pool.statistics().images_built == 1
            assert list((tmp_path / "run" / "builds").glob("*.log"))
            async with pool.sandbox(task, key="built") as sandbox:
                result = await sandbox.run("pwd; cat built.txt /opt/greeting.txt", time_limit=10)
                assert result.output == "/app\nbuilt\nhello from the fixture\n"
        # A new run with the unchanged directory finds the image: no rebuild.
        async with SandboxPool(SandboxConfig(), run_id=new_run_id()) as pool:
            started = time.monotonic()
            assert await pool.ensure_image(task) == tags[0]
            assert time.monotonic() - started < 2
            assert pool.statistics().images_built == 0
    finally:
        for tag in set(tags):
            await remove_image(tag)


def test_content_hash_sees_every_change(tmp_path: Path) -> None:
    env = tmp_path / "env"
    shutil.copytree(FIXTURES / "ok", env)
    first = context_digest(env, base_id="sha256:a")
    assert context_digest(env, base_id="sha256:a") == first
    assert context_digest(env, base_id="sha256:b") != first  # a new base image rebuilds
    (env / "greeting.txt").write_text("changed\n")
    changed = context_digest(env, base_id="sha256:a")
    assert changed != first
    (env / "greeting.txt").chmod(0o755)
    assert context_digest(env, base_id="sha256:a") != changed
    (env / "sub").mkdir()
    assert context_digest(env, base_id="sha256:a") != changed
    assert task_image_tag("My Task/1", first) == f"{task_image_repository('My Task/1')}:{first[:20]}"
    assert task_image_repository("My Task/1").startswith("rsr-task-my-task-1-")


async def test_missing_dockerfile_is_an_image_error_naming_the_task(pool: SandboxPool) -> None:
    with pytest.raises(ImageError, match="fixture-no-dockerfile.*Dockerfile is missing") as caught:
        await pool.ensure_image(fixture_task("no-dockerfile"))
    assert not caught.value.retryable
    with pytest.raises(ImageError, match="no environment directory"):
        await pool.ensure_image(make_task("nothing", environment_dir=None, docker_image=None))


async def test_absent_image_is_an_image_error(pool: SandboxPool) -> None:
    with pytest.raises(ImageError, match="'ghost'.*no-such-image:1 is not on"):
        await pool.ensure_image(make_task("ghost", docker_image="no-such-image:1"))
    with pytest.raises(ImageError, match="'ghost'"):
        async with pool.sandbox(make_task("ghost", docker_image="no-such-image:1"), key="g"):
            pass


async def test_failed_build_keeps_its_log(pool: SandboxPool) -> None:
    with pytest.raises(ImageBuildError, match="'fixture-broken'.*build failed") as caught:
        await pool.ensure_image(fixture_task("broken"))
    assert "about to fail" in caught.value.log
    assert "about to fail" in str(caught.value)
    assert not caught.value.retryable


async def test_invalid_dockerfile_is_a_build_error(pool: SandboxPool) -> None:
    with pytest.raises(ImageBuildError, match="'fixture-invalid'.*(?i:unknown instruction)"):
        await pool.ensure_image(fixture_task("invalid"))


async def test_build_timeout_comes_from_the_task(pool: SandboxPool) -> None:
    started = time.monotonic()
    with pytest.raises(ImageBuildError, match="timed out after 3 s") as caught:
        await pool.ensure_image(fixture_task("slow", build_timeout_s=3.0))
    assert time.monotonic() - started < 15
    assert "slow-build-started" in caught.value.log


async def test_bootstrap_is_idempotent_when_the_image_exists() -> None:
    lines: list[str] = []
    started = time.monotonic()
    tag = await bootstrap_base_image(SandboxConfig(), log=lines.append)
    assert tag == "rsr-base:bookworm"
    assert time.monotonic() - started < 5
    assert any("skipped" in line for line in lines)


def test_bootstrap_says_what_is_missing() -> None:
    assert bootstrap_problem(0, "/usr/sbin/debootstrap") is None
    assert "needs root" in (bootstrap_problem(1000, "/usr/sbin/debootstrap") or "")
    assert "apt-get install debootstrap" in (bootstrap_problem(0, None) or "")
    assert {"python3", "python3-pytest", "tmux", "git", "gcc", "curl"} <= set(BASE_PACKAGES)


async def test_bootstrap_cli_without_debootstrap_fails_clearly(tmp_path: Path) -> None:
    env = run_cli_env()
    env["PATH"] = str(tmp_path)  # no debootstrap here
    with anyio.fail_after(60):
        out = await anyio.run_process(
            [sys.executable, "-m", "rsr_async", "images", "bootstrap", "--tag", f"rsr-absent:{uuid.uuid4().hex[:8]}"],
            env=env, check=False,
        )
    assert out.returncode == 1
    assert b"apt-get install debootstrap" in out.stderr


async def test_root_filesystem_import_sets_cmd_and_path(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "marker").write_text("imported\n")
    tag = f"rsr-import-test:{uuid.uuid4().hex[:8]}"
    try:
        await _import_rootfs("unix:///var/run/docker.sock", root, tag, timeout_s=120)
        docker, connector = open_client("unix:///var/run/docker.sock")
        try:
            info = await docker.images.inspect(tag)
        finally:
            await docker.close()
            await connector.close()
        assert info["Config"]["Cmd"] == ["/bin/bash"]
        assert "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in info["Config"]["Env"]
    finally:
        await remove_image(tag)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("RSR_TEST_BOOTSTRAP") != "1", reason="~70 s and the network: set RSR_TEST_BOOTSTRAP=1")
async def test_full_bootstrap_under_another_tag() -> None:
    tag = f"rsr-base-test:{uuid.uuid4().hex[:8]}"
    try:
        assert await bootstrap_base_image(SandboxConfig(), tag=tag) == tag
        async with SandboxPool(SandboxConfig(base_image=tag), run_id=new_run_id()) as pool:
            async with pool.sandbox(make_task(docker_image=tag), key="fresh") as sandbox:
                result = await sandbox.run(
                    "python3 -m pytest --version && tmux -V && git --version && gcc --version | head -1",
                    time_limit=30,
                )
                assert result.exit_code == 0, result.output
    finally:
        await remove_image(tag)


async def test_a_failed_build_is_remembered_not_retried_per_episode() -> None:
    from rsr_async.errors import ImageBuildError, SandboxError
    from rsr_async.sandbox.images import BuildOnce

    once, calls = BuildOnce(), []

    async def broken() -> str:
        calls.append(1)
        raise ImageBuildError("task 't': RUN false returned 1", log="...")

    for _ in range(3):
        with pytest.raises(ImageBuildError):
            await once.get("t", broken)
    assert len(calls) == 1

    async def flaky() -> str:  # a retryable failure (the daemon hiccuped) is tried again
        calls.append(2)
        raise SandboxError("daemon busy")

    for _ in range(2):
        with pytest.raises(SandboxError):
            await once.get("u", flaky)
    assert calls.count(2) == 2
