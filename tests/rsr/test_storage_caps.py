"""A task's ``storage_mb`` is a promise kept or a run refused (issue 30): on a Docker
host whose storage driver cannot cap a container's disk (fuse-overlayfs, overlay2 on
ext4) only ``/tmp`` is capped, and ``/app`` or ``/var`` took 3 GiB past ``storage_mb =
512``. Such a run is refused before anything starts, naming the tasks and the host,
unless ``sandbox.allow_uncapped_storage`` opts in. Real Docker, real CLI subprocess."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from rsr_async.config import SandboxConfig
from rsr_async.errors import ConfigError
from rsr_async.rsr.runtime import check_storage_caps
from rsr_async.sandbox.hosts import DockerHost
from rsr_async.tasks import BUNDLED_SUITE, load_task
from tests.conftest import run_cli_env

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def _host_can_cap() -> tuple[bool, str]:
    async def probe() -> tuple[bool, str]:
        url = SandboxConfig().docker_urls[0]
        host = DockerHost(url, starts_per_s=1.0, max_concurrent_starts=1)
        try:
            await host.probe_storage(15.0)
        finally:
            await host.close()
        return host.storage_quota, host.storage_driver

    return anyio.run(probe)


def _task_with_storage(root: Path) -> Path:
    task = root / "disk-hungry"
    shutil.copytree(BUNDLED_SUITE / "word-frequency", task)
    toml = task / "task.toml"
    text = toml.read_text().replace('"rsr-async/word-frequency"', '"rsr-async/disk-hungry"')
    toml.write_text(text.replace("[environment]\n", "[environment]\nstorage_mb = 512\n", 1))
    return task


def test_a_task_with_storage_mb_is_refused_where_no_cap_holds_unless_opted_in(tmp_path: Path) -> None:
    can_cap, driver = _host_can_cap()
    task_dir = _task_with_storage(tmp_path / "tasks")
    task = load_task(task_dir)
    assert task.storage_mb == 512
    if can_cap:  # this host keeps the promise: nothing to refuse
        anyio.run(check_storage_caps, SandboxConfig(), [task])
        pytest.skip(f"Docker's storage driver {driver!r} caps a container's disk here")
    with pytest.raises(ConfigError, match=rf"storage driver '{driver}'") as caught:
        anyio.run(check_storage_caps, SandboxConfig(), [task])
    assert "disk-hungry" in str(caught.value) and "allow_uncapped_storage=true" in str(caught.value)
    anyio.run(check_storage_caps, SandboxConfig(allow_uncapped_storage=True), [task])  # opted in
    no_storage = load_task(BUNDLED_SUITE / "word-frequency")
    anyio.run(check_storage_caps, SandboxConfig(), [no_storage])  # asks for no cap: runs

    run_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "rsr_async", "run", "--dataset", str(tmp_path / "tasks"),
         "--run-dir", str(run_dir), "--progress", "none"],
        env=run_cli_env(), capture_output=True, text=True, timeout=240,
    )
    lines = [line for line in out.stderr.splitlines() if "error" in line]
    assert out.returncode == 1 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "1 task(s) set storage_mb (disk-hungry)" in lines[0] and "Nothing was started" in lines[0]
    assert not (run_dir / "run.db").exists()  # refused before the store, the model or a sandbox
