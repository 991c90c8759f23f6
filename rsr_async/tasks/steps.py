"""Multi-step Harbor 0.26 tasks: what one step is, how it is prepared and graded, and how
the steps' rewards make the episode's.

Harbor's ``MultiStepTrial`` (``harbor/trial/multi_step.py``), recorded running its own
code by ``scripts/record_harbor_steps.py`` (``tests/tasks/harbor_steps/expected.json``):

- the steps run in order in **one** environment: files and processes the agent left in
  step 1 are there in step 2;
- before each step its ``steps/<name>/workdir/`` is copied into the working directory and
  its ``setup.sh`` run there (a failing setup ends the trial: that step is not graded and
  no later step runs);
- the agent gets the step's own instruction, under the step's agent timeout (a timeout is
  graded like any ending);
- the step is graded with the task's ``tests/`` and the step's ``steps/<name>/tests/``
  over them (a ``test.sh`` there replaces the task's), with the step's verifier settings
  (:func:`step_task`);
- the remaining steps are skipped when the step left no reward (its verifier failed) or a
  ``min_reward`` threshold is not met (:func:`stop_reason`);
- the trial's rewards are the per-key mean over the graded steps (a key a step lacks
  counts 0; steps not run or not graded do not count), or with
  ``multi_step_reward_strategy = "final"`` the last run step's (:func:`episode_rewards`).

The episode loop that drives an agent through the steps is :mod:`rsr_async.rsr.steps`;
``tasks validate`` runs the oracle through the same steps (:mod:`.oracle`).
"""

from __future__ import annotations

import functools
import shlex
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import msgspec

from ..sandbox.base import Sandbox
from ..schema import StepResult, Task, TaskStep
from .verifier import SandboxSource, Verification, grade, main_reward

__all__ = [
    "StepSetupError",
    "episode_rewards",
    "grade_step",
    "grade_steps",
    "prepare_step",
    "step_task",
    "step_tests",
    "stop_reason",
]

_SETUP_SLACK_S = 30.0


class StepSetupError(Exception):
    """A step's ``setup.sh`` or healthcheck failed: Harbor records it on the step, does
    not grade it, and runs no more steps."""


def step_task(task: Task, step: TaskStep, *, tests_dir: str | None = None) -> Task:
    """``task`` as its step ``step`` is run and graded: the step's instruction, timeouts,
    verifier settings and solution; ``tests_dir`` the step's tests (see :func:`grade_step`)."""
    return msgspec.structs.replace(
        task,
        instruction=step.instruction,
        agent_timeout_s=step.agent_timeout_s,
        verifier_timeout_s=step.verifier_timeout_s,
        verifier_env=dict(step.verifier_env),
        verifier_user=step.verifier_user,
        verifier_mode=step.verifier_mode,
        verifier_collect=step.verifier_collect,
        artifacts=step.artifacts,
        solution_path=step.solution_path,
        tests_dir=tests_dir if tests_dir is not None else (step.tests_dir or task.tests_dir),
        steps=(),
    )


def _merge_tests(task_tests: Path, step_tests: Path) -> str:
    """A scratch directory holding the task's tests with the step's copied over them, as
    Harbor uploads both to ``/tests`` in that order. Blocking: call it in a thread."""
    scratch = Path(tempfile.mkdtemp(prefix="rsr-step-tests-"))
    merged = scratch / "tests"
    shutil.copytree(task_tests, merged, symlinks=True)
    shutil.copytree(step_tests, merged, symlinks=True, dirs_exist_ok=True)
    return str(merged)


@asynccontextmanager
async def step_tests(task: Task, step: TaskStep) -> AsyncIterator[str]:
    """The directory to put in ``/tests`` for ``step``: the task's ``tests/`` with the
    step's over them (a scratch copy, removed on exit, when both exist)."""
    shared = Path(task.tests_dir) if task.tests_dir else None
    has_shared = shared is not None and await anyio.Path(shared).is_dir()
    if step.tests_dir is None or not has_shared or shared is None:
        yield step.tests_dir or task.tests_dir
        return
    merged = await anyio.to_thread.run_sync(_merge_tests, shared, Path(step.tests_dir))
    try:
        yield merged
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(
                functools.partial(shutil.rmtree, Path(merged).parent, ignore_errors=True))


async def grade_step(
    sandbox: Sandbox, task: Task, step: TaskStep, *, pool: SandboxSource, key: str, stop_agent: bool = False
) -> Verification:
    """Grade what the agent left in ``sandbox`` after ``step``, through :func:`grade` (the
    step's verifier mode, out of the agent's reach), with the step's tests over the task's."""
    async with step_tests(task, step) as tests_dir:
        return await grade(sandbox, step_task(task, step, tests_dir=tests_dir), pool=pool,
                           key=f"{key}/{step.name}", stop_agent=stop_agent)


async def prepare_step(sandbox: Sandbox, task: Task, step: TaskStep) -> None:
    """Harbor's step setup: ``steps/<name>/workdir/`` copied into the agent's working
    directory, then its ``setup.sh`` run there (as root, with the task's environment),
    then the step's healthcheck.

    Raises :class:`StepSetupError` when ``setup.sh`` or the healthcheck fails (a task or agent fault that
    Harbor records on the step), :class:`~rsr_async.errors.SandboxError` when the sandbox does.
    """
    await _setup(sandbox, task, step)
    if step.healthcheck is not None:
        await _healthcheck(sandbox, task, step)


