"""Several Docker hosts for real: the main daemon and a private second one (issue 17).

Placement by load, images shipped to a host that lacks them, a host that dies mid-run
(its episodes fail as retryable infrastructure, the others take the next ones) and comes
back (used again), and the lease that lets any machine sweep a dead owner's containers.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest

from rsr_async.config import Config, EngineConfig, RunConfig, SandboxConfig
from rsr_async.engine import Engine, Job
from rsr_async.errors import DockerUnavailableError, InfraError
from rsr_async.harness.fakes import ReplayModel
from rsr_async.lifeline import guarded_argv
from rsr_async.llm.base import ChatMessage, Completion
from rsr_async.rsr.episode import EpisodeRunner
from rsr_async.sandbox import SandboxPool, sweep
from rsr_async.sandbox.hosts import open_client
from rsr_async.sandbox.images import bootstrap_base_image, image_id
from rsr_async.sandbox.pool import LABEL_LEASE, LABEL_RUN
from rsr_async.schema import EpisodeSpec, JobKey
from tests.rsr.test_reliability_outcomes import act, file_task

from .conftest import BASE, MAIN_URL, fixture_task, make_task, new_run_id
from .second_daemon import SecondDaemon

pytestmark = pytest.mark.docker


def two_hosts(daemon: SecondDaemon, **fields: object) -> SandboxConfig:
    return SandboxConfig(docker_urls=(MAIN_URL, daemon.url), starts_per_s=20.0,
                         api_timeout_s=30.0, host_retry_s=0.2, **fields)  # type: ignore[arg-type]


async def labelled(url: str, run_id: str) -> list[dict[str, object]]:
    docker, connector = open_client(url)
    try:
        with anyio.fail_after(30):
            found = await docker.containers.list(all=True, filters={"label": [f"{LABEL_RUN}={run_id}"]})
        return [c._container for c in found]
    finally:
        await docker.close()
        await connector.close()


async def test_the_shipped_base_image_keeps_its_id(second_daemon: SecondDaemon) -> None:
    ids = []
    for url in (MAIN_URL, second_daemon.url):
        docker, connector = open_client(url)
        try:
            ids.append(await image_id(docker, BASE, timeout_s=30))
        finally:
            await docker.close()
            await connector.close()
    assert ids[0] is not None and ids[0] == ids[1]


async def test_episodes_spread_over_both_hosts_by_load(second_daemon: SecondDaemon, tmp_path: Path) -> None:
    task = make_task()
    async with SandboxPool(two_hosts(second_daemon), run_id=new_run_id(), run_dir=tmp_path / "run") as pool:
        async with AsyncExitStack() as stack:
            boxes = [await stack.enter_async_context(pool.sandbox(task, key=f"e{i}")) for i in range(4)]
            assert pool.statistics().per_host == {MAIN_URL: 2, second_daemon.url: 2}
            for box in boxes:
                result = await box.run("echo $((6 * 7))", time_limit=30)
                assert result.output.strip() == "42"
            assert sorted({box.url for box in boxes}) == sorted([MAIN_URL, second_daemon.url])
        # Each host holds the pool's lease while it runs.
        leases = [c for c in await labelled(second_daemon.url, pool.run_id)
                  if (c.get("Labels") or {}).get(LABEL_LEASE) == "holder"]  # type: ignore[union-attr]
        assert [c["State"] for c in leases] == ["running"]
    assert await labelled(MAIN_URL, pool.run_id) == []
    assert await labelled(second_daemon.url, pool.run_id) == []


async def test_a_host_that_dies_fails_its_episodes_as_infrastructure_and_is_used_again(
    second_daemon: SecondDaemon, tmp_path: Path
) -> None:
    task = make_task()
    try:
        async with SandboxPool(two_hosts(second_daemon), run_id=new_run_id(),
                               run_dir=tmp_path / "run") as pool:
            errors: list[InfraError] = []
            async with pool.sandbox(task, key="main-0") as on_main:
                try:
                    async with pool.sandbox(task, key="second-0") as on_second:
                        assert (on_main.url, on_second.url) == (MAIN_URL, second_daemon.url)
                        assert (await on_second.run("echo up", time_limit=30)).output.strip() == "up"
                        second_daemon.kill()  # mid-episode
                        await on_second.run("echo still there?", time_limit=30)
                except InfraError as exc:
                    errors.append(exc)
                [error] = errors
                assert error.retryable, error
                assert pool.statistics().hosts_down == (second_daemon.url,)
                # Down: the next episodes go to the main host, though it is busier.
                async with pool.sandbox(task, key="retry-0") as retried:
                    assert retried.url == MAIN_URL
                    assert (await retried.run("echo retried", time_limit=30)).output.strip() == "retried"
                second_daemon.start()  # back (same data root; returns once /_ping answers)
                async with pool.sandbox(task, key="after-0") as after:
                    assert after.url == second_daemon.url
                    assert (await after.run("echo back", time_limit=30)).output.strip() == "back"
                assert pool.statistics().hosts_down == ()
        assert await labelled(MAIN_URL, pool.run_id) == []
        assert await labelled(second_daemon.url, pool.run_id) == []
    finally:
        if not second_daemon.running():
            second_daemon.start()


async def test_a_host_down_from_the_start_is_placed_around_and_used_once_it_answers(
    second_daemon: SecondDaemon, tmp_path: Path
) -> None:
    task = fixture_task("ok")  # a task image, built on each host that takes its episodes
    config = two_hosts(second_daemon)
    second_daemon.kill()  # down before the run starts (its data root, base image kept)
    try:
        said: list[str] = []
        # The run's start: the base image check skips the host that does not answer ...
        assert await bootstrap_base_image(config, log=said.append) == BASE
        assert any(second_daemon.url in line and "does not answer" in line for line in said), said
        async with SandboxPool(config, run_id=new_run_id(), run_dir=tmp_path / "run") as pool:
            assert pool.statistics().hosts_down == (second_daemon.url,)
            # ... and so does the image check (`images build`, the oracle).
            tag = await pool.ensure_image(task)
            async with pool.sandbox(task, key="first") as first:
                assert first.url == MAIN_URL
                assert (await first.run("cat /app/built.txt", time_limit=30)).exit_code == 0
                second_daemon.start()
                # Back: the less loaded host takes the next episode and builds the image there.
                async with pool.sandbox(task, key="second") as second:
                    assert second.url == second_daemon.url
                    assert (await second.run("cat /app/built.txt", time_limit=30)).exit_code == 0
            assert pool.statistics().hosts_down == ()
        docker, connector = open_client(second_daemon.url)
        try:
            assert await image_id(docker, tag, timeout_s=30) is not None
        finally:
            await docker.close()
            await connector.close()
        assert await labelled(MAIN_URL, pool.run_id) == []
        assert await labelled(second_daemon.url, pool.run_id) == []
    finally:
        if not second_daemon.running():
            second_daemon.start()


async def test_with_no_host_answering_the_start_names_each(tmp_path: Path) -> None:
    urls = tuple(f"unix://{tmp_path}/nowhere-{i}.sock" for i in range(2))
    with pytest.raises(DockerUnavailableError) as caught:
        await bootstrap_base_image(SandboxConfig(docker_urls=urls, api_timeout_s=5.0))
    for url in urls:
        assert url.removeprefix("unix://") in str(caught.value)


CHILD = """
import sys, anyio
from rsr_async.config import SandboxConfig
from rsr_async.sandbox import ownership
from rsr_async.sandbox import SandboxPool
from rsr_async.schema import Task
# As if on another machine: no /proc proof, and no run directory to lock.
ownership._host_id = lambda: "elsewhere/00000000"

