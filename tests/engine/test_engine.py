"""The scheduler with the fakes: real SQLite files in tmp_path, real event loop."""

from __future__ import annotations

import asyncio
import io
import socket
import time
import urllib.request
from pathlib import Path

import anyio
import pytest

from rsr_async.config import Config, EngineConfig, RunConfig
from rsr_async.engine import (
    EXIT_INTERRUPTED,
    EXIT_JOB_ERRORS,
    EXIT_OK,
    Engine,
    Job,
    JobContext,
    Limits,
    PlainProgress,
    RateLimiter,
    Store,
    exit_code,
)
from rsr_async.engine.fakes import FakeRunner, SimulatedEpisode, make_jobs
from rsr_async.errors import ConfigMismatchError, StoreError, VerifierError
from rsr_async.schema import EpisodeResult, JobKey, Message, Trajectory


def config(concurrency: int = 64, **engine: object) -> Config:
    options: dict[str, object] = {"progress": "none", "retry_backoff_s": 0.01, "store_batch_ms": 10.0}
    options.update(engine)
    return Config(run=RunConfig(concurrency=concurrency), engine=EngineConfig(**options))  # type: ignore[arg-type]


async def collect(engine: Engine, jobs: list[Job], stage: str = "discover") -> list[EpisodeResult]:
    results = []
    async for result in engine.run(jobs, stage=stage):
        assert isinstance(result, EpisodeResult)
        results.append(result)
    return results


@pytest.mark.slow
async def test_2000_concurrent_jobs_all_run_at_once_and_are_stored(tmp_path: Path) -> None:
    runner = FakeRunner(latency_s=2.0, steps=2)
    jobs = make_jobs(2000)
    start = time.perf_counter()
    async with Engine(config(2000), runner=runner, run_dir=tmp_path) as engine:
        results = await collect(engine, jobs)
        stats = engine.statistics()
        counts = engine.store.counts()
    elapsed = time.perf_counter() - start
    assert runner.max_running == 2000  # all in flight together
    assert elapsed < 120, elapsed  # one after another would take 4000 s
    assert sorted(str(r.key) for r in results) == sorted(str(j.key) for j in jobs)
    assert counts["succeeded"] == 2000 and stats.succeeded == 2000 and stats.steps == 4000
    assert stats.running == 0 and stats.pending == 0 and exit_code(stats) == EXIT_OK


async def test_concurrency_limit_holds(tmp_path: Path) -> None:
    runner = FakeRunner(latency_s=(0.01, 0.03))
    async with Engine(config(7), runner=runner, run_dir=tmp_path) as engine:
        await collect(engine, make_jobs(100))
    assert runner.max_running == 7


async def test_failures_bugs_and_infra_errors_do_not_stop_the_batch(tmp_path: Path) -> None:
    runner = FakeRunner(latency_s=(0.0, 0.02), fail_rate=0.3, infra_rate=0.2, bug_rate=0.1, seed=3)
    jobs = make_jobs(300)
    async with Engine(config(32, infra_retries=2), runner=runner, run_dir=tmp_path) as engine:
        results = {str(r.key): r for r in await collect(engine, jobs)}
        stats = engine.statistics()
        store = engine.store
        rows = {r.key: r for r in store.rows()}
    assert len(results) == 300
    bugs = [k for k, r in results.items() if r.error and "RuntimeError" in r.error]
    assert bugs and all(results[k].status == "infra_error" for k in bugs)
    assert all("fake runner bug" in (results[k].error or "") and "fakes.py" in (results[k].error or "") for k in bugs)
    retried = [k for k in results if runner.executed.count(k) == 2]
    assert retried and stats.retries == len(retried)
    assert all(results[k].status in ("succeeded", "failed") for k in retried if k not in bugs)
    assert all(rows[k].tries == 2 for k in retried)
    assert stats.failed > 50 and stats.succeeded > 100
    assert stats.infra_error == len(bugs)
    assert exit_code(stats) == EXIT_JOB_ERRORS