async def _setup(sandbox: Sandbox, task: Task, step: TaskStep) -> None:
    if step.workdir_dir is None:
        return
    with anyio.fail_after(_SETUP_SLACK_S * 2):
        where = await sandbox.run("pwd", time_limit=_SETUP_SLACK_S, workdir=task.workdir)
    workdir = (where.output.strip().splitlines() or ["/"])[-1].strip() or "/"
    # Its entries one by one: the working directory itself (even "/") is left as it is.
    local = Path(step.workdir_dir)
    entries = await anyio.to_thread.run_sync(lambda: sorted(local.iterdir()))
    for entry in entries:
        await sandbox.upload(entry, f"{workdir.rstrip('/')}/{entry.name}")
    if not any(entry.name == "setup.sh" and entry.is_file() for entry in entries):
        return
    script = f"{workdir.rstrip('/')}/setup.sh"
    limit = step.agent_timeout_s
    with anyio.fail_after(limit + _SETUP_SLACK_S):
        result = await sandbox.run(f"bash {shlex.quote(script)}", time_limit=limit,
                                   env=dict(task.env), workdir=task.workdir)
    if result.timed_out or result.exit_code != 0:
        how = "timed out" if result.timed_out else f"exited with code {result.exit_code}"
        raise StepSetupError(f"step {step.name!r}: setup.sh {how}: {result.output[-500:]}")


async def _healthcheck(sandbox: Sandbox, task: Task, step: TaskStep) -> None:
    """Harbor's ``run_healthcheck`` (Docker HEALTHCHECK semantics): failures in the start
    period do not count; after it, ``retries`` consecutive failures fail the step."""
    check = step.healthcheck
    assert check is not None
    start_period_end = anyio.current_time() + check.start_period_s
    failures = 0
    while True:
        in_start_period = anyio.current_time() < start_period_end
        with anyio.fail_after(check.timeout_s + _SETUP_SLACK_S):
            result = await sandbox.run(check.command, time_limit=check.timeout_s,
                                       env=dict(task.env), workdir=task.workdir)
        if result.exit_code == 0 and not result.timed_out:
            return
        if in_start_period:
            await anyio.sleep(check.start_interval_s)
            continue
        failures += 1
        if failures >= check.retries:
            raise StepSetupError(f"step {step.name!r}: healthcheck failed after {check.retries} "
                                 f"consecutive retries: {check.command}")
        await anyio.sleep(check.interval_s)


def stop_reason(step: TaskStep, result: StepResult) -> str | None:
    """Why no later step runs after ``result`` (Harbor's ``_should_stop_after_step``), or None."""
    if result.reward is None:
        return f"step {step.name!r} was not graded ({result.error or 'no reward'}): the remaining steps are not run"
    if step.min_reward is None:
        return None
    for key, threshold in step.min_reward.items():
        actual = result.rewards.get(key, float("-inf"))
        if actual < threshold:
            return (f"step {step.name!r}: {key}={actual:g} is below its min_reward {threshold:g}: "
                    "the remaining steps are not run")
    return None


def episode_rewards(task: Task, results: Sequence[StepResult]) -> dict[str, float] | None:
    """The episode's rewards from its steps' (``multi_step_reward_strategy``); None when no
    step was graded (``final``: when the last run step was not)."""
    if not results:
        return None
    if task.multi_step_reward == "final":
        last = results[-1]
        return dict(last.rewards) if last.reward is not None else None
    graded = [r.rewards for r in results if r.reward is not None]
    keys = {key for rewards in graded for key in rewards}
    if not keys:
        return None
    return {key: sum(r.get(key, 0.0) for r in graded) / len(graded) for key in sorted(keys)}



async def grade_steps(
    sandbox: Sandbox,
    task: Task,
    *,
    pool: SandboxSource,
    key: str,
    act: Callable[[Task], Awaitable[str]] | None = None,
) -> Verification:
    """Every step of ``task`` in ``sandbox`` with ``act`` in place of an agent (the oracle:
    the step's solution; None: nothing, the untouched environment), each graded, by the
    same rules as an episode; the rewards aggregated. ``act`` returns text for the output.

    For ``tasks validate``; a step's verifier error propagates as in :func:`grade`."""
    results: list[StepResult] = []
    output: list[str] = []
    for step in task.steps:
        try:
            await prepare_step(sandbox, task, step)
        except StepSetupError as exc:
            results.append(StepResult(name=step.name, end_reason="error", error=str(exc)))
            output.append(f"== step {step.name} ==\n{exc}")
            break
        done = await act(step_task(task, step)) if act is not None else ""
        verdict = await grade_step(sandbox, task, step, pool=pool, key=key)
        results.append(StepResult(name=step.name, reward=verdict.reward, rewards=dict(verdict.rewards)))
        output.append(f"== step {step.name} ==\n{done}{verdict.output}")
        if (why := stop_reason(step, results[-1])) is not None:
            output.append(why)
            break
    rewards = episode_rewards(task, results)
    return Verification(reward=main_reward(rewards) if rewards else None, rewards=rewards or {},
                        output="\n".join(output),
                        error=None if rewards else "no step was graded")