async def main() -> None:
    config = SandboxConfig(docker_urls=(sys.argv[1], sys.argv[2]), api_timeout_s=30.0)
    task = Task(name="leased", path="/", instruction="-", docker_image=sys.argv[4])
    async with SandboxPool(config, run_id=sys.argv[3]) as pool:
        async with pool.sandbox(task, key="a"), pool.sandbox(task, key="b"):
            print("ready", flush=True)
            await anyio.sleep_forever()

anyio.run(main)
"""


async def test_a_dead_remote_owners_containers_are_swept_by_its_ended_lease(
    second_daemon: SecondDaemon,
) -> None:
    run_id = new_run_id()
    argv = guarded_argv([sys.executable, "-c", CHILD, MAIN_URL, second_daemon.url, run_id, BASE])
    async with await anyio.open_process(argv) as child:
        assert child.stdout is not None
        with anyio.fail_after(120):
            line = b""
            async for chunk in child.stdout:
                line += chunk
                if b"ready" in line:
                    break
        assert b"ready" in line
        # Alive: nothing of it is removable, though its pid cannot be looked up here.
        kept = await sweep([second_daemon.url], dry_run=True, timeout_s=30)
        mine = [item for item in kept if item.run == run_id]
        assert len(mine) == 2 and "lease" in {item.episode for item in mine}, mine
        assert not any(item.removable for item in mine)
        child.kill()
        await child.wait()
    # Its lease containers end with its connections; wait on their own state (a listing
    # right after the kill may race Docker closing their stdin).
    for url in (MAIN_URL, second_daemon.url):
        docker, connector = open_client(url)
        try:
            [lease] = [c for c in await labelled(url, run_id)
                       if (c.get("Labels") or {}).get(LABEL_LEASE) == "holder"]  # type: ignore[union-attr]
            with anyio.fail_after(30):
                await docker.containers.container(str(lease["Id"])).wait()
        finally:
            await docker.close()
            await connector.close()
        swept = [item for item in await sweep([url], timeout_s=30) if item.run == run_id]
        assert len(swept) == 2 and all(item.removed for item in swept), swept
        assert await labelled(url, run_id) == []


# -- through the episode runner and the engine: a dead host is never the model's failure ---

class KillsTheSecondHost(ReplayModel):
    """Replays, and before its second answer SIGKILLs the second daemon (the episode's
    host): synchronised on the model call, so the host dies between two agent steps."""

    def __init__(self, replies: list[str], daemon: SecondDaemon) -> None:
        super().__init__(replies, model_name="bystander")
        self._daemon = daemon

    async def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Completion:
        if len(self.calls) == 1:
            await anyio.to_thread.run_sync(self._daemon.kill)
        return await super().chat(messages, **kwargs)


async def test_an_episode_whose_host_dies_is_retried_on_the_other_host_not_graded(
    second_daemon: SecondDaemon, tmp_path: Path
) -> None:
    task = file_task(tmp_path / "task")
    spec = EpisodeSpec(key=JobKey(stage="discover", task=task.name, harness="terminus2"), task=task,
                       deadline_s=120)
    model = KillsTheSecondHost([act("echo hello > /tmp/out.txt\n"), act("true\n"),
                                act("echo hello > /tmp/out.txt\n"), act(done=True), act(done=True)],
                               second_daemon)
    config = Config(run=RunConfig(concurrency=1),
                    engine=EngineConfig(progress="none", infra_retries=2, retry_backoff_s=0.01,
                                        store_batch_ms=10.0))
    try:
        async with SandboxPool(two_hosts(second_daemon), run_id=new_run_id(),
                               run_dir=tmp_path / "run") as pool:
            # One sandbox held on the main host: by load, the episode starts on the second.
            async with pool.sandbox(make_task(), key="occupy") as held:
                assert held.url == MAIN_URL
                runner = EpisodeRunner(pool=pool, model=model, harness=config.harness, scripted=True)
                async with Engine(config, runner=runner, run_dir=tmp_path / "run") as engine:
                    [_ for _ in [r async for r in engine.run([Job.episode(spec)], stage="discover")]]
                    [stored] = list(engine.store.results(stage="discover"))
                    [row] = engine.store.rows(stage="discover")
            assert second_daemon.url in pool.statistics().hosts_down
        assert row.tries == 2, (stored.status, stored.end_reason, stored.error)  # retried, not graded
        assert stored.status == "succeeded", (stored.end_reason, stored.error)
        assert await labelled(MAIN_URL, pool.run_id) == []
    finally:
        if not second_daemon.running():
            second_daemon.start()
