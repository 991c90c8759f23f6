"""Container lifecycle, cleanup, limits and isolation, against the real Docker daemon."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from rsr_async.config import SandboxConfig
from rsr_async.errors import ContainerError, DockerUnavailableError, SandboxError
from rsr_async.sandbox import SandboxPool, sweep
from rsr_async.sandbox.hosts import open_client
from rsr_async.sandbox.pool import LABEL_EPISODE, LABEL_OWNER, LABEL_RUN, LABEL_RUN_DIR
from tests.conftest import run_cli_env

from .conftest import containers_of, make_task, new_run_id

pytestmark = pytest.mark.docker


async def test_container_is_labelled_limited_and_unprivileged(pool: SandboxPool) -> None:
    task = make_task(cpus=0.5, memory_mb=256, allow_internet=True)
    async with pool.sandbox(task, key="job-1/attempt-0") as sandbox:
        docker, connector = open_client("unix:///var/run/docker.sock")
        try:
            info = await docker.containers.container(sandbox.id).show()
        finally:
            await docker.close()
            await connector.close()
        labels = info["Config"]["Labels"]
        assert labels[LABEL_RUN] == pool.run_id
        assert labels[LABEL_EPISODE] == "job-1/attempt-0"
        host = info["HostConfig"]
        assert host["NanoCpus"] == 500_000_000
        assert host["Memory"] == 256 * 1024 * 1024
        assert host["PidsLimit"] == 1024
        assert host["Privileged"] is False
        assert host["CapDrop"] == ["ALL"]
        # The task asks for internet but the config does not allow it: no network.
        assert host["NetworkMode"] == "none"
        assert not any("docker.sock" in bind for bind in host.get("Binds") or [])
        result = await sandbox.run(
            "ls /sys/class/net; test -e /var/run/docker.sock && echo SOCKET; "
            "grep CapEff /proc/self/status; curl -sS -m 2 http://172.17.0.1/ >/dev/null 2>&1 || echo NO-NET",
            time_limit=15,
        )
        lines = result.output.split()
        assert lines[0] == "lo" and "SOCKET" not in lines and "NO-NET" in lines
        cap_eff = int(result.output.split("CapEff:")[1].split()[0], 16)
        assert cap_eff & (1 << 21) == 0  # CAP_SYS_ADMIN is gone
        assert cap_eff & (1 << 0)  # CAP_CHOWN stays: package installs need it
        stats = pool.statistics()
        assert stats.live == 1 and stats.started >= 1


async def test_network_only_when_task_and_config_both_allow(tmp_path: Path) -> None:
    config = SandboxConfig(allow_network=True)
    async with SandboxPool(config, run_id=new_run_id()) as pool:
        async with pool.sandbox(make_task(allow_internet=True), key="net") as sandbox:
            result = await sandbox.run("ls /sys/class/net", time_limit=10)
            assert "eth0" in result.output.split()
        async with pool.sandbox(make_task(allow_internet=False), key="nonet") as sandbox:
            result = await sandbox.run("ls /sys/class/net", time_limit=10)
            assert result.output.split() == ["lo"]


async def test_cancel_mid_episode_leaves_no_container(pool: SandboxPool) -> None:
    entered = anyio.Event()

    async def episode() -> None:
        async with pool.sandbox(make_task(), key="cancelled") as sandbox:
            shell = await sandbox.shell()
            await shell.send("sleep 100\n")
            entered.set()
            await shell.wait(100)

    async with anyio.create_task_group() as tg:
        tg.start_soon(episode)
        await entered.wait()
        assert len(await containers_of(pool.run_id)) == 1
        tg.cancel_scope.cancel()
    assert await containers_of(pool.run_id) == []
    assert pool.statistics().live == 0


async def test_cancel_during_start_leaves_no_container(pool: SandboxPool) -> None:
    for delay in (0.0, 0.02, 0.05, 0.1, 0.2):
        with anyio.move_on_after(delay):
            async with pool.sandbox(make_task(), key=f"start-{delay}"):
                await anyio.sleep(10)
    assert await containers_of(pool.run_id) == []
    assert pool.statistics().live == 0


async def test_errors_in_the_episode_propagate_unwrapped_and_clean_up(pool: SandboxPool) -> None:
    with pytest.raises(KeyError, match="boom"):
        async with pool.sandbox(make_task(), key="fails") as sandbox:
            await sandbox.shell()
            raise KeyError("boom")
    assert await containers_of(pool.run_id) == []


async def test_fork_bomb_stops_at_the_pids_limit(tmp_path: Path) -> None:
    config = SandboxConfig(pids_limit=64)
    program = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(3); os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('stopped', n, e.errno)\n"
    )
    async with SandboxPool(config, run_id=new_run_id()) as pool:
        async with pool.sandbox(make_task(), key="bomb") as sandbox:
            await sandbox.write_file("/tmp/bomb.py", program)
            result = await sandbox.run("python3 /tmp/bomb.py", time_limit=20)
            words = result.output.split()
            assert words[0] == "stopped", result.output
            assert 30 < int(words[1]) < 64 and words[2] == "11"  # EAGAIN
            # The sandbox recovers once the bomb's processes are gone.
            await anyio.sleep(3.5)
            assert (await sandbox.run("echo alive", time_limit=10)).output == "alive\n"
        assert await containers_of(pool.run_id) == []


async def test_memory_limit_is_enforced_and_oom_is_an_infra_error(pool: SandboxPool) -> None:
    async with pool.sandbox(make_task(memory_mb=128), key="oom") as sandbox:
        assert not (await sandbox.state()).oom_killed
        fits = await sandbox.run("python3 -c 'x = bytearray(32 * 2**20); print(len(x))'", time_limit=30)
        assert fits.output == f"{32 * 2**20}\n"
        with pytest.raises(ContainerError, match="OOM-killed"):
            await sandbox.run("python3 -c 'x = bytearray(400 * 2**20); print(len(x))'", time_limit=30)
        state = await sandbox.state()
        assert state.running and state.oom_killed
        # In the shell the model sees what a terminal shows: the program was killed.
        shell = await sandbox.shell()
        await shell.send("python3 -c 'x = bytearray(400 * 2**20)'\n")
        assert await shell.wait(30)
        assert "Killed" in shell.observe()
        assert shell.last_exit_status == 137
    assert await containers_of(pool.run_id) == []


async def test_a_dead_container_is_an_infra_error(pool: SandboxPool) -> None:
    async with pool.sandbox(make_task(), key="dies") as sandbox:
        shell = await sandbox.shell()
        await sandbox.run("kill -9 $(pgrep -x sleep)", time_limit=10)
        with anyio.fail_after(10):
            while shell.alive:  # the stream ends when the container does
                await shell.wait(0.05)
            while (await sandbox.state()).running:  # Docker notices a moment later
                await shell.wait(0.05)
        assert not shell.alive
        with pytest.raises(ContainerError, match="container stopped"):
            await sandbox.run("echo hi", time_limit=10)
        with pytest.raises(ContainerError, match="container stopped"):
            await sandbox.shell()
    assert await containers_of(pool.run_id) == []


async def test_daemon_down_is_reported_fast() -> None:
    config = SandboxConfig(docker_urls=("unix:///nonexistent/docker.sock",))
    started = time.monotonic()
    with pytest.raises(DockerUnavailableError, match="nonexistent"):
        async with SandboxPool(config, run_id=new_run_id()):
            pass
    assert time.monotonic() - started < 5


async def test_two_hosts_share_the_load() -> None:
    # Two URLs for the same daemon stand in for two hosts.
    url = "unix:///var/run/docker.sock"
    config = SandboxConfig(docker_urls=(url, "unix:///run/../var/run/docker.sock"))
    async with SandboxPool(config, run_id=new_run_id()) as pool:
        async with pool.sandbox(make_task(), key="a"), pool.sandbox(make_task(), key="b"):
            assert sorted(pool.statistics().per_host.values()) == [1, 1]


async def test_run_directory_lock_refuses_a_second_live_pool(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    async with SandboxPool(SandboxConfig(), run_id=new_run_id(), run_dir=run_dir):
        with pytest.raises(SandboxError, match="in use by another live sandbox pool"):
            async with SandboxPool(SandboxConfig(), run_id=new_run_id(), run_dir=run_dir):
                pass


def _leave_a_container(run_id: str, run_dir: Path | None) -> str:
    """Start a container from a separate process that then dies without cleaning up."""
    code = (
        "import asyncio, os, sys\n"
        "from pathlib import Path\n"
        "from rsr_async.config import SandboxConfig\n"
        "from rsr_async.sandbox import SandboxPool\n"
        "from tests.sandbox.conftest import make_task\n"
        "async def main():\n"
        f"    pool = SandboxPool(SandboxConfig(), run_id={run_id!r}, run_dir={str(run_dir) if run_dir else None!r})\n"
        "    await pool.__aenter__()\n"
        "    cm = pool.sandbox(make_task(), key='orphan')\n"
        "    sandbox = await cm.__aenter__()\n"
        "    print(sandbox.id, flush=True)\n"
        "    os._exit(0)\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=run_cli_env(), capture_output=True, text=True, timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


async def test_sweep_removes_orphans_of_dead_owners_and_never_a_live_run(tmp_path: Path) -> None:
    live_run = new_run_id()
    async with SandboxPool(SandboxConfig(), run_id=live_run, run_dir=tmp_path / "live") as live:
        async with live.sandbox(make_task(), key="live") as sandbox:
            orphan_run = new_run_id()
            orphan = await anyio.to_thread.run_sync(_leave_a_container, orphan_run, tmp_path / "dead")
            assert await containers_of(orphan_run) == [orphan]
            # A dry run reports both; only the orphan is removable.
            found = {c.id: c for c in await sweep(["unix:///var/run/docker.sock"], dry_run=True)}
            assert found[orphan].removable and not found[orphan].removed
            assert not found[sandbox.id].removable
            # Another run starting up sweeps the orphan and leaves the live run alone.
            async with SandboxPool(SandboxConfig(), run_id=new_run_id()):
                pass
            assert await containers_of(orphan_run) == []
            assert await containers_of(live_run) == [sandbox.id]
            assert (await sandbox.run("echo still", time_limit=10)).output == "still\n"


async def test_gc_command_and_the_same_run_resumed(tmp_path: Path) -> None:
    run_id = new_run_id()
    orphan = await anyio.to_thread.run_sync(_leave_a_container, run_id, None)
    labels_owner_dead = await containers_of(run_id)
    assert labels_owner_dead == [orphan]
    with anyio.fail_after(60):
        out = await anyio.run_process(
            [sys.executable, "-m", "rsr_async", "sandbox", "gc", "--dry-run"], env=run_cli_env()
        )
    line = next(line for line in out.stdout.decode().splitlines() if line.startswith(orphan[:12]))
    assert "would remove" in line
    assert await containers_of(run_id) == [orphan]
    with anyio.fail_after(60):
        await anyio.run_process([sys.executable, "-m", "rsr_async", "sandbox", "gc"], env=run_cli_env())
    assert await containers_of(run_id) == []
    # Resuming a run removes its earlier process's leftovers at start-up.
    again = await anyio.to_thread.run_sync(_leave_a_container, run_id, None)
    assert await containers_of(run_id) == [again]
    async with SandboxPool(SandboxConfig(), run_id=run_id):
        assert await containers_of(run_id) == []


def test_owner_labels_name_this_process() -> None:
    from rsr_async.sandbox.pool import owner_gone, owner_label

    me = owner_label()
    assert me.split(":")[-2] == str(os.getpid())
    assert not owner_gone({LABEL_OWNER: me})
    dead = me.rsplit(":", 2)[0] + ":999999999:1"
    assert owner_gone({LABEL_OWNER: dead})
    assert not owner_gone({LABEL_OWNER: "other-host/abc:1:1"})
    assert not owner_gone({LABEL_RUN_DIR: "/nonexistent"})


async def test_starts_are_rate_limited() -> None:
    config = SandboxConfig(starts_per_s=4.0)
    times: list[float] = []
    async with SandboxPool(config, run_id=new_run_id()) as pool:
        release = anyio.Event()

        async def hold(i: int) -> None:
            async with pool.sandbox(make_task(), key=f"rate-{i}"):
                times.append(time.monotonic())
                if len(times) == 5:
                    release.set()
                await release.wait()

        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(hold, i)
        # Five starts at 4/s: the last may begin no earlier than 1 s after the first.
        assert max(times) - started >= 1.0
        assert pool.statistics().peak_live == 5
        assert await containers_of(pool.run_id) == []


async def test_warm_pool_serves_the_next_episode() -> None:
    task = make_task("warm-task")
    async with SandboxPool(SandboxConfig(warm_pool=2), run_id=new_run_id()) as pool:
        assert await pool.prewarm(task) == 2
        assert pool.statistics().warm == 2
        assert len(await containers_of(pool.run_id)) == 2
        started = time.monotonic()
        async with pool.sandbox(task, key="takes-warm") as sandbox:
            assert time.monotonic() - started < 0.5
            assert (await sandbox.run("echo warm", time_limit=10)).output == "warm\n"
            assert pool.statistics().warm == 1
        # Another task never gets this task's warm container.
        async with pool.sandbox(make_task("other"), key="cold"):
            assert pool.statistics().warm == 1
        assert len(await containers_of(pool.run_id)) == 1
        run_id = pool.run_id
    assert await containers_of(run_id) == []