async def test_non_retryable_infra_error_and_exhausted_retries(tmp_path: Path) -> None:
    attempts: dict[str, int] = {}

    async def runner(job: Job, ctx: JobContext) -> EpisodeResult:
        attempts[str(job.key)] = attempts.get(str(job.key), 0) + 1
        if job.key.task.endswith("0"):
            raise VerifierError("no reward file")  # not retryable
        if job.key.task.endswith("1"):
            from rsr_async.errors import LLMConnectionError

            raise LLMConnectionError("server gone")  # retryable, never recovers
        return EpisodeResult(key=job.key, status="succeeded", end_reason="completed", reward=1.0)

    async with Engine(config(4, infra_retries=3), runner=runner, run_dir=tmp_path) as engine:
        results = {r.key.task: r for r in await collect(engine, make_jobs(12))}
    assert attempts["discover/task-00000/fake/a0/-/e-1"] == 1
    assert attempts["discover/task-00001/fake/a0/-/e-1"] == 4
    assert results["task-00001"].status == "infra_error"
    assert results["task-00001"].error == "LLMConnectionError: server gone"
    assert results["task-00002"].status == "succeeded"


async def test_deadline_ends_a_hung_job_as_infra_timeout_with_its_partial_trajectory(tmp_path: Path) -> None:
    jobs = make_jobs(3)
    hung = jobs[0]
    runner = FakeRunner(hang={str(hung.key)})
    async with Engine(config(job_deadline_s=1.0), runner=runner, run_dir=tmp_path) as engine:
        results = {str(r.key): r for r in await collect(engine, [hung, *jobs[1:]])}
    timed_out = results[str(hung.key)]
    assert (timed_out.status, timed_out.end_reason) == ("infra_error", "timeout")
    assert timed_out.trajectory is not None and timed_out.trajectory.messages[0].origin == "task"
    assert sum(r.status == "succeeded" for r in results.values()) == 2


async def test_cancelling_the_callers_scope_cancels_jobs_and_leaves_the_store_consistent(
    tmp_path: Path,
) -> None:
    runner = FakeRunner(latency_s=(0.2, 1.0), steps=4)
    jobs = make_jobs(400)
    seen = 0
    with anyio.move_on_after(30) as outer:
        async with Engine(config(50), runner=runner, run_dir=tmp_path) as engine:
            async for _ in engine.run(jobs):
                seen += 1
                if seen == 40:
                    outer.cancel()
    assert outer.cancelled_caught
    store = Store.open_readonly(tmp_path)
    counts = store.counts()
    cancelled = list(store.results(status="cancelled"))
    store.close()
    assert counts["running"] == 0
    assert sum(counts.values()) == 400
    # those in flight at the cancel: 50, less any slot between a finish and its refill
    assert 40 <= counts["cancelled"] <= 50
    assert counts["succeeded"] >= 40
    assert all(r.trajectory is not None and r.end_reason == "cancelled" for r in cancelled)


async def test_asyncio_timeout_around_the_engine_cleans_up(tmp_path: Path) -> None:
    fake = FakeRunner(latency_s=60.0)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(None) as timeout:

            async def runner(job: Job, ctx: JobContext) -> EpisodeResult:
                if fake.running == 9:  # the tenth starts: time out once all are in flight
                    timeout.reschedule(asyncio.get_running_loop().time() + 0.05)
                return await fake(job, ctx)

            async with Engine(config(10), runner=runner, run_dir=tmp_path) as engine:
                await collect(engine, make_jobs(30))
    store = Store.open_readonly(tmp_path)
    counts = store.counts()
    store.close()
    assert (counts["running"], counts["cancelled"], counts["pending"]) == (0, 10, 20)


