"""The rules of a multi-step task (tasks/steps.py) that need no sandbox: Harbor 0.26's
``_select_multi_step_reward`` and ``_should_stop_after_step``, case by case. The whole
loop against Harbor's recorded trials is tests/rsr/test_steps_harbor.py."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from rsr_async.config import SandboxConfig
from rsr_async.sandbox import SandboxPool
from rsr_async.schema import StepResult, Task, TaskStep
from rsr_async.tasks.steps import episode_rewards, grade_step, step_task, stop_reason

TASK = Task(name="t", path="/t", instruction="first", tests_dir="/t/tests",
            steps=(TaskStep(name="a", instruction="first"), TaskStep(name="b", instruction="second")))


def graded(name: str, **rewards: float) -> StepResult:
    return StepResult(name=name, reward=rewards.get("reward", 0.0), rewards=rewards)


def test_mean_is_per_key_over_the_graded_steps_a_missing_key_counting_zero() -> None:
    results = [graded("a", reward=1.0), graded("b", reward=0.0, style=1.0),
               StepResult(name="c", error="setup.sh exited with code 3")]
    assert episode_rewards(TASK, results) == {"reward": 0.5, "style": 0.5}
    assert episode_rewards(TASK, [StepResult(name="a", error="x")]) is None
    assert episode_rewards(TASK, []) is None


def test_final_is_the_last_run_steps_rewards_even_when_it_was_not_graded() -> None:
    final = msgspec.structs.replace(TASK, multi_step_reward="final")
    assert episode_rewards(final, [graded("a", reward=0.0), graded("b", reward=1.0)]) == {"reward": 1.0}
    assert episode_rewards(final, [graded("a", reward=1.0), StepResult(name="b", error="x")]) is None


def test_min_reward_gates_each_key_and_a_missing_key_fails() -> None:
    gate = TaskStep(name="a", instruction="x", min_reward={"reward": 0.5, "style": 1.0})
    assert stop_reason(gate, graded("a", reward=0.5, style=1.0)) is None
    assert "style=0 is below its min_reward 1" in (stop_reason(gate, graded("a", reward=1.0, style=0.0)) or "")
    assert "style=-inf" in (stop_reason(gate, graded("a", reward=1.0)) or "")
    free = TaskStep(name="a", instruction="x")
    assert stop_reason(free, graded("a", reward=0.0)) is None  # no gate: the next step runs
    assert "was not graded" in (stop_reason(free, StepResult(name="a", error="no reward")) or "")


def test_a_step_task_takes_the_steps_settings_and_has_no_steps_of_its_own() -> None:
    step = TaskStep(name="b", instruction="second", agent_timeout_s=5.0, verifier_timeout_s=7.0,
                    verifier_env={"K": "v"}, tests_dir="/t/steps/b/tests", solution_path="/t/steps/b/solution/solve.sh")
    task = step_task(TASK, step)
    assert (task.instruction, task.agent_timeout_s, task.verifier_timeout_s) == ("second", 5.0, 7.0)
    assert task.verifier_env == {"K": "v"} and task.steps == ()
    assert task.tests_dir == "/t/steps/b/tests" and task.solution_path == "/t/steps/b/solution/solve.sh"
    assert step_task(TASK, TaskStep(name="a", instruction="first")).tests_dir == "/t/tests"


@pytest.mark.docker
async def test_a_separate_step_is_graded_in_a_fresh_sandbox_with_its_artifacts(pool: SandboxPool, tmp_path: Path) -> None:
    """``[steps.verifier] environment_mode = "separate"`` with step ``artifacts``: the step's
    tests (the task's test.sh, the step's file over the task's) see only the artifact."""
    root = tmp_path / "task"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test.sh").write_text(
        "#!/bin/bash\nwant=$(cat /tests/want)\n"
        "echo \"private=[$(cat /app/private.txt 2>&1 | head -c 40)]\"\n"
        "[ \"$(cat /app/out.txt 2>/dev/null)\" = \"$want\" ] && echo 1 > /logs/verifier/reward.txt "
        "|| echo 0 > /logs/verifier/reward.txt\n")
    (root / "tests" / "want").write_text("task-level\n")
    (root / "steps" / "a" / "tests").mkdir(parents=True)
    (root / "steps" / "a" / "tests" / "want").write_text("42\n")
    step = TaskStep(name="a", instruction="x", tests_dir=str(root / "steps" / "a" / "tests"),
                    verifier_timeout_s=30, verifier_mode="separate", artifacts=("/app/out.txt",))
    task = Task(name="separate-step", path=str(root), instruction="x", tests_dir=str(root / "tests"),
                docker_image=SandboxConfig().base_image, steps=(step,))
    async with pool.sandbox(task, key="separate-step") as sandbox:
        await sandbox.run("mkdir -p /app && echo 42 > /app/out.txt && echo secret > /app/private.txt",
                          time_limit=20)
        verdict = await grade_step(sandbox, task, step, pool=pool, key="separate-step")
    assert verdict.passed, verdict.output
    assert "private=[cat: /app/private.txt: No such file" in verdict.output  # a fresh sandbox
