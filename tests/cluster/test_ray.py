"""Ray for real: a local cluster (a head and two worker nodes, each its own raylet
process on this machine, CPU only, small object stores), episode actors pinned one per
worker node, the real Engine and store on this process as the head."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from rsr_async.cluster import Dispatcher
from rsr_async.cluster.ray_backend import RayFleet, open_ray, ray_remotes
from rsr_async.config import ClusterConfig, Config, EngineConfig, RunConfig
from rsr_async.engine import Engine
from rsr_async.engine.fakes import make_jobs
from tests.cluster.conftest import wait_until

_STORE_BYTES = 80 * 2**20


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[object]:
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "object_store_memory": _STORE_BYTES, "include_dashboard": False},
    )
    workers = [cluster.add_node(num_cpus=1, object_store_memory=_STORE_BYTES) for _ in range(2)]
    cluster.wait_for_nodes()
    cluster.workers = workers  # type: ignore[attr-defined]
    try:
        yield cluster
    finally:
        cluster.shutdown()


def trivial_config(address: str, concurrency: int) -> Config:
    return Config(
        run=RunConfig(concurrency=concurrency),
        engine=EngineConfig(progress="none", retry_backoff_s=0.01, store_batch_ms=10.0),
        cluster=ClusterConfig(ray_address=address, actor_cpus=1.0, start_timeout_s=120.0),
    )


@asynccontextmanager
async def trivial_fleet(address: str, config: Config, run_id: str) -> AsyncIterator[tuple[RayFleet, Dispatcher]]:
    """Trivial actors on the cluster and a serving dispatcher over them (told of losses)."""
    async with (
        open_ray(address),
        ray_remotes(config, run_id=run_id, mode="trivial") as fleet,
        anyio.create_task_group() as tg,
    ):
        dispatcher = Dispatcher(fleet.remotes, batch_window_s=0.005, on_lost=fleet.on_lost,
                                replace=fleet.replace)
        await tg.start(dispatcher.serve)
        yield fleet, dispatcher
        tg.cancel_scope.cancel()


@pytest.mark.slow
async def test_jobs_dispatched_to_one_actor_per_node_are_each_stored_once(ray_cluster: object, tmp_path: Path) -> None:
    address = ray_cluster.address  # type: ignore[attr-defined]
    config = trivial_config(address, 512)
    jobs = make_jobs(3000)
    async with trivial_fleet(address, config, "test-trivial") as (fleet, dispatcher):
        assert len(fleet.remotes) == 2 and len(set(fleet.nodes.values())) == 2  # one per worker node
        async with Engine(config, runner=dispatcher, run_dir=tmp_path) as engine:
            keys = [str(r.key) async for r in engine.run(jobs)]
            counts = engine.store.counts()
        stats = dispatcher.statistics()
    assert sorted(keys) == sorted(str(j.key) for j in jobs)
    assert counts["succeeded"] == 3000 and counts["infra_error"] == 0
    assert stats.sent == 3000 and stats.batches <= 3000 / 8, stats


@pytest.mark.slow
async def test_an_actor_killed_mid_run_loses_nothing_and_stores_nothing_twice(ray_cluster: object, tmp_path: Path) -> None:
    address = ray_cluster.address  # type: ignore[attr-defined]
    config = trivial_config(address, 64)
    jobs = make_jobs(400)
    async with trivial_fleet(address, config, "test-kill") as (fleet, dispatcher), anyio.create_task_group() as tg:
        victim = fleet.remotes[1]
        pid = await victim.actor.pid.remote()

        async def kill_when_busy() -> None:
            await wait_until(
                lambda: dispatcher.statistics().sent >= 100 and dispatcher.in_flight_on(victim.name) > 0,
                every_s=0.001,
            )
            os.kill(pid, signal.SIGKILL)

        async with Engine(config, runner=dispatcher, run_dir=tmp_path) as engine:
            tg.start_soon(kill_when_busy)
            keys = [str(r.key) async for r in engine.run(jobs)]
            counts = engine.store.counts()
        stats = dispatcher.statistics()
        # Its node lives on: a replacement starts there and takes work like the others.
        await wait_until(lambda: dispatcher.statistics().alive == 2, timeout_s=120)
        [replacement] = [r for r in fleet.remotes if r.name not in ("actor-0", "actor-1")]
        more = make_jobs(400, harness="after")
        async with Engine(config, runner=dispatcher, run_dir=tmp_path / "after") as engine:
            after = [str(r.key) async for r in engine.run(more)]
        tg.cancel_scope.cancel()
    assert stats.lost == (victim.name,)
    assert sorted(keys) == sorted(str(j.key) for j in jobs)  # every job stored, each once
    assert counts["succeeded"] == 400
    assert fleet.nodes[replacement.name] == fleet.nodes[victim.name]
    assert replacement.run_id != victim.run_id  # its own containers' label
    assert sorted(after) == sorted(str(j.key) for j in more)
    assert dispatcher.done_on(replacement.name) > 0


def _describe(left: dict[str, list[str]]) -> str:
    import subprocess

    ids = [i for ids in left.values() for i in ids]
    if not ids:
        return ""
    return subprocess.run(["docker", "inspect", "--format", "{{.Name}} {{.State.Status}} {{json .Config.Labels}}", *ids],
                          capture_output=True, text=True, timeout=60).stdout


def _containers(label: str) -> list[str]:
    import subprocess

    return subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=rsr_async.run={label}"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()


@pytest.mark.docker
@pytest.mark.slow
async def test_real_episodes_on_ray_survive_losing_a_node_and_its_containers_are_swept(
    ray_cluster: object, tmp_path: Path
) -> None:
    """The whole pipeline through ``open_pipeline`` with ``cluster.ray_address``: each
    actor opens its own simulator and sandbox pool; a worker node is removed (its raylet
    and actor processes killed) while its episodes run."""
    import rsr_async
    from rsr_async.engine.store import Store
    from rsr_async.rsr.discover import discover_jobs
    from rsr_async.rsr.runtime import run_id_for
    from rsr_async.tasks import BUNDLED_SUITE, load_task

    cluster = ray_cluster
    tasks = [load_task(BUNDLED_SUITE / name) for name in ("word-frequency", "merge-intervals", "build-order")]
    config = rsr_async.load_config(values={
        "run": {"attempts": 4, "concurrency": 8},
        "engine": {"progress": "none", "retry_backoff_s": 0.1},
        "sim": {"decode_us_per_token": 4000.0},  # a few seconds an episode: time to lose a node
        "cluster": {"ray_address": cluster.address, "start_timeout_s": 300.0},  # type: ignore[attr-defined]
    })
    run_dir = tmp_path / "run"
    run_id = run_id_for(run_dir)
    notices: list[str] = []
    async with rsr_async.open_pipeline(config, run_dir=run_dir, on_notice=notices.append) as pipeline:
        dispatcher = pipeline.runtime.runner
        assert isinstance(dispatcher, Dispatcher)
        fleet_nodes = {n.node_id: n for n in cluster.workers}  # type: ignore[attr-defined]
        seen = []
        async with anyio.create_task_group() as tg:

            async def lose_a_node() -> None:
                await wait_until(
                    lambda: dispatcher.in_flight_on("actor-1") > 0 and bool(_containers(f"{run_id}-a1")),
                    timeout_s=240.0, every_s=0.2,
                )
                node_id = next(r.node_id for r in dispatcher.remotes if r.name == "actor-1")  # type: ignore[attr-defined]
                await anyio.to_thread.run_sync(cluster.remove_node, fleet_nodes[node_id])  # type: ignore[attr-defined]

            tg.start_soon(lose_a_node)
            seen = [result async for result in pipeline.run(tasks)]
            stats = pipeline.engine.statistics()
        dispatch = dispatcher.statistics()
    assert dispatch.lost == ("actor-1",), (dispatch, notices)
    assert any("lost actor-1" in n for n in notices)
    assert sorted(str(r.key) for r in seen) == sorted(str(j.key) for j in discover_jobs(tasks, config))
    assert all(r.status in ("succeeded", "failed") for r in seen), [(r.key, r.status, r.error) for r in seen]
    assert stats.retries >= 1  # the lost node's episodes ran again on the other
    with Store.open_readonly(run_dir) as store:
        counts = store.counts(stage="discover")
    assert counts["succeeded"] + counts["failed"] == 12 and counts["running"] == 0
    left = {label: _containers(f"{run_id}-{label}") for label in ("a0", "a1")}
    assert left == {"a0": [], "a1": []}, _describe(left)  # swept, and closed
    cluster.workers[1] = cluster.add_node(num_cpus=1, object_store_memory=_STORE_BYTES)  # type: ignore[attr-defined]


@pytest.mark.docker
@pytest.mark.slow
def test_run_with_ray_local_from_the_command_line(tmp_path: Path) -> None:
    """``python -m rsr_async run --ray local``: a private Ray instance in the run's own
    process, one actor on this machine, the same summary as a run without Ray."""
    import json
    import subprocess
    import sys

    from rsr_async.tasks import BUNDLED_SUITE

    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "rsr_async", "run", "--ray", "local", "--dataset", str(BUNDLED_SUITE / "word-frequency"),
         "--attempts", "2", "--progress", "none", "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ray: 1 episode actors on 1 nodes" in proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["episodes"] == 2, summary
    from rsr_async.rsr.runtime import run_id_for

    assert _containers(f"{run_id_for(run_dir)}-a0") == []
