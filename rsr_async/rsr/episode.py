"""One agent episode, end to end: sandbox, harness, verifier, result.

The engine calls :class:`EpisodeRunner` once per attempt of a job. The order is the
reference harness's: the agent acts in a fresh sandbox until it finishes or its time
runs out; only then are the hidden tests uploaded and run (so they are never in a
container while the agent can still act), and the container is removed.

Infrastructure failures (Docker, image builds, model servers, a verifier that produced
no reward) propagate as :class:`~rsr_async.errors.InfraError`, so the engine stores them
as ``infra_error`` and retries them within budget; they never count as the model failing.

What the model did to its own sandbox is the model's outcome, though: a sandbox the
agent stopped itself (it typed ``kill -9 -1``, which takes the container's main process
with it), as its backend tells (:meth:`~rsr_async.sandbox.base.Sandbox.stopped_by_agent`),
is graded ``failed`` with end reason ``error`` and says so, instead of being retried as
infrastructure. A sandbox the infrastructure stopped (``docker kill``, ``docker stop``, a
daemon shutting down, an OOM kill) stays infrastructure (for OOM, the task's memory limit
is the one to raise).
"""

from __future__ import annotations

import logging
import time

import anyio
import msgspec

from ..analysis.style import episode_style
from ..config import HarnessConfig
from ..engine import Job, JobContext
from ..errors import SandboxError
from ..harness import EpisodeOutcome, HarnessDeps, get_harness
from ..harness.base import DEFAULT_MODEL_CALL_BUDGET_S, AgentClock
from ..harness.rsrt import DEFAULT_WALL_CLOCK_S
from ..llm.base import ChatModel
from ..phases import PhaseMeans, phase, recording
from ..sandbox.base import Sandbox, SandboxProvider
from ..schema import EndReason, EpisodeResult, EpisodeSpec, ImageFiles, Task, Trajectory
from ..tasks.verifier import Verification, grade
from .steps import StepDeps, run_steps

__all__ = ["EpisodeRunner", "SnapshotGrader"]

log = logging.getLogger(__name__)


class SnapshotGrader:
    """RSRT's grader: the hidden tests run on a throwaway copy of the agent's sandbox
    (``discard_changes``), never in the sandbox the agent goes on working in."""

    def __init__(self, pool: SandboxProvider, limiter: anyio.CapacityLimiter) -> None:
        self._pool = pool
        self._limiter = limiter

    async def __call__(self, sandbox: Sandbox, task: Task, *, key: str) -> Verification:
        with phase("verify_wait"):
            await self._limiter.acquire()
        try:
            with phase("verify"):
                return await grade(sandbox, task, pool=self._pool, key=key, discard_changes=True)
        finally:
            self._limiter.release()

_BACKSTOP_S = 30.0


async def _stopped_by_agent(sandbox: Sandbox) -> str | None:
    """Why the episode's sandbox is gone, when the agent stopped it; None when it still
    runs, the infrastructure stopped it, or the backend cannot tell in time (then the
    error at hand is infrastructure)."""
    try:
        with anyio.fail_after(_BACKSTOP_S):
            return await sandbox.stopped_by_agent()
    except (SandboxError, TimeoutError):
        return None


