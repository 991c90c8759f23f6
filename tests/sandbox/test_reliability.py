"""Issue 15, against the real Docker daemon: permanent vs transient Docker errors, labels
that say which episode a prewarmed container serves, and the task's disk quota."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import aiodocker
import anyio
import pytest

from rsr_async.config import SandboxConfig
from rsr_async.errors import ContainerError, ImageBuildError, ImageError
from rsr_async.sandbox import SandboxPool
from rsr_async.sandbox.docker_errors import docker_errors, permanent_status
from rsr_async.sandbox.pool import read_claims, sweep
from tests.conftest import run_cli_env

from .conftest import containers_of, fixture_task, make_task, new_run_id

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


async def test_a_prewarmed_container_maps_to_the_episode_that_took_it(tmp_path: Path) -> None:
    task = make_task("warm-map")
    run_dir = tmp_path / "run"
    key = "discover/warm-map/terminus2/a0/-/e-1"
    async with SandboxPool(SandboxConfig(warm_pool=2), run_id=new_run_id(), run_dir=run_dir) as pool:
        assert await pool.prewarm(task) == 2
        warm = set(await pool.containers())
        async with pool.sandbox(task, key=key) as sandbox:
            assert sandbox.id in warm  # it took a prewarmed one
            assert pool.episode_of(sandbox.id) == key
            assert read_claims(run_dir) == {sandbox.id: key}
            found = {c.id: c for c in await sweep(["unix:///var/run/docker.sock"], dry_run=True)
                     if c.run == pool.run_id}
            assert set(found) == warm
            assert found[sandbox.id].episode == key and found[sandbox.id].warm_slot
            (other,) = warm - {sandbox.id}
            assert found[other].episode == "warm (unclaimed)" and found[other].warm_slot
            assert found[other].warm_slot != found[sandbox.id].warm_slot
            # What a user sees: `sandbox ls` names the episode, not "warm".
            listing = await anyio.run_process(
                [sys.executable, "-m", "rsr_async", "sandbox", "ls"], env=run_cli_env()
            )
            line = next(x for x in listing.stdout.decode().splitlines()
                        if x.startswith(sandbox.id[:12]))
            assert f"episode={key}" in line and "prewarmed(slot=" in line
    assert await containers_of(pool.run_id) == []


async def test_storage_mb_is_enforced_where_this_host_can(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    task = make_task("disk-cap", storage_mb=16, memory_mb=256)
    caplog.set_level(logging.WARNING, logger="rsr_async.sandbox.pool")
    async with SandboxPool(SandboxConfig(), run_id=new_run_id(), run_dir=tmp_path / "run") as pool:
        (host,) = pool._hosts
        if host.storage_quota:
            pytest.skip(f"storage driver {host.storage_driver} has a quota: see the next test")
        for key in ("disk-cap/a0", "disk-cap/a1"):
            async with pool.sandbox(task, key=key) as sandbox:
                full = await sandbox.run(
                    "dd if=/dev/zero of=/tmp/big bs=1M count=32 2>&1; echo rc=$?; rm /tmp/big",
                    time_limit=60,
                )
                assert "No space left on device" in full.output and "rc=1" in full.output
                size = await sandbox.run("df -m --output=size /tmp | tail -1", time_limit=10)
                assert int(size.output.strip()) == 16
                # Uploads into the tmpfs go through a copy from inside: visible there.
                await sandbox.write_file("/tmp/given/note.txt", "hello\n")
                (tmp_path / "tree").mkdir(exist_ok=True)
                (tmp_path / "tree" / "a.txt").write_text("a\n")
                await sandbox.upload(tmp_path / "tree", "/tmp/tree")
                seen = await sandbox.run(
                    "cat /tmp/given/note.txt /tmp/tree/a.txt; stat -c %a /tmp; ls -A /var/tmp",
                    time_limit=10,
                )
                assert seen.output == "hello\na\n1777\n"
                # The gap, stated: outside /tmp this driver cannot stop a write.
                outside = await sandbox.run(
                    "dd if=/dev/zero of=/root/big bs=1M count=32 2>&1; echo rc=$?; rm -f /root/big",
                    time_limit=60,
                )
                assert "rc=0" in outside.output
        untouched = make_task("no-cap")
        async with pool.sandbox(untouched, key="no-cap/a0") as sandbox:  # no storage_mb: no tmpfs
            mounted = await sandbox.run("grep -c ' /tmp tmpfs' /proc/mounts", time_limit=10)
            assert mounted.output.strip() == "0"
    warnings = [r.getMessage() for r in caplog.records if "storage_mb" in r.getMessage()]
    assert len(warnings) == 1, warnings  # said once per host, naming the driver
    assert repr(host.storage_driver) in warnings[0] and "/tmp" in warnings[0]
    assert await containers_of(pool.run_id) == []


async def test_storage_quota_where_the_driver_has_one(tmp_path: Path) -> None:
    async with SandboxPool(SandboxConfig(), run_id=new_run_id(), run_dir=tmp_path / "run") as pool:
        (host,) = pool._hosts
        if not host.storage_quota:
            pytest.skip(
                f"this host's storage driver is {host.storage_driver!r}: Docker cannot cap a "
                "container's disk on it (StorageOpt size needs overlay2 on xfs with pquota, "
                "devicemapper, btrfs or zfs)"
            )
        task = make_task("disk-quota", storage_mb=64)
        async with pool.sandbox(task, key="disk-quota/a0") as sandbox:
            full = await sandbox.run(
                "dd if=/dev/zero of=/root/big bs=1M count=128 2>&1; echo rc=$?", time_limit=120
            )
            assert "rc=1" in full.output


async def test_a_refused_quota_falls_back_to_the_capped_tmp(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # overlay2 on xfs without `pquota` looks quota-capable from the API and refuses at
    # create; this host's driver refuses the same way when told it has a quota.
    caplog.set_level(logging.WARNING, logger="rsr_async.sandbox.pool")
    async with SandboxPool(SandboxConfig(), run_id=new_run_id(), run_dir=tmp_path / "run") as pool:
        (host,) = pool._hosts
        if host.storage_quota:
            pytest.skip(f"storage driver {host.storage_driver} takes the quota")
        host.storage_quota = True
        async with pool.sandbox(make_task("refused", storage_mb=8), key="refused/a0") as sandbox:
            size = await sandbox.run("df -m --output=size /tmp | tail -1", time_limit=10)
            assert int(size.output.strip()) == 8
        assert host.storage_quota is False
        assert pool.statistics().start_failures == 0
    (warning,) = [r.getMessage() for r in caplog.records if "storage_mb" in r.getMessage()]
    assert "refused" in warning
    assert await containers_of(pool.run_id) == []
