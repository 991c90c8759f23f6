"""Many sessions at once on one aiodocker client (past aiodocker's default 100 streams)."""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
import pytest

from rsr_async.config import SandboxConfig
from rsr_async.sandbox import DockerSandbox, DockerShell, SandboxPool

from .conftest import containers_of, make_task, new_run_id

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CONTAINERS = 20
SHELLS_PER_CONTAINER = 15  # 300 persistent shells, each holding one attached stream


async def test_300_concurrent_sessions_on_one_client() -> None:
    config = SandboxConfig(starts_per_s=10.0, max_concurrent_starts=8)
    async with SandboxPool(config, run_id=new_run_id()) as pool:
        assert len(pool._hosts) == 1  # one client, one connector
        async with AsyncExitStack() as stack:
            # One task enters every sandbox (a context belongs to the task that entered
            # it); the pool's start limiter paces them anyway.
            sandboxes = [
                await stack.enter_async_context(pool.sandbox(make_task(), key=f"scale-{i}"))
                for i in range(CONTAINERS)
            ]
            shells: list[DockerShell] = []
            with anyio.fail_after(120):
                async with anyio.create_task_group() as tg:

                    async def open_shell(sandbox: DockerSandbox) -> None:
                        shells.append(await sandbox.open_shell())

                    for sandbox in sandboxes:
                        for _ in range(SHELLS_PER_CONTAINER):
                            tg.start_soon(open_shell, sandbox)
            assert len(shells) == 300
            outputs: dict[int, str] = {}
            with anyio.fail_after(120):
                async with anyio.create_task_group() as tg:

                    async def talk(i: int, shell: DockerShell) -> None:
                        await shell.send(f"echo $(( {i} * 7 ))\n")
                        assert await shell.wait(60)
                        outputs[i] = shell.observe()

                    for i, shell in enumerate(shells):
                        tg.start_soon(talk, i, shell)
            # Every stream was open at the same time, and every one answered.
            assert all(shell.alive for shell in shells)
            for i, text in outputs.items():
                assert f"\n{i * 7}\n" in text, text
            assert len(await containers_of(pool.run_id)) == CONTAINERS
        assert pool.statistics().live == 0
    assert await containers_of(pool.run_id) == []
