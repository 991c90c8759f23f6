"""The engine carrying a pipeline: typed job kinds, successors as results arrive,
capacity per resource, resume that walks the graph, one stage alone."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import anyio
import pytest

from rsr_async.config import Config, EngineConfig, RunConfig
from rsr_async.engine import Engine, Job, JobContext, Store
from rsr_async.engine.fakes import FakeRunner, make_jobs
from rsr_async.schema import (
    EpisodeResult,
    EpisodeSpec,
    JobKey,
    JobResult,
    PlanResult,
    PlanSpec,
    Runbook,
    Task,
    Trajectory,
)

TASK = Task(name="t", path="", instruction="do it")


def config(concurrency: int = 8, model_concurrency: int = 8) -> Config:
    return Config(
        run=RunConfig(concurrency=concurrency, model_concurrency=model_concurrency),
        engine=EngineConfig(progress="none", retry_backoff_s=0.01, store_batch_ms=5.0),
    )


def plan_job(source: JobKey, index: int) -> Job:
    key = JobKey(stage="plan", task=source.task, harness=source.harness,
                 attempt=source.attempt, runbook=f"r{index}d0")
    return Job.of(PlanSpec(key=key, task=TASK, source_key=str(source), source="...", index=index, count=2,
                           source_trajectory=Trajectory(task=source.task, harness=source.harness)))


def exec_job(plan: JobKey, execution: int) -> Job:
    key = JobKey(stage="execute", task=plan.task, harness=plan.harness, attempt=plan.attempt,
                 runbook=plan.runbook, execution=execution)
    return Job.episode(EpisodeSpec(key=key, task=TASK, guidance="runbook"))


class TwoLevelGraph:
    """discover → 2 plans per success → 2 executions per plan."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def successors(self, job: Job, result: JobResult) -> Iterable[Job]:
        self.calls[str(job.key)] += 1
        if result.status != "succeeded":
            return []
        if job.key.stage == "discover":
            return [plan_job(job.key, i) for i in range(2)]
        if job.key.stage == "plan":
            return [exec_job(job.key, e) for e in range(2)]
        return []


class PlanRunner:
    def __init__(self, *, hang_after: int | None = None) -> None:
        self.executed: list[str] = []
        self.release = anyio.Event()
        self.hang_after = hang_after
        self.all_started = anyio.Event()
        if hang_after is None:
            self.release.set()

    async def __call__(self, job: Job, ctx: JobContext) -> PlanResult:
        self.executed.append(str(job.key))
        if len(self.executed) == self.hang_after:
            self.all_started.set()
        await self.release.wait()
        spec = job.spec
        assert isinstance(spec, PlanSpec)
        runbook = Runbook(id=job.key.runbook, task=spec.task.name, source_key=spec.source_key,
                          index=spec.index, text=f"runbook {spec.index}")
        return PlanResult(key=job.key, status="succeeded", runbook=runbook)


async def drain(engine: Engine, jobs: list[Job], **kwargs: object) -> list[JobResult]:
    return [r async for r in engine.run(jobs, **kwargs)]  # type: ignore[arg-type]


async def test_successors_join_the_run_as_results_arrive_and_are_stored_typed(tmp_path: Path) -> None:
    episodes = FakeRunner(fail_rate=0.4, seed=3)
    plans = PlanRunner()
    graph = TwoLevelGraph()
    sources = make_jobs(10)
    async with Engine(config(), runner={"episode": episodes, "plan": plans}, run_dir=tmp_path) as engine:
        results = await drain(engine, sources, graph=graph)
        stats = engine.statistics()
    succeeded = [r for r in results if r.key.stage == "discover" and r.status == "succeeded"]
    assert 0 < len(succeeded) < 10
    by_stage = Counter(r.key.stage for r in results)
    assert by_stage == {"discover": 10, "plan": 2 * len(succeeded), "execute": 4 * len(succeeded)}
    assert stats.stages["plan"].succeeded == 2 * len(succeeded)
    # every finished job was expanded exactly once
    assert set(graph.calls.values()) == {1}
    with Store.open_readonly(tmp_path) as store:
        stored = list(store.outputs(PlanResult, stage="plan"))
        assert len(stored) == 2 * len(succeeded)
        assert all(isinstance(r, PlanResult) and r.runbook is not None for r in stored)
        one = store.get(stored[0].key)
        assert isinstance(one, PlanResult) and one.runbook == stored[0].runbook
        assert isinstance(store.spec(stored[0].key), PlanSpec)
        assert {r.key.stage for r in store.results()} == {"discover", "execute"}  # episodes only
        assert store.counts(stage="execute")["succeeded"] + store.counts(stage="execute")["failed"] == (
            4 * len(succeeded)
        )


