"""One episode of a multi-step Harbor 0.26 task: its steps in order, in one sandbox.

:class:`~rsr_async.rsr.episode.EpisodeRunner` hands a task with ``[[steps]]`` to
:func:`run_steps`. As Harbor 0.26's ``MultiStepTrial`` runs one (the rules, and the
recording they are checked against, are in :mod:`rsr_async.tasks.steps`):

- one sandbox and one terminal for every step: what the agent left running or on disk
  in a step is there in the next;
- per step: its setup (``workdir/``, ``setup.sh``, healthcheck), then the harness on the step's own
  instruction under the step's agent timeout, as Harbor runs Terminus 2 once per step:
  a **fresh chat** whose first prompt is the step's instruction and what is new on the
  terminal since the previous step's last observation; then the step's hidden tests
  (the task's ``tests/`` with the step's over them, :func:`~rsr_async.tasks.steps.step_tests`;
  the same ``tasks.grade`` path as any episode, out of the agent's reach);
- a step that was not graded, or below its ``min_reward``, ends the episode; the
  episode's rewards are the steps' by ``multi_step_reward_strategy``
  (:func:`~rsr_async.tasks.steps.episode_rewards`), each step's kept in
  :attr:`EpisodeResult.steps <rsr_async.schema.EpisodeResult.steps>`.

The trajectory holds every step's messages in order; :attr:`StepResult.first_message
<rsr_async.schema.StepResult.first_message>` says where each step's fresh chat begins.
Infrastructure failures propagate as in a single-step episode, and so does a verifier
that leaves no reward (the task's permanent error: Harbor would instead end the trial and
average the steps before it).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import msgspec

from ..analysis.style import episode_style
from ..engine import JobContext
from ..errors import SandboxError
from ..harness import EpisodeOutcome, Harness
from ..harness.base import AgentClock
from ..llm.base import ChatModel
from ..phases import phase
from ..sandbox.base import Sandbox, SandboxProvider, ShellSession
from ..schema import (
    EndReason,
    EpisodeResult,
    EpisodeSpec,
    ImageFiles,
    Message,
    StepResult,
    Trajectory,
)
from ..tasks.steps import (
    StepSetupError,
    episode_rewards,
    prepare_step,
    step_task,
    step_tests,
    stop_reason,
)
from ..tasks.verifier import Verification, VerificationError, grade, main_reward

__all__ = ["StepDeps", "run_steps"]

SHELL_CLOSE_TIMEOUT_S = 10.0


@dataclass(frozen=True, kw_only=True)
class StepDeps:
    """What the episode runner hands the step loop (its own parts, not reached for)."""

    pool: SandboxProvider
    model: ChatModel
    harness: Harness
    verifiers: anyio.CapacityLimiter
    scripted: bool
    stop_agent: bool
    model_call_budget_s: float
    backstop_s: float
    stopped_by_agent: Callable[[Sandbox], Awaitable[str | None]]
    """Why the sandbox's container is gone when the agent stopped it, else None."""
    image_files: Callable[[EpisodeSpec, str | None], Awaitable[ImageFiles | None]]


async def run_steps(spec: EpisodeSpec, ctx: JobContext, deps: StepDeps) -> EpisodeResult:
    """Run every step of ``spec.task`` (a multi-step task) in one sandbox; see the module doc."""
    task = spec.task
    started = time.time()
    done: list[Message] = []  # the finished steps' messages
    current = Trajectory(task=task.name, harness=spec.harness, model=deps.model.model_name)
    reported = 0

    def whole() -> Trajectory:
        return Trajectory(task=task.name, harness=spec.harness, model=deps.model.model_name,
                          messages=[*done, *current.messages])

    def checkpoint(trajectory: Trajectory) -> None:
        nonlocal current, reported
        current = trajectory
        for message in trajectory.messages[reported:]:
            if message.origin == "model":
                ctx.step(message.usage)
        reported = len(trajectory.messages)
        ctx.checkpoint(whole())

    def latest() -> Trajectory:  # the step's trajectory as last checkpointed
        return current

    results: list[StepResult] = []
    stopped: str | None = None
    killed: str | None = None
    url: str | None = None
    async with deps.pool.sandbox(task, key=str(spec.key)) as sandbox:
        url = getattr(sandbox, "url", None)
        shell: ShellSession | None = None
        try:
            for index, step in enumerate(task.steps):
                first_message = len(done)
                try:
                    await prepare_step(sandbox, task, step)
                except StepSetupError as exc:  # Harbor: the step is not graded, none after it runs
                    results.append(StepResult(name=step.name, first_message=first_message, end_reason="error",
                                              error=str(exc)))
                    stopped = stop_reason(step, results[-1])
                    break
                continued = shell is not None and shell.alive
                if not continued:  # the first step, or the agent exited the last one's shell
                    if shell is not None:
                        await _close(shell)
                    with phase("shell"):
                        shell = await sandbox.shell()
                assert shell is not None
                current = Trajectory(task=task.name, harness=spec.harness, model=deps.model.model_name)
                reported = 0
                # The step's task carries its whole /tests (the task's with the step's over
                # them), so RSRT's hidden checks and the step's grading see the same tests.
                async with step_tests(task, step) as tests_dir:
                    step_spec = msgspec.structs.replace(spec, task=step_task(task, step, tests_dir=tests_dir))
                    outcome, killed = await _agent(deps, step_spec, sandbox, shell, checkpoint, latest,
                                                   continued=continued)
                    current = outcome.trajectory
                    verification = outcome.verification  # RSRT: its last hidden run on the step's tests
                    if verification is None and killed is None:
                        last = index == len(task.steps) - 1  # killing the agent's processes kills its shell
                        verification, killed = await _grade(deps, sandbox, step_spec, step.name,
                                                            stop_agent=deps.stop_agent and last)
                if killed is not None:
                    outcome = msgspec.structs.replace(outcome, end_reason="error", error=killed)
                done.extend(outcome.trajectory.messages)
                current = Trajectory(task=task.name, harness=spec.harness, model=deps.model.model_name)
                reported = 0
                results.append(_step_result(step.name, first_message, outcome, verification))
                if killed is not None:
                    stopped = killed
                    break
                if (stopped := stop_reason(step, results[-1])) is not None:
                    break
        finally:
            if shell is not None:
                await _close(shell)
    finished = time.time()
    rewards = episode_rewards(task, results)
    reward = main_reward(rewards) if rewards else None
    passed = reward is not None and reward >= 1.0 - 1e-9
    image_files = None
    if passed:
        with phase("image_files"):
            image_files = await deps.image_files(spec, url)
    trajectory = Trajectory(task=task.name, harness=spec.harness, model=deps.model.model_name, messages=done)
    turns = sum(r.turns for r in results)
    last_step = results[-1] if results else None
    return EpisodeResult(
        key=spec.key,
        status="succeeded" if passed else "failed",
        end_reason=last_step.end_reason if last_step else "error",
        reward=reward,
        rewards=rewards or {},
        verifier_output="\n".join(f"== step {r.name} ==\n{r.verifier_output}" for r in results),
        trajectory=trajectory,
        usage=trajectory.usage(),
        error=stopped or (last_step.error if last_step else None),
        started_at=started,
        finished_at=finished,
        turns=turns,
        style=episode_style(trajectory, turns=turns),
        model=deps.model.model_name,
        scripted=deps.scripted,
        image_files=image_files,
        steps=tuple(results),
    )


