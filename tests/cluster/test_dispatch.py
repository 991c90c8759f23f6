"""The dispatcher between a real Engine (real SQLite store) and remote runners in this
process: batching, placement, a lost remote's attempts retried elsewhere, cancellation
bringing the remote's partial trajectory back. Ray itself: test_ray.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace

import anyio
import anyio.lowlevel
import pytest

from rsr_async.cluster import Dispatcher, InProcessRemote, RemoteRunner
from rsr_async.config import Config, EngineConfig, RunConfig
from rsr_async.engine import Engine, Job
from rsr_async.engine.fakes import FakeRunner, make_jobs
from rsr_async.errors import RunnerLostError
from rsr_async.schema import EpisodeResult, EpisodeSpec, JobKey, Task
from tests.cluster.conftest import wait_until


def config(concurrency: int, **engine: object) -> Config:
    options: dict[str, object] = {"progress": "none", "retry_backoff_s": 0.01, "store_batch_ms": 10.0}
    options.update(engine)
    return Config(run=RunConfig(concurrency=concurrency), engine=EngineConfig(**options))  # type: ignore[arg-type]


class LosableRemote(InProcessRemote):
    """An in-process remote that can be made to vanish: after :meth:`lose`, every call
    raises RunnerLostError (what the Ray remote raises for a dead actor), and the
    runner's attempts are cancelled as a dead node's would be."""

    def __init__(self, runner: RemoteRunner, *, capacity: int) -> None:
        super().__init__(runner, capacity=capacity)
        self.gone = anyio.Event()
        self.serve_scope = anyio.CancelScope()

    def lose(self) -> None:
        self.gone.set()
        self.serve_scope.cancel()

    async def submit(self, data: bytes) -> None:
        if self.gone.is_set():
            raise RunnerLostError(f"{self.name}: gone")
        await super().submit(data)

    async def poll(self, wait_s: float) -> bytes:
        if self.gone.is_set():
            raise RunnerLostError(f"{self.name}: gone")
        with anyio.move_on_after(wait_s):
            async with anyio.create_task_group() as tg:
                async def watch() -> None:
                    await self.gone.wait()
                    tg.cancel_scope.cancel()
                tg.start_soon(watch)
                data = await super().poll(wait_s)
                tg.cancel_scope.cancel()
                return data
        raise RunnerLostError(f"{self.name}: gone")

    async def cancel(self, keys: list[str]) -> bytes:
        if self.gone.is_set():
            raise RunnerLostError(f"{self.name}: gone")
        return await super().cancel(keys)


@asynccontextmanager
async def remotes(runners: list[FakeRunner], capacity: int) -> AsyncIterator[list[LosableRemote]]:
    async with anyio.create_task_group() as tg:
        made = []
        for index, fake in enumerate(runners):
            remote = LosableRemote(RemoteRunner({"*": fake}, name=f"remote-{index}"), capacity=capacity)

            async def serve(remote: LosableRemote = remote) -> None:
                with remote.serve_scope:
                    await remote.runner.serve()

            tg.start_soon(serve)
            made.append(remote)
        await anyio.wait_all_tasks_blocked()
        yield made
        tg.cancel_scope.cancel()


async def run_all(engine: Engine, jobs: list[Job]) -> list[EpisodeResult]:
    results = []
    async for result in engine.run(jobs):
        assert isinstance(result, EpisodeResult)
        results.append(result)
    return results


async def test_every_job_runs_on_a_remote_once_and_is_stored_once_in_batches(tmp_path: Path) -> None:
    fakes = [FakeRunner(latency_s=(0.0, 0.02), fail_rate=0.3), FakeRunner(latency_s=(0.0, 0.02), fail_rate=0.3)]
    jobs = make_jobs(1500)
    async with remotes(fakes, capacity=400) as made, anyio.create_task_group() as tg:
        dispatcher = Dispatcher(made, batch_window_s=0.002)
        await tg.start(dispatcher.serve)
        async with Engine(config(800), runner=dispatcher, run_dir=tmp_path) as engine:
            results = await run_all(engine, jobs)
            counts = engine.store.counts()
            steps = engine.statistics().steps
        stats = dispatcher.statistics()
        tg.cancel_scope.cancel()
    ran = fakes[0].executed + fakes[1].executed
    assert sorted(ran) == sorted(str(j.key) for j in jobs)  # each once, none twice
    assert fakes[0].executed and fakes[1].executed  # both remotes worked
    assert counts["succeeded"] + counts["failed"] == 1500 == len(results)
    assert counts["succeeded"] == sum(r.status == "succeeded" for r in results)
    assert counts["infra_error"] == counts["cancelled"] == counts["running"] == counts["pending"] == 0
    assert {r.status for r in results} == {"succeeded", "failed"}
    assert steps == 1500  # the remote's step counts reach the engine's meter
    assert stats.sent == 1500 and stats.batches < 1500 / 4, stats  # batched, not one call a job
    assert stats.in_flight == 0


async def test_the_executions_of_one_runbook_meet_on_one_remote(tmp_path: Path) -> None:
    fakes = [FakeRunner(), FakeRunner(), FakeRunner()]
    task = Task(name="t", path="", instruction="x")
    jobs = [
        Job.episode(EpisodeSpec(
            key=JobKey(stage="execute", task=f"t{t}", harness="terminus2", runbook=f"r{r}d0", execution=e),
            task=task, harness="terminus2",
        ))
        for t in range(6) for r in range(4) for e in range(4)
    ]
    async with remotes(fakes, capacity=200) as made, anyio.create_task_group() as tg:
        dispatcher = Dispatcher(made)
        await tg.start(dispatcher.serve)
        async with Engine(config(200), runner=dispatcher, run_dir=tmp_path) as engine:
            await run_all(engine, jobs)
        tg.cancel_scope.cancel()
    where: dict[tuple[str, str], set[int]] = {}
    for index, fake in enumerate(fakes):
        for key in fake.executed:
            parts = key.split("/")
            where.setdefault((parts[1], parts[4]), set()).add(index)
    assert len(where) == 24
    assert all(len(remote) == 1 for remote in where.values()), where
    assert len({next(iter(r)) for r in where.values()}) == 3  # spread over all remotes


async def test_a_lost_remote_s_attempts_are_retried_on_the_others_and_stored_once(tmp_path: Path) -> None:
    fakes = [FakeRunner(latency_s=(0.05, 0.3)), FakeRunner(latency_s=(0.05, 0.3))]
    jobs = make_jobs(300)
    lost_names: list[str] = []

    async def on_lost(name: str, exc: BaseException) -> None:
        lost_names.append(name)

    async with remotes(fakes, capacity=60) as made, anyio.create_task_group() as tg:
        dispatcher = Dispatcher(made, on_lost=on_lost)
        await tg.start(dispatcher.serve)

        async def lose_when_busy() -> None:
            await wait_until(lambda: dispatcher.in_flight_on("remote-1") >= 30 and bool(fakes[1].finished))
            made[1].lose()

        async with Engine(config(120, infra_retries=2), runner=dispatcher, run_dir=tmp_path) as engine:
            tg.start_soon(lose_when_busy)
            results = await run_all(engine, jobs)
            stats = engine.statistics()
        dispatch = dispatcher.statistics()
        tg.cancel_scope.cancel()
    assert lost_names == ["remote-1"] and dispatch.lost == ("remote-1",) and dispatch.alive == 1
    assert sorted(str(r.key) for r in results) == sorted(str(j.key) for j in jobs)
    assert {r.status for r in results} == {"succeeded"}  # nothing lost, nothing blamed on the model
    assert stats.retries >= 30  # the lost remote's in-flight attempts, run again
    finished_twice = set(fakes[0].finished) & set(fakes[1].finished)
    assert not finished_twice  # what the lost remote finished and reported is not rerun


async def test_the_only_remote_lost_is_replaced_and_the_run_goes_on_there(tmp_path: Path) -> None:
    fakes = [FakeRunner(latency_s=(0.05, 0.2)), FakeRunner(latency_s=(0.0, 0.05))]
    jobs = make_jobs(200)
    async with remotes(fakes, capacity=50) as made, anyio.create_task_group() as tg:
        first, spare = made
        asked: list[str] = []

        async def replace(name: str) -> LosableRemote:
            asked.append(name)
            # While it "starts", placement waits for it instead of failing the attempts:
            # no remote is alive now.
            await wait_until(lambda: dispatcher.statistics().alive == 0)
            return spare

        dispatcher = Dispatcher([first], replace=replace)
        await tg.start(dispatcher.serve)

        async def lose_when_busy() -> None:
            await wait_until(lambda: dispatcher.in_flight_on("remote-0") >= 30 and bool(fakes[0].finished))
            first.lose()

        async with Engine(config(50, infra_retries=2), runner=dispatcher, run_dir=tmp_path) as engine:
            tg.start_soon(lose_when_busy)
            results = await run_all(engine, jobs)
        stats = dispatcher.statistics()
        tg.cancel_scope.cancel()
    assert asked == ["remote-0"]
    assert stats.lost == ("remote-0",) and stats.remotes == 2 and stats.alive == 1
    assert dispatcher.done_on("remote-1") == len(fakes[1].finished) > 0  # the replacement worked
    assert sorted(str(r.key) for r in results) == sorted(str(j.key) for j in jobs)
    assert {r.status for r in results} == {"succeeded"}  # every attempt waited for it, none failed
    # Run again: at most what the lost remote finished but never got to report.
    twice = set(fakes[0].finished) & set(fakes[1].finished)
    assert len(twice) <= len(fakes[0].finished) - dispatcher.done_on("remote-0")


async def test_a_failed_replacement_leaves_the_others_running(tmp_path: Path) -> None:
    fakes = [FakeRunner(latency_s=(0.02, 0.1)), FakeRunner(latency_s=(0.02, 0.1))]
    jobs = make_jobs(150)

    async def replace(name: str) -> None:
        raise RuntimeError(f"no node for {name}")

    async with remotes(fakes, capacity=40) as made, anyio.create_task_group() as tg:
        dispatcher = Dispatcher(made, replace=replace)
        await tg.start(dispatcher.serve)

        async def lose_when_busy() -> None:
            await wait_until(lambda: dispatcher.in_flight_on("remote-1") >= 10)
            made[1].lose()

        async with Engine(config(80, infra_retries=2), runner=dispatcher, run_dir=tmp_path) as engine:
            tg.start_soon(lose_when_busy)
            results = await run_all(engine, jobs)
        stats = dispatcher.statistics()
        tg.cancel_scope.cancel()
    assert stats.lost == ("remote-1",) and stats.remotes == 2 and stats.alive == 1
    assert {r.status for r in results} == {"succeeded"} and len(results) == 150


async def test_a_deadline_cancels_the_remote_attempt_and_keeps_its_partial_trajectory(tmp_path: Path) -> None:
    jobs = make_jobs(3)
    hang = {str(jobs[1].key)}
    fake = FakeRunner(hang=hang)
    async with remotes([fake], capacity=10) as made, anyio.create_task_group() as tg:
        dispatcher = Dispatcher(made)
        await tg.start(dispatcher.serve)
        async with Engine(config(10, job_deadline_s=1.0), runner=dispatcher, run_dir=tmp_path) as engine:
            results = {str(r.key): r for r in await run_all(engine, jobs)}
        assert made[0].runner.running == 0  # the remote attempt was cancelled, not left behind
        tg.cancel_scope.cancel()
    hung = results[str(jobs[1].key)]
    assert (hung.status, hung.end_reason) == ("infra_error", "timeout")
    assert hung.trajectory is not None
    assert hung.trajectory.messages[0].content == f"solve {jobs[1].key}"  # checkpointed remotely
    assert {results[str(j.key)].status for j in (jobs[0], jobs[2])} == {"succeeded"}


async def test_a_remote_infra_error_keeps_its_class_and_is_retried(tmp_path: Path) -> None:
    fake = FakeRunner(infra_rate=1.0, infra_attempts=1)
    jobs = make_jobs(5)
    async with remotes([fake], capacity=10) as made, anyio.create_task_group() as tg:
        dispatcher = Dispatcher(made)
        await tg.start(dispatcher.serve)
        async with Engine(config(10), runner=dispatcher, run_dir=tmp_path) as engine:
            results = await run_all(engine, jobs)
            retries = engine.statistics().retries
        tg.cancel_scope.cancel()
    assert {r.status for r in results} == {"succeeded"}
    assert retries == 5
    events = (tmp_path / "events.jsonl").read_text()
    assert events.count('"error":"ContainerError: fake: the container of') == 5  # the class, as if local


def test_a_dispatcher_needs_a_remote() -> None:
    with pytest.raises(Exception, match="at least one remote"):
        Dispatcher([])


async def test_two_losses_at_once_take_no_more_replacements_than_allowed() -> None:
    from rsr_async.cluster.ray_backend import RayFleet

    class Cluster:  # what RayFleet.replace asks of Ray: which nodes are alive
        @staticmethod
        def nodes() -> list[dict[str, object]]:
            return [{"NodeID": "n1", "Alive": True}, {"NodeID": "gone", "Alive": False}]

    spawned: list[int] = []

    async def spawn(index: int, encoded: bytes, node_id: str) -> object:
        spawned.append(index)
        await anyio.lowlevel.checkpoint()
        return SimpleNamespace(name=f"actor-{index}")

    fleet = RayFleet(ray=Cluster(), remotes=[], spawn=spawn, replacements_left=1,
                     nodes={"actor-0": "n1", "actor-1": "n1", "actor-2": "gone"},
                     configs={"actor-0": b"{}", "actor-1": b"{}", "actor-2": b"{}"})
    got: list[object] = []
    async with anyio.create_task_group() as tg:
        for name in ("actor-0", "actor-1"):
            async def one(name: str = name) -> None:
                got.append(await fleet.replace(name))
            tg.start_soon(one)
    assert sum(r is not None for r in got) == 1  # one replacement, the other refused
    assert len(spawned) == 1
    assert fleet.replacements_left == 0
    fleet.replacements_left = 1
    assert await fleet.replace("actor-2") is None  # its node is gone: the budget is kept
    assert fleet.replacements_left == 1 and len(spawned) == 1