class EpisodeRunner:
    """Runs an :class:`EpisodeSpec` job: the engine's ``runner`` for episode stages.

    An episode succeeds when the verifier gives full marks; partial credit is kept
    whole in ``rewards`` for the process-reward analysis. ``scripted`` says whether
    ``model`` is the scripted stand-in; every result records it with the model's name.

    The agent's wall clock (and the backstop over it) does not run while a model call
    takes longer than ``model_call_budget_s``: a stalled server is infrastructure (the
    client's total timeout ends the call with an error the engine retries), never the
    agent running out of time.
    """

    def __init__(
        self,
        *,
        pool: SandboxProvider,
        model: ChatModel,
        harness: HarnessConfig,
        scripted: bool,
        max_concurrent_verifiers: int = 8,
        stop_agent_before_tests: bool = False,
        rsrt_wall_clock_s: float = DEFAULT_WALL_CLOCK_S,
        model_call_budget_s: float = DEFAULT_MODEL_CALL_BUDGET_S,
    ) -> None:
        self._pool = pool
        self._model = model
        self._scripted = scripted
        self._harness_config = harness
        self._verifiers = anyio.CapacityLimiter(max_concurrent_verifiers)
        self._stop_agent = stop_agent_before_tests
        self._model_call_budget_s = model_call_budget_s
        self.phases = PhaseMeans()
        """Running means of the finished episodes' phases (the live display's gauges)."""
        self._deps = HarnessDeps(
            grader=SnapshotGrader(pool, self._verifiers), rsrt_wall_clock_s=rsrt_wall_clock_s
        )

    async def __call__(self, job: Job, ctx: JobContext) -> EpisodeResult:
        spec = job.spec
        if not isinstance(spec, EpisodeSpec):
            raise TypeError(f"{job.key}: EpisodeRunner runs episodes, got {type(spec).__name__}")
        with recording() as timer:
            result = await self._run(spec, ctx)
        timing = timer.timing()
        self.phases.add(timing)
        return msgspec.structs.replace(result, timing=timing)

    async def _run(self, spec: EpisodeSpec, ctx: JobContext) -> EpisodeResult:
        harness = get_harness(spec.harness, self._harness_config, self._deps)
        if spec.task.steps:  # a multi-step task: its steps in one sandbox (rsr/steps.py)
            return await run_steps(spec, ctx, StepDeps(
                pool=self._pool, model=self._model, harness=harness, verifiers=self._verifiers,
                scripted=self._scripted, stop_agent=self._stop_agent, backstop_s=_BACKSTOP_S,
                model_call_budget_s=self._model_call_budget_s, stopped_by_agent=_stopped_by_agent,
                image_files=self._image_files))
        started = time.time()
        agent_time = harness.deadline_for(spec)
        last = Trajectory(task=spec.task.name, harness=spec.harness, model=self._model.model_name)

        reported = 0  # messages already reported to the engine's live meters

        def checkpoint(trajectory: Trajectory) -> None:
            nonlocal last, reported
            for message in trajectory.messages[reported:]:
                if message.origin == "model":  # one step per model call: tokens/s, cache share
                    ctx.step(message.usage)
            reported = len(trajectory.messages)
            last = trajectory
            ctx.checkpoint(trajectory)

        def ended(reason: EndReason, error: str | None) -> EpisodeOutcome:
            turns = sum(1 for m in last.messages if m.origin == "model")
            return EpisodeOutcome(trajectory=last, end_reason=reason, turns=turns, usage=last.usage(), error=error)

        async with self._pool.sandbox(spec.task, key=str(spec.key)) as sandbox:
            url = sandbox.url  # where the image is listed for the audit (None: no host)
            outcome: EpisodeOutcome | None = None
            verification: Verification | None = None
            killed: str | None = None  # why the agent's container is gone, when it killed it
            clock = AgentClock(self._model_call_budget_s)
            try:
                # The harness enforces the agent's clock itself (and says so in its outcome);
                # this scope is only a backstop for a harness that overran its own clock.
                with clock.deadline(agent_time + _BACKSTOP_S):
                    outcome = await harness.run(
                        spec, sandbox, self._model, checkpoint=checkpoint, clock=clock
                    )
            except SandboxError:
                if (killed := await _stopped_by_agent(sandbox)) is None:
                    raise
                outcome = ended("error", killed)
            if outcome is None:  # the agent's wall clock ran out: grade what it left behind
                outcome = ended("timeout", None)
            elif outcome.end_reason == "error" and killed is None:  # e.g. "the shell exited"
                if (killed := await _stopped_by_agent(sandbox)) is not None:
                    outcome = msgspec.structs.replace(outcome, error=killed)
            verification = outcome.verification  # RSRT: its last hidden run is the verdict
            if verification is None and killed is None:
                try:
                    with phase("verify_wait"):
                        await self._verifiers.acquire()
                    try:  # the verifier's timeout counts its own run only
                        with phase("verify"):
                            verification = await grade(sandbox, spec.task, pool=self._pool,
                                                       key=str(spec.key), stop_agent=self._stop_agent)
                    finally:
                        self._verifiers.release()
                except SandboxError:
                    # A container the agent left to die mid-clean-up (a delayed `kill -9 -1`)
                    if (killed := await _stopped_by_agent(sandbox)) is None:
                        raise
                    outcome = msgspec.structs.replace(outcome, end_reason="error", error=killed)
        if verification is None:
            verification = Verification(reward=None, error=killed)
        finished = time.time()  # the episode's time: the listing below is not the agent's
        # Only a success is ever audited; the listing is cached per image id.
        image_files = None
        if verification.passed:
            with phase("image_files"):
                image_files = await self._image_files(spec, url)
        return EpisodeResult(
            key=spec.key,
            status="succeeded" if verification.passed else "failed",
            end_reason=outcome.end_reason,
            reward=verification.reward,
            rewards=dict(verification.rewards),
            verifier_output=verification.output,
            verifier_logs=dict(verification.logs),
            trajectory=outcome.trajectory,
            usage=outcome.usage,
            error=outcome.error or (f"graded 0: {verification.tampered}" if verification.tampered else None),
            started_at=started,
            finished_at=finished,
            turns=outcome.turns,
            style=episode_style(outcome.trajectory, turns=outcome.turns),
            model=self._model.model_name,
            scripted=self._scripted,
            image_files=image_files,
        )

    async def _image_files(self, spec: EpisodeSpec, url: str | None) -> ImageFiles | None:
        """What the task image holds beyond the base, for the leak audit; None when the
        listing failed (said in the log): that execution's audit then knows only the base
        image's paths, which is stricter, not laxer, and no reason to rerun the episode."""
        try:
            return await self._pool.image_files(spec.task, url=url)
        except SandboxError as exc:
            log.warning("%s: the task image's files could not be listed (%s); its audit "
                        "knows only the base image's paths", spec.key, exc)
            return None