async def _close(shell: ShellSession) -> None:
    with anyio.CancelScope(shield=True), anyio.move_on_after(SHELL_CLOSE_TIMEOUT_S), phase("teardown"):
        await shell.close()


async def _agent(
    deps: StepDeps,
    spec: EpisodeSpec,
    sandbox: Sandbox,
    shell: ShellSession,
    checkpoint: Callable[[Trajectory], None],
    last: Callable[[], Trajectory],
    *,
    continued: bool,
) -> tuple[EpisodeOutcome, str | None]:
    """The harness's turn at one step: (its outcome, why the container is gone if the agent
    stopped it). The step's clock and the backstop over it are the single-step episode's."""
    clock = AgentClock(deps.model_call_budget_s)
    outcome: EpisodeOutcome | None = None
    killed: str | None = None
    try:
        with clock.deadline(deps.harness.deadline_for(spec) + deps.backstop_s):
            outcome = await deps.harness.run(spec, sandbox, deps.model, checkpoint=checkpoint, clock=clock,
                                             shell=shell, continued=continued)
    except SandboxError:
        if (killed := await deps.stopped_by_agent(sandbox)) is None:
            raise
    if outcome is None:  # killed, or the backstop: what the checkpoint last saw
        reason: EndReason = "error" if killed else "timeout"
        trajectory = last()
        turns = sum(1 for m in trajectory.messages if m.origin == "model")
        outcome = EpisodeOutcome(trajectory=trajectory, end_reason=reason, turns=turns,
                                 usage=trajectory.usage(), error=killed)
    elif outcome.end_reason == "error" and (killed := await deps.stopped_by_agent(sandbox)) is not None:
        outcome = msgspec.structs.replace(outcome, error=killed)
    return outcome, killed


async def _grade(
    deps: StepDeps, sandbox: Sandbox, spec: EpisodeSpec, name: str, *, stop_agent: bool
) -> tuple[Verification | None, str | None]:
    """The step's hidden tests (``spec.task`` is the step's), as a single-step episode's."""
    try:
        with phase("verify_wait"):
            await deps.verifiers.acquire()
        try:
            with phase("verify"):
                return await grade(sandbox, spec.task, pool=deps.pool, key=f"{spec.key}/{name}",
                                   stop_agent=stop_agent), None
        except VerificationError as exc:  # the same error, naming the step
            detail = str(exc).removeprefix(f"task {spec.task.name!r}: ")
            named = VerificationError(f"step {name!r}: {detail}", task=spec.task.name, output=exc.output,
                                      exit_code=exc.exit_code, logs=exc.logs)
            named.permanent, named.retryable = exc.permanent, exc.retryable
            raise named from exc
        finally:
            deps.verifiers.release()
    except SandboxError:
        if (killed := await deps.stopped_by_agent(sandbox)) is None:
            raise
        return None, killed


def _step_result(
    name: str, first_message: int, outcome: EpisodeOutcome, verification: Verification | None
) -> StepResult:
    tampered = verification.tampered if verification else None
    return StepResult(
        name=name,
        first_message=first_message,
        reward=verification.reward if verification else None,
        rewards=dict(verification.rewards) if verification else {},
        end_reason=outcome.end_reason,
        turns=outcome.turns,
        error=outcome.error or (f"graded 0: {tampered}" if tampered else None),
        verifier_output=verification.output if verification else "",
    )