async def test_leaving_the_loop_early_cancels_the_rest(tmp_path: Path) -> None:
    runner = FakeRunner(latency_s=(0.05, 2.0))
    async with Engine(config(20), runner=runner, run_dir=tmp_path) as engine:
        async for _ in engine.run(make_jobs(100)):
            break
        with anyio.fail_after(10):
            while engine.statistics().running:  # noqa: ASYNC110 - asyncio closes the abandoned generator
                await anyio.sleep(0.01)
    with Store.open_readonly(tmp_path) as store:
        counts = store.counts()
    assert counts["running"] == 0 and sum(counts.values()) == 100
    assert counts["cancelled"] >= 15 and counts["succeeded"] >= 1


async def test_request_shutdown_drains_then_grace_expiry_cancels(tmp_path: Path) -> None:
    hang = {str(j.key) for j in make_jobs(100)[5:10]}
    runner = FakeRunner(latency_s=(0.05, 0.1), hang=hang)
    async with Engine(config(10, grace_period_s=0.3), runner=runner, run_dir=tmp_path) as engine:
        jobs = make_jobs(100)
        statuses = []
        async for result in engine.run(jobs):
            statuses.append(result.status)
            if len(statuses) == 3:
                engine.request_shutdown()
        stats = engine.statistics()
    assert stats.shutdown == "cancelling"  # the grace timer escalated
    assert stats.cancelled == 5  # the hung ones
    assert stats.pending > 0 and stats.running == 0
    assert exit_code(stats) == EXIT_INTERRUPTED


async def test_rerun_skips_finished_and_reruns_the_rest(tmp_path: Path) -> None:
    jobs = make_jobs(60)
    first = FakeRunner(latency_s=(0.0, 0.01), bug_rate=0.1, seed=1)
    async with Engine(config(8), runner=first, run_dir=tmp_path) as engine:
        await collect(engine, jobs)
        errored = {k for k, s in engine.store.statuses().items() if s == "infra_error"}
    assert errored
    second = FakeRunner(latency_s=(0.0, 0.01), seed=2)
    async with Engine(config(8), runner=second, run_dir=tmp_path) as engine:
        results = await collect(engine, jobs)
        stats = engine.statistics()
    assert set(second.executed) == errored  # only those ran again
    assert {str(r.key) for r in results} == errored
    assert stats.skipped == 60 - len(errored)
    third = FakeRunner()
    async with Engine(config(8), runner=third, run_dir=tmp_path) as engine:
        assert await collect(engine, jobs) == []
        assert engine.store.counts()["succeeded"] == 60
    assert third.executed == []


async def test_changed_config_is_refused_unless_forced(tmp_path: Path) -> None:
    runner = FakeRunner()
    async with Engine(config(), runner=runner, run_dir=tmp_path) as engine:
        await collect(engine, make_jobs(3))
    changed = Config(run=RunConfig(attempts=3), engine=config().engine)
    with pytest.raises(ConfigMismatchError, match=r"run\.attempts: 1 -> 3.*--force"):
        async with Engine(changed, runner=runner, run_dir=tmp_path):
            pass
    # operational settings may change freely
    async with Engine(config(concurrency=5, grace_period_s=1.0), runner=runner, run_dir=tmp_path):
        pass
    async with Engine(changed, runner=runner, run_dir=tmp_path, force=True) as engine:
        assert engine.store.config()["run"]["attempts"] == 3  # type: ignore[index]


async def test_a_second_engine_on_the_same_run_dir_is_refused(tmp_path: Path) -> None:
    async with Engine(config(), runner=FakeRunner(), run_dir=tmp_path):
        with pytest.raises(StoreError, match="in use by pid"):
            async with Engine(config(), runner=FakeRunner(), run_dir=tmp_path):
                pass


async def test_duplicate_keys_are_refused(tmp_path: Path) -> None:
    async with Engine(config(), runner=FakeRunner(), run_dir=tmp_path) as engine:
        with pytest.raises(ValueError, match="duplicate job keys"):
            engine.run(make_jobs(3) + make_jobs(1))


