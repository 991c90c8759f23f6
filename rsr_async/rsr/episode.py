"""One agent episode, end to end: sandbox, harness, verifier, result.

The engine calls :class:`EpisodeRunner` once per attempt of a job. The order is the
reference harness's: the agent acts in a fresh sandbox until it finishes or its time
runs out; only then are the hidden tests uploaded and run (so they are never in a
container while the agent can still act), and the container is removed.

Infrastructure failures (Docker, image builds, model servers, a verifier that produced
no reward) propagate as :class:`~rsr_async.errors.InfraError`, so the engine stores them
as ``infra_error`` and retries them within budget; they never count as the model failing.
"""

from __future__ import annotations

import time

import anyio

from ..config import HarnessConfig
from ..engine import Job, JobContext
from ..harness import EpisodeOutcome, get_harness
from ..llm.base import ChatModel
from ..sandbox import SandboxPool
from ..schema import EpisodeResult, EpisodeSpec, Trajectory
from ..tasks import verify

__all__ = ["EpisodeRunner"]

_BACKSTOP_S = 30.0


class EpisodeRunner:
    """Runs an :class:`EpisodeSpec` job: the engine's ``runner`` for episode stages.

    An episode succeeds when the verifier gives full marks; partial credit is kept
    whole in ``rewards`` for the process-reward analysis. ``scripted`` says whether
    ``model`` is the scripted stand-in; every result records it with the model's name.
    """

    def __init__(
        self,
        *,
        pool: SandboxPool,
        model: ChatModel,
        harness: HarnessConfig,
        scripted: bool,
        max_concurrent_verifiers: int = 8,
    ) -> None:
        self._pool = pool
        self._model = model
        self._scripted = scripted
        self._harness_config = harness
        self._verifiers = anyio.CapacityLimiter(max_concurrent_verifiers)

    async def __call__(self, job: Job, ctx: JobContext) -> EpisodeResult:
        spec = job.spec
        if not isinstance(spec, EpisodeSpec):
            raise TypeError(f"{job.key}: EpisodeRunner runs episodes, got {type(spec).__name__}")
        harness = get_harness(spec.harness, self._harness_config)
        started = time.time()
        agent_time = spec.deadline_s if spec.deadline_s is not None else spec.task.agent_timeout_s
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

        async with self._pool.sandbox(spec.task, key=str(spec.key)) as sandbox:
            outcome: EpisodeOutcome | None = None
            # The harness enforces the agent's clock itself (and says so in its outcome);
            # this scope is only a backstop for a harness that overran its own clock.
            with anyio.move_on_after(agent_time + _BACKSTOP_S):
                outcome = await harness.run(spec, sandbox, self._model, checkpoint=checkpoint)
            if outcome is None:  # the agent's wall clock ran out: grade what it left behind
                outcome = EpisodeOutcome(
                    trajectory=last,
                    end_reason="timeout",
                    turns=sum(1 for m in last.messages if m.origin == "model"),
                    usage=last.usage(),
                    error=None,
                )
            async with self._verifiers:  # the verifier's timeout then counts its own run only
                verification = await verify(sandbox, spec.task)
        return EpisodeResult(
            key=spec.key,
            status="succeeded" if verification.passed else "failed",
            end_reason=outcome.end_reason,
            reward=verification.reward,
            rewards=dict(verification.rewards),
            verifier_output=verification.output,
            trajectory=outcome.trajectory,
            usage=outcome.usage,
            error=outcome.error,
            started_at=started,
            finished_at=time.time(),
            turns=outcome.turns,
            model=self._model.model_name,
            scripted=self._scripted,
        )
