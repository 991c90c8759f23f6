"""Episodes whose outcome can be trusted, through the real runner, engine and store:
an agent's leftover reward writer does not make a failing task pass, and every stored
result says which model produced it and whether that was the scripted stand-in."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import msgspec
import pytest

from rsr_async.config import Config, EngineConfig, RunConfig, SandboxConfig
from rsr_async.engine import Engine, Job
from rsr_async.harness.fakes import ReplayModel
from rsr_async.rsr.episode import EpisodeRunner
from rsr_async.rsr.summary import render_summary, summarise
from rsr_async.sandbox import SandboxPool
from rsr_async.schema import EpisodeResult, EpisodeSpec, JobKey, Task

pytestmark = pytest.mark.docker

ATTACK = "(while true; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done) &\n"


def act(keys: str = "", done: bool = False) -> str:
    commands = [{"keystrokes": keys, "duration": 0.5}] if keys else []
    return json.dumps({"analysis": "a", "plan": "p", "commands": commands, "task_complete": done})


def failing_task(tmp_path: Path) -> Task:
    """The tests fail (reward 0), then give a live writer half a second to overwrite it."""
    tests = tmp_path / "tests"
    tests.mkdir(parents=True)
    (tests / "test.sh").write_text("echo 0 > /logs/verifier/reward.txt\nsleep 0.5\n")
    return Task(name="trust-attack", path=str(tmp_path), instruction="Do nothing useful.",
                docker_image=SandboxConfig().base_image, tests_dir=str(tests),
                verifier_timeout_s=30, agent_timeout_s=60)


@pytest.mark.parametrize("scripted", [True, False])
async def test_the_reward_attack_fails_and_the_result_records_its_model(
    tmp_path: Path, scripted: bool
) -> None:
    task = failing_task(tmp_path / "task")
    key = JobKey(stage="discover", task=task.name, harness="terminus2")
    spec = EpisodeSpec(key=key, task=task, deadline_s=60)
    model = ReplayModel([act("mkdir -p /logs/verifier\n"), act(ATTACK), act(done=True), act(done=True)],
                        model_name="attacker-7b")
    config = Config(run=RunConfig(concurrency=1),
                    engine=EngineConfig(progress="none", infra_retries=0, store_batch_ms=10.0))
    async with SandboxPool(SandboxConfig(api_timeout_s=60.0), run_id=f"test-trust-{uuid.uuid4().hex[:8]}") as pool:
        runner = EpisodeRunner(pool=pool, model=model, harness=config.harness, scripted=scripted)
        async with Engine(config, runner=runner, run_dir=tmp_path / "run") as engine:
            results = [r async for r in engine.run([Job.episode(spec)], stage="discover")]
            stored = list(engine.store.results(stage="discover"))
            summary = summarise(engine.store, stage="discover", model=model.model_name,
                                scripted_model=scripted, tasks=[task.name], attempts=1, wall_s=1.0,
                                episodes_this_run=1, peak_sandboxes=1)
        assert await pool.containers() == []
    assert len(results) == 1 and len(stored) == 1
    result = stored[0]
    assert len(model.calls) == 4  # the attack was typed, then completion confirmed
    assert result.end_reason == "completed", result.error
    assert result.status == "failed" and result.reward == 0.0  # the planted 1 did not count
    assert (result.model, result.scripted) == ("attacker-7b", scripted)
    assert summary.models == {"attacker-7b": 1} and summary.scripted_episodes == int(scripted)
    per_harness = summary.harnesses["terminus2"]
    assert (per_harness.episodes, per_harness.succeeded, per_harness.solved_tasks) == (1, 0, 0)
    assert list(summary.harnesses) == ["terminus2"] and summary.union_solved == []
    table = render_summary(summary)
    assert ("scripted stand-in" in (getattr(table, "caption", None) or "")) is scripted


def test_results_stored_before_provenance_still_decode() -> None:
    old = {"key": {"stage": "discover", "task": "t"}, "status": "succeeded", "end_reason": "completed",
           "reward": 1.0}
    result = msgspec.json.decode(json.dumps(old).encode(), type=EpisodeResult)
    assert (result.model, result.scripted) == ("", False)  # unknown provenance reads as such
    again = msgspec.json.decode(msgspec.json.encode(
        msgspec.structs.replace(result, model="m", scripted=True)), type=EpisodeResult)
    assert (again.model, again.scripted) == ("m", True)
