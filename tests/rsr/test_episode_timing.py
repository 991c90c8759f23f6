"""Every episode's phases, timed through the real runner, engine, store and Docker: where
its wall time went (sandbox, shell, model, commands, verification, teardown), stored with
the result and summarised."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from rsr_async.config import Config, EngineConfig, RunConfig, SandboxConfig
from rsr_async.engine import Engine, Job
from rsr_async.harness.fakes import ReplayModel
from rsr_async.phases import LIVE_PHASES
from rsr_async.rsr.episode import EpisodeRunner
from rsr_async.rsr.summary import summarise
from rsr_async.sandbox import SandboxPool
from rsr_async.schema import EpisodeResult, EpisodeSpec, JobKey, Task

pytestmark = pytest.mark.docker

TOP_LEVEL = ("sandbox", "shell", "model", "commands", "verify_wait", "verify", "teardown", "image_files")


def act(keys: str = "", done: bool = False) -> str:
    commands = [{"keystrokes": keys, "duration": 5}] if keys else []
    return json.dumps({"analysis": "a", "plan": "p", "commands": commands, "task_complete": done})


def passing_task(tmp_path: Path) -> Task:
    tests = tmp_path / "tests"
    tests.mkdir(parents=True)
    (tests / "test.sh").write_text("grep -q hi /tmp/out && echo 1 > /logs/verifier/reward.txt\n")
    return Task(name="timing", path=str(tmp_path), instruction="Write hi to /tmp/out.",
                docker_image=SandboxConfig().base_image, tests_dir=str(tests),
                verifier_timeout_s=30, agent_timeout_s=60)


async def test_each_episode_says_where_its_time_went(tmp_path: Path) -> None:
    task = passing_task(tmp_path / "task")
    specs = [EpisodeSpec(key=JobKey(stage="discover", task=task.name, harness="terminus2", attempt=i),
                         task=task, deadline_s=60) for i in range(2)]
    script = [act("echo hi > /tmp/out\n"), act(done=True), act(done=True)]
    model = ReplayModel(script * 2)
    config = Config(run=RunConfig(concurrency=1),
                    engine=EngineConfig(progress="none", infra_retries=0, store_batch_ms=10.0))
    run_dir = tmp_path / "run"
    async with SandboxPool(SandboxConfig(api_timeout_s=60.0), run_id=f"test-timing-{uuid.uuid4().hex[:8]}",
                           run_dir=run_dir) as pool:
        assert await pool.prewarm(task, 1) == 1  # the first episode claims it, the second starts one
        runner = EpisodeRunner(pool=pool, model=model, harness=config.harness, scripted=False)
        async with Engine(config, runner=runner, run_dir=run_dir) as engine:
            _ = [r async for r in engine.run([Job.episode(s) for s in specs], stage="discover")]
            stored = sorted(engine.store.results(stage="discover"), key=lambda r: r.key.attempt)
            summary = summarise(engine.store, stage="discover", model="replay", scripted_model=False,
                                tasks=[task.name], attempts=2, wall_s=1.0, episodes_this_run=2,
                                peak_sandboxes=1)
        assert await pool.containers() == []
    assert [r.status for r in stored] == ["succeeded", "succeeded"]
    warm, cold = (r.timing for r in stored if isinstance(r, EpisodeResult))
    for timing in (warm, cold):
        assert timing.wall_s > 0
        for name in ("sandbox", "shell", "commands", "verify", "teardown"):
            assert getattr(timing, f"{name}_s") > 0, name
        assert (timing.model_calls, timing.commands) == (3, 1)
        # The command's prompt came back at once: its 5 s wait ended early.
        assert timing.commands_s < 5
        # The verification's parts: clearing and uploading, the tests, reading the reward.
        parts = (timing.verify_prepare_s, timing.verify_tests_s, timing.verify_reward_s)
        assert all(p > 0 for p in parts) and sum(parts) <= timing.verify_s
        accounted = sum(getattr(timing, f"{name}_s") for name in TOP_LEVEL)
        assert accounted <= timing.wall_s + 1e-3
        assert abs(accounted + timing.other_s - timing.wall_s) < 2e-3
    # The prewarmed container was claimed, not created; the second was created and started.
    assert warm.prewarmed and warm.claim_s > 0 and warm.create_s == 0 and warm.start_s == 0
    assert not cold.prewarmed and cold.create_s > 0 and cold.start_s > 0 and cold.claim_s == 0
    assert cold.create_s + cold.start_s <= cold.sandbox_s
    # summary.json's phases, and the live display's running means.
    phases = summary.phases
    assert phases is not None and (phases.episodes, phases.prewarmed) == (2, 1)
    assert phases.mean_s["verify"] == pytest.approx((warm.verify_s + cold.verify_s) / 2, abs=1e-3)
    assert phases.p90_s["wall"] == max(warm.wall_s, cold.wall_s)
    assert runner.phases.episodes == 2
    assert runner.phases.mean("shell") == pytest.approx((warm.shell_s + cold.shell_s) / 2)
    assert all(runner.phases.mean(name) >= 0 for name in LIVE_PHASES)