async def test_a_rerun_walks_the_graph_and_runs_only_what_is_left(tmp_path: Path) -> None:
    sources = make_jobs(6)
    first_episodes = FakeRunner(seed=1)
    plans = PlanRunner(hang_after=12)  # plans hang: the first run stops with them unfinished
    runners = {"episode": first_episodes, "plan": plans}
    async with Engine(config(model_concurrency=16), runner=runners, run_dir=tmp_path) as engine:

        async def consume() -> None:
            async for _ in engine.run(sources, graph=TwoLevelGraph()):
                pass

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(consume)
                await plans.all_started.wait()  # every plan started, none finished
                tg.cancel_scope.cancel()
    assert len(plans.executed) == 12
    with Store.open_readonly(tmp_path) as store:
        assert store.counts(stage="discover")["succeeded"] == 6
        assert store.counts(stage="plan")["cancelled"] == 12

    second_episodes = FakeRunner(seed=1)
    plans2 = PlanRunner()
    graph = TwoLevelGraph()
    async with Engine(config(), runner={"episode": second_episodes, "plan": plans2}, run_dir=tmp_path) as engine:
        results = await drain(engine, sources, graph=graph)
    # discovery is not repeated; the cancelled plans and all executions run once each
    assert [k for k in second_episodes.executed if k.startswith("discover/")] == []
    assert sorted(plans2.executed) == sorted(str(plan_job(s.key, i).key) for s in sources for i in range(2))
    assert Counter(r.key.stage for r in results) == {"plan": 12, "execute": 24}
    assert len(set(second_episodes.executed)) == len(second_episodes.executed) == 24

    third = FakeRunner(seed=1)
    async with Engine(config(), runner={"episode": third, "plan": PlanRunner()}, run_dir=tmp_path) as engine:
        assert await drain(engine, sources, graph=TwoLevelGraph()) == []
    assert third.executed == []


async def test_one_stage_alone_walks_earlier_stages_without_running_them(tmp_path: Path) -> None:
    sources = make_jobs(4)
    async with Engine(config(), runner={"episode": FakeRunner(), "plan": PlanRunner()}, run_dir=tmp_path) as engine:
        done = await drain(engine, sources, graph=TwoLevelGraph(), only_stages={"discover"})
    assert {r.key.stage for r in done} == {"discover"}
    with Store.open_readonly(tmp_path) as store:
        assert store.counts(stage="plan") == dict.fromkeys(store.counts(stage="plan"), 0)

    episodes = FakeRunner()
    async with Engine(config(), runner={"episode": episodes, "plan": PlanRunner()}, run_dir=tmp_path) as engine:
        done = await drain(engine, sources, graph=TwoLevelGraph(), only_stages={"plan"})
    assert Counter(r.key.stage for r in done) == {"plan": 8}
    assert episodes.executed == []  # neither discover nor execute ran


async def test_model_jobs_do_not_take_sandbox_slots(tmp_path: Path) -> None:
    """One sandbox slot, held by an episode that waits for a planner job to finish:
    only possible if the planner does not need a sandbox slot."""
    planned = anyio.Event()

    class WaitingEpisode:
        async def __call__(self, job: Job, ctx: JobContext) -> EpisodeResult:
            await planned.wait()
            return EpisodeResult(key=job.key, status="succeeded", end_reason="completed")

    class SignallingPlan(PlanRunner):
        async def __call__(self, job: Job, ctx: JobContext) -> PlanResult:
            result = await super().__call__(job, ctx)
            planned.set()
            return result

    episode = make_jobs(1)[0]
    plan = plan_job(JobKey(stage="discover", task="other"), 0)
    runners = {"episode": WaitingEpisode(), "plan": SignallingPlan()}
    async with Engine(config(concurrency=1, model_concurrency=1), runner=runners, run_dir=tmp_path) as engine:
        with anyio.fail_after(20):
            results = await drain(engine, [episode, plan])
    assert {r.key.stage: r.status for r in results} == {"discover": "succeeded", "plan": "succeeded"}


async def test_a_job_without_a_runner_for_its_kind_is_refused(tmp_path: Path) -> None:
    async with Engine(config(), runner={"episode": FakeRunner()}, run_dir=tmp_path) as engine:
        with pytest.raises(ValueError, match="no runner for jobs of kind 'plan'"):
            engine.run([plan_job(JobKey(stage="discover", task="t"), 0)])


async def test_an_infra_error_of_a_model_job_is_stored_as_its_own_kind(tmp_path: Path) -> None:
    from rsr_async.errors import LLMConnectionError

    class Down:
        async def __call__(self, job: Job, ctx: JobContext) -> PlanResult:
            error = LLMConnectionError("server gone")
            error.retryable = False
            raise error

    plan = plan_job(JobKey(stage="discover", task="t"), 0)
    async with Engine(config(), runner={"plan": Down()}, run_dir=tmp_path) as engine:
        (result,) = await drain(engine, [plan])
    assert isinstance(result, PlanResult)
    assert (result.status, result.end_reason, result.runbook) == ("infra_error", "infra", None)
    with Store.open_readonly(tmp_path) as store:
        assert isinstance(store.get(plan.key), PlanResult)
