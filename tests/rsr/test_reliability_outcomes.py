"""Outcomes are blamed on the right party, and the summary says so (issue 15)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from rsr_async.config import Config, EngineConfig, RunConfig, SandboxConfig
from rsr_async.engine import Engine, Job, JobContext
from rsr_async.engine.signals import (
    EXIT_JOB_ERRORS,
    EXIT_OK,
    EXIT_PERMANENT_ONLY,
    exit_code,
    permanent_only_code,
)
from rsr_async.errors import ContainerError, ImageError
from rsr_async.harness.fakes import ReplayModel
from rsr_async.llm.base import ChatMessage, ChatModel, Completion
from rsr_async.rsr.episode import EpisodeRunner
from rsr_async.rsr.summary import RunSummary, render_summary, summarise, write_summary
from rsr_async.sandbox import SandboxPool
from rsr_async.schema import EpisodeResult, EpisodeSpec, JobKey, Task


async def _broken_docker(job: Job, ctx: JobContext) -> EpisodeResult:
    raise ContainerError("sandbox create failed: the daemon said no (disk full)")


async def test_summary_says_why_nothing_finished(tmp_path: Path) -> None:
    tasks = [Task(name=f"t{i}", path=str(tmp_path), instruction="-") for i in range(3)]
    jobs = [Job.episode(EpisodeSpec(key=JobKey(stage="discover", task=t.name, harness="terminus2"), task=t))
            for t in tasks]
    config = Config(run=RunConfig(concurrency=2),
                    engine=EngineConfig(progress="none", infra_retries=0, store_batch_ms=10.0))
    async with Engine(config, runner=_broken_docker, run_dir=tmp_path / "run") as engine:
        results = [r async for r in engine.run(jobs, stage="discover")]
        summary = summarise(engine.store, stage="discover", model="m", scripted_model=False,
                            tasks=[t.name for t in tasks], attempts=1, wall_s=1.0,
                            episodes_this_run=3, peak_sandboxes=0)
    assert [r.status for r in results] == ["infra_error"] * 3
    assert summary.nothing_finished is not None
    assert summary.nothing_finished.startswith("no episode finished: 3 infra errors (first: ")
    assert "disk full" in summary.nothing_finished
    table = render_summary(summary)
    cells = [str(c) for column in table.columns for c in column._cells]  # type: ignore[attr-defined]
    assert summary.nothing_finished in cells
    assert not any("over 0 tasks" in c for c in cells)
    written = json.loads(write_summary(summary, tmp_path).read_text())
    assert written["nothing_finished"] == summary.nothing_finished


# -- what the model did to its own sandbox is the model's outcome ------------------------


PIDS = 256
"""The fork bomb's bound: the sandbox's pids limit (lower than the default, to be gentle)."""


def act(keys: str = "", done: bool = False, duration: float = 0.5) -> str:
    commands = [{"keystrokes": keys, "duration": duration}] if keys else []
    return json.dumps({"analysis": "a", "plan": "p", "commands": commands, "task_complete": done})


def file_task(tmp_path: Path) -> Task:
    """Passes when /tmp/out.txt says hello: what the agent left on disk is graded."""
    tests = tmp_path / "tests"
    tests.mkdir(parents=True)
    (tests / "test.sh").write_text(
        "mkdir -p /logs/verifier\n"
        "if grep -qx hello /tmp/out.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
    )
    return Task(name="leave-hello", path=str(tmp_path), instruction="Write hello to /tmp/out.txt.",
                docker_image=SandboxConfig().base_image, tests_dir=str(tests),
                verifier_timeout_s=60, agent_timeout_s=120)


async def run_one(tmp_path: Path, replies: list[str], *, pids_limit: int = 1024,
                  model: ChatModel | None = None) -> tuple[EpisodeResult, int]:
    """One episode through the real runner, engine (with retries) and store: its result
    and how many times it was tried."""
    task = file_task(tmp_path / "task")
    spec = EpisodeSpec(key=JobKey(stage="discover", task=task.name, harness="terminus2"), task=task,
                       deadline_s=120)
    if model is None:
        model = ReplayModel(replies * 3, model_name="saboteur")  # enough for every retry
    config = Config(run=RunConfig(concurrency=1),
                    engine=EngineConfig(progress="none", infra_retries=2, retry_backoff_s=0.01,
                                        store_batch_ms=10.0))
    sandbox_config = SandboxConfig(api_timeout_s=60.0, pids_limit=pids_limit)
    async with SandboxPool(sandbox_config, run_id=f"test-outcome-{uuid.uuid4().hex[:8]}",
                           run_dir=tmp_path / "run") as pool:
        runner = EpisodeRunner(pool=pool, model=model, harness=config.harness, scripted=True)
        async with Engine(config, runner=runner, run_dir=tmp_path / "run") as engine:
            [_result] = [r async for r in engine.run([Job.episode(spec)], stage="discover")]
            [stored] = list(engine.store.results(stage="discover"))
            [row] = engine.store.rows(stage="discover")
        assert await pool.containers() == []
    return stored, row.tries


@pytest.mark.docker
async def test_kill_minus_one_is_graded_as_the_models_failure(tmp_path: Path) -> None:
    result, tries = await run_one(tmp_path, [
        act("echo hello > /tmp/out.txt\n"), act("kill -9 -1\n", duration=1.0), act(done=True), act(done=True)
    ])
    assert tries == 1, (result.status, result.end_reason, result.error, result.verifier_output[-300:])
    assert result.status == "failed", result.error
    assert result.end_reason == "error"
    assert result.error is not None and "container" in result.error and "agent" in result.error


@pytest.mark.docker
async def test_a_fork_bomb_is_cleaned_up_and_what_is_left_is_graded(tmp_path: Path) -> None:
    bomb = "b() { b | b & }; b\n"
    result, tries = await run_one(tmp_path, [
        act("echo hello > /tmp/out.txt\n"), act(bomb, duration=3.0), act(done=True), act(done=True)
    ], pids_limit=PIDS)
    assert tries == 1, (result.status, result.end_reason, result.error, result.verifier_output[-300:])
    assert result.status == "succeeded", (result.end_reason, result.error, result.verifier_output[-500:])


class KillsItsContainer(ReplayModel):
    """Replays, and before its second answer has Docker kill the episode's container (as
    an operator, an orchestrator or a daemon shutting down would): synchronised on the
    model call itself, so the kill lands between two agent steps."""

    def __init__(self, replies: list[str], how: str) -> None:
        super().__init__(replies, model_name="bystander")
        self._how = how

    async def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Completion:
        if len(self.calls) == 1:
            with anyio.fail_after(60):
                listing = await anyio.run_process(
                    ["docker", "ps", "-q", "--filter", "label=rsr_async.task=leave-hello"])
                [container_id] = listing.stdout.decode().split()
                command = ["docker", "kill"] if self._how == "kill" else ["docker", "stop", "-t", "1"]
                await anyio.run_process([*command, container_id])
        return await super().chat(messages, **kwargs)


@pytest.mark.docker
@pytest.mark.parametrize("how", ["kill", "stop"])
async def test_a_container_stopped_through_docker_is_infrastructure(tmp_path: Path, how: str) -> None:
    model = KillsItsContainer([act("echo hello > /tmp/out.txt\n"), act("true\n"),
                               act("echo hello > /tmp/out.txt\n"), act(done=True), act(done=True)], how)
    result, tries = await run_one(tmp_path, [], model=model)
    assert tries == 2, (result.status, result.end_reason, result.error)  # retried, not graded
    assert result.status == "succeeded", (result.end_reason, result.error)


async def _graded(job: Job, ctx: JobContext) -> EpisodeResult:
    return EpisodeResult(key=job.spec.key, status="failed", end_reason="completed", reward=0.0)


async def test_a_run_with_graded_episodes_keeps_its_pass_at_figures(tmp_path: Path) -> None:
    task = Task(name="t", path=str(tmp_path), instruction="-")
    job = Job.episode(EpisodeSpec(key=JobKey(stage="discover", task="t", harness="terminus2"), task=task))
    config = Config(run=RunConfig(concurrency=1), engine=EngineConfig(progress="none", store_batch_ms=10.0))
    async with Engine(config, runner=_graded, run_dir=tmp_path / "run") as engine:
        [_ for _ in [r async for r in engine.run([job], stage="discover")]]
        summary = summarise(engine.store, stage="discover", model="m", scripted_model=False, tasks=["t"],
                            attempts=1, wall_s=1.0, episodes_this_run=1, peak_sandboxes=0)
    assert summary.nothing_finished is None and summary.pass_at_k_tasks == 1
    cells = [str(c) for column in render_summary(summary).columns for c in column._cells]  # type: ignore[attr-defined]
    assert "0.000 over 1 tasks" in cells


# -- permanent errors: counted once, and a run of nothing else says so in its exit code ---


async def _bad_image_for_t0(job: Job, ctx: JobContext) -> EpisodeResult:
    if job.spec.key.task == "t0":
        raise ImageError("task 't0': image build failed: RUN false").as_permanent()
    return EpisodeResult(key=job.spec.key, status="succeeded", end_reason="completed", reward=1.0)


async def _run_permanent(tmp_path: Path, task_names: list[str]) -> tuple[RunSummary, int]:
    tasks = [Task(name=name, path=str(tmp_path), instruction="-") for name in task_names]
    jobs = [Job.episode(EpisodeSpec(key=JobKey(stage="discover", task=t.name, harness=h), task=t))
            for t in tasks for h in ("terminus2", "rsrt")]
    config = Config(run=RunConfig(concurrency=2),
                    engine=EngineConfig(progress="none", infra_retries=2, store_batch_ms=10.0))
    async with Engine(config, runner=_bad_image_for_t0, run_dir=tmp_path / "run") as engine:
        [_ for _ in [r async for r in engine.run(jobs, stage="discover")]]
        summary = summarise(engine.store, stage="discover", model="m", scripted_model=False,
                            tasks=task_names, attempts=1, wall_s=1.0, episodes_this_run=len(jobs),
                            peak_sandboxes=0)
        return summary, exit_code(engine.statistics())


async def test_permanent_errors_are_not_counted_twice_per_harness(tmp_path: Path) -> None:
    summary, code = await _run_permanent(tmp_path, ["t0", "t1", "t2"])  # 6 episodes, 2 permanent
    assert summary.episodes == 6 and summary.permanent_errors == 2
    assert {h: s.episodes for h, s in summary.harnesses.items()} == {"rsrt": 3, "terminus2": 3}
    assert {h: s.permanent_errors for h, s in summary.harnesses.items()} == {"rsrt": 1, "terminus2": 1}
    assert sum(s.episodes for s in summary.harnesses.values()) == summary.episodes
    assert code == EXIT_OK  # some episodes were graded: the summary names the bad task


async def test_a_run_of_only_permanent_errors_has_its_own_exit_code(tmp_path: Path) -> None:
    summary, code = await _run_permanent(tmp_path, ["t0"])
    assert summary.permanent_errors == 2 and summary.succeeded + summary.failed == 0
    assert {h: s.episodes for h, s in summary.harnesses.items()} == {"rsrt": 1, "terminus2": 1}
    assert code == EXIT_PERMANENT_ONLY != EXIT_JOB_ERRORS
    assert permanent_only_code(graded=summary.succeeded + summary.failed,
                               permanent=summary.permanent_errors) == EXIT_PERMANENT_ONLY
