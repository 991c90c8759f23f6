"""The rules of a multi-step task (tasks/steps.py) that need no sandbox: Harbor 0.26's
``_select_multi_step_reward`` and ``_should_stop_after_step``, case by case. The whole
loop against Harbor's recorded trials is tests/rsr/test_steps_harbor.py."""

from __future__ import annotations

import msgspec

from rsr_async.schema import StepResult, Task, TaskStep
from rsr_async.tasks.steps import episode_rewards, step_task, stop_reason

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