async def test_runner_returning_a_wrong_result_is_an_infra_error(tmp_path: Path) -> None:
    async def runner(job: Job, ctx: JobContext) -> EpisodeResult:
        other = JobKey(stage="x", task="other")
        return EpisodeResult(key=other, status="succeeded", end_reason="completed")

    async with Engine(config(), runner=runner, run_dir=tmp_path) as engine:
        [result] = await collect(engine, make_jobs(1))
    assert result.status == "infra_error" and "HarnessError" in (result.error or "")


async def test_loop_lag_shows_a_blocking_runner(tmp_path: Path) -> None:
    async def blocking(job: Job, ctx: JobContext) -> EpisodeResult:
        await anyio.sleep(0.1)
        time.sleep(0.25)  # noqa: ASYNC251 - the bug the lag monitor is there to reveal
        return EpisodeResult(key=job.key, status="succeeded", end_reason="completed")

    async with Engine(config(), runner=blocking, run_dir=tmp_path, lag_interval_s=0.01) as engine:
        await collect(engine, make_jobs(1))
        await anyio.sleep(0.05)
        assert engine.statistics().loop_lag_max_ms > 150


async def test_progress_lines_events_log_and_gauges(tmp_path: Path) -> None:
    stream = io.StringIO()
    progress = PlainProgress(stream, interval_s=0.05)
    runner = SimulatedEpisode(steps=3, model_latency_s=(0.01, 0.02))
    gauges = {"sandboxes alive": lambda: 7.0}
    async with Engine(config(), runner=runner, run_dir=tmp_path, progress=progress, gauges=gauges) as engine:
        await collect(engine, make_jobs(20, stage="plan"), stage="plan")
        snap = engine.snapshot()
    assert snap.cached_share > 0.5 and snap.gauges == {"sandboxes alive": 7.0}
    text = stream.getvalue()
    assert "[plan] 20/20 done" in text and "sandboxes alive 7" in text and "loop lag p99" in text
    events = (tmp_path / "events.jsonl").read_text().splitlines()
    assert sum('"event":"job"' in line for line in events) == 20
    assert '"event":"close"' in events[-1]


async def test_rich_display_renders(tmp_path: Path) -> None:
    from rsr_async.engine import RichProgress

    progress = RichProgress(interval_s=0.05)
    async with Engine(config(), runner=FakeRunner(latency_s=0.1), run_dir=tmp_path, progress=progress) as engine:
        await collect(engine, make_jobs(5))
        rendered = progress._render(engine.snapshot())
    from rich.console import Console

    console = Console(file=io.StringIO(), width=160)
    console.print(rendered)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "discover" in out and "5/5" in out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_prometheus_endpoint(tmp_path: Path) -> None:
    port = _free_port()
    async with Engine(config(metrics_port=port), runner=FakeRunner(), run_dir=tmp_path) as engine:
        await collect(engine, make_jobs(4))
        body = await anyio.to_thread.run_sync(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        )
    assert 'rsr_jobs_finished_total{stage="discover",status="succeeded"} 4.0' in body
    assert "rsr_loop_lag_p99_seconds" in body
    with pytest.raises(OSError):  # stopped with the engine
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1)  # noqa: ASYNC210


async def test_checkpointed_trajectory_is_stored_on_cancel(tmp_path: Path) -> None:
    with anyio.CancelScope() as outer:

        async def runner(job: Job, ctx: JobContext) -> EpisodeResult:
            trajectory = Trajectory(task=job.key.task, harness="fake")
            ctx.checkpoint(trajectory)
            for turn in range(1000):
                trajectory.messages.append(Message(role="assistant", content=f"t{turn}", origin="model", turn=turn))
                ctx.step()
                if turn == 6:
                    outer.cancel()  # the caller gives up mid-episode
                await anyio.sleep(0.001)
            raise AssertionError("not reached")

        async with Engine(config(), runner=runner, run_dir=tmp_path) as engine:
            await collect(engine, make_jobs(1))
    store = Store.open_readonly(tmp_path)
    [result] = list(store.results())
    store.close()
    assert result.status == "cancelled" and result.trajectory is not None
    assert len(result.trajectory.messages) == 7 and result.turns == 7


async def test_limits(tmp_path: Path) -> None:
    limiter = RateLimiter(50.0)
    start = anyio.current_time()
    for _ in range(11):
        await limiter.acquire()
    assert anyio.current_time() - start >= 0.19
    limits = Limits({"server-a": 3})
    peak = current = 0

    async def runner(job: Job, ctx: JobContext) -> EpisodeResult:
        nonlocal peak, current
        async with ctx.limits.capacity("server-a"):
            current += 1
            peak = max(peak, current)
            await anyio.sleep(0.01)
            current -= 1
        return EpisodeResult(key=job.key, status="succeeded", end_reason="completed")

    async with Engine(config(20), runner=runner, run_dir=tmp_path, limits=limits) as engine:
        await collect(engine, make_jobs(30))
    assert peak == 3


async def test_concurrent_runs_share_the_limit_and_refuse_overlapping_keys(tmp_path: Path) -> None:
    runner = FakeRunner(latency_s=(0.01, 0.05))
    async with Engine(config(6), runner=runner, run_dir=tmp_path) as engine:
        plan, execute = make_jobs(30, stage="plan"), make_jobs(30, stage="execute")
        results: dict[str, int] = {}

        async def consume(jobs: list[Job], stage: str) -> None:
            async for _ in engine.run(jobs, stage=stage):
                results[stage] = results.get(stage, 0) + 1

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume, plan, "plan")
            tg.start_soon(consume, execute, "execute")
            await anyio.sleep(0.01)
            with pytest.raises(ValueError, match="already being run"):
                await engine.run(plan[:2], stage="plan").__anext__()
        stats = engine.statistics()
    assert results == {"plan": 30, "execute": 30}
    assert runner.max_running == 6
    assert set(stats.stages) == {"plan", "execute"} and stats.succeeded == 60


def test_cli_flags_become_config_values() -> None:
    import argparse

    from rsr_async.config import load_config
    from rsr_async.engine import add_engine_arguments, engine_config_values

    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    args = parser.parse_args(["--concurrency", "512", "--metrics-port", "9100", "--progress", "plain", "--force"])
    cfg = load_config(values=engine_config_values(args))
    assert (cfg.run.concurrency, cfg.engine.metrics_port, cfg.engine.progress) == (512, 9100, "plain")
    assert args.force and engine_config_values(parser.parse_args([])) == {}


async def test_permanent_errors_are_counted_apart_from_the_models_failures(tmp_path: Path) -> None:
    from rsr_async.engine.progress import plain_line
    from rsr_async.errors import ImageBuildError

    async def runner(job: Job, ctx: JobContext) -> EpisodeResult:
        if job.key.task.endswith("0"):
            raise ImageBuildError("the Dockerfile fails").as_permanent()
        ok = job.key.task.endswith("1")
        return EpisodeResult(key=job.key, status="succeeded" if ok else "failed", end_reason="completed",
                             reward=1.0 if ok else 0.0)

    async with Engine(config(4), runner=runner, run_dir=tmp_path) as engine:
        results = {r.key.task: r for r in await collect(engine, make_jobs(3))}
        stats = engine.statistics()
        [view] = engine.snapshot().stages
        line = plain_line(view, engine.snapshot())
    assert results["task-00000"].status == "failed"  # stored as failed, but no verdict
    assert (stats.failed, stats.permanent, stats.stages["discover"].permanent) == (2, 1, 1)
    assert view.success_rate == 0.5  # one success over the two graded episodes
    assert "1 permanent errors (task/config)" in line and "ok 50%" in line
