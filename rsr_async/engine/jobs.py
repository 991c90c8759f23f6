"""What the engine runs: :class:`Job` (a key and a spec), the :class:`JobContext` a runner
gets for one attempt, and the :data:`JobRunner` signature.

The engine is generic over what a job does. A job's spec is one member of the tagged
union :data:`~rsr_async.schema.JobSpec` (an episode, a planner call, a critique, an
audit); the spec's class says which capacity it holds (``resource``: sandbox jobs and
model-only jobs are limited separately) and which result it produces (``result_type``).
A runner turns a job into that :class:`~rsr_async.schema.JobResult`:

- it returns a result with status ``succeeded`` or ``failed`` when the *model* succeeded
  or failed (a failed task is data, never retried);
- it raises an :class:`~rsr_async.errors.InfraError` when the infrastructure failed
  (retried within ``engine.infra_retries`` when ``retryable``);
- any other exception is a bug in a runner or harness: stored as ``infra_error`` with its
  traceback, not retried, never blamed on the model.

A runner is cancelled when the job's deadline passes, on shutdown and when the caller's
scope is cancelled. It must release what it holds (its sandbox) in ``finally`` /
``async with`` blocks, shielded and with their own deadline
(``with anyio.CancelScope(shield=True), anyio.move_on_after(30): await sandbox.close()``),
and let the cancellation propagate. Whatever it last passed to
:meth:`JobContext.checkpoint` is stored with the job (``cancelled``, or ``failed`` with
end reason ``timeout``).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeAlias

import anyio
import msgspec

from ..schema import EpisodeSpec, JobKey, JobResult, JobSpec, Trajectory, Usage

if TYPE_CHECKING:
    from .limits import Limits

__all__ = ["Job", "JobContext", "JobRunner"]


class Job(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A unit of work with a deterministic key; ``str(key)`` is its primary key in the store."""

    key: JobKey
    spec: JobSpec

    @classmethod
    def episode(cls, spec: EpisodeSpec) -> Job:
        """A job for one agent episode, keyed by the spec's own key."""
        return cls(key=spec.key, spec=spec)

    @classmethod
    def of(cls, spec: JobSpec) -> Job:
        """A job for any spec, keyed by the spec's own key."""
        return cls(key=spec.key, spec=spec)


JobRunner: TypeAlias = Callable[[Job, "JobContext"], Awaitable[JobResult]]
"""Runs one attempt of a job. See the module docstring for how outcomes are reported."""


class _Meter:
    """Counters a context feeds; one per stage, owned by the engine."""

    __slots__ = ("completion_tokens", "cached_tokens", "prompt_tokens", "requests", "steps")

    def __init__(self) -> None:
        self.steps = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cached_tokens = 0
        self.requests = 0


class JobContext:
    """Handed to the runner for one attempt of one job.

    The runner reports progress through it (:meth:`step`, :meth:`add_usage`) and records
    its partial trajectory (:meth:`checkpoint`) so that a job that is cancelled or runs
    out of time is stored with what it did so far.
    """

    __slots__ = ("_meter", "attempt", "deadline", "job", "key", "limits", "stage", "trajectory")

    def __init__(
        self,
        job: Job,
        *,
        stage: str,
        attempt: int,
        deadline: float,
        limits: Limits,
        meter: _Meter,
    ) -> None:
        self.job = job
        self.key: JobKey = job.key
        self.stage = stage
        self.attempt = attempt
        """Infrastructure retry index: 0 for the first attempt of this run."""
        self.deadline = deadline
        """Absolute deadline on ``anyio.current_time()``'s clock (``inf``: none)."""
        self.limits = limits
        """Shared per-resource limiters (see :class:`~rsr_async.engine.limits.Limits`)."""
        self.trajectory: Trajectory | None = None
        """The last checkpointed trajectory."""
        self._meter = meter

    def checkpoint(self, trajectory: Trajectory) -> None:
        """Record the partial trajectory (cheap: keeps a reference, encodes nothing).

        Stored with the job if it is cancelled or times out. Pass the live object; the
        engine reads it only when the attempt ends.
        """
        self.trajectory = trajectory

    def step(self, usage: Usage | None = None) -> None:
        """One agent step done (one model turn), with the usage of its model call."""
        self._meter.steps += 1
        if usage is not None:
            self.add_usage(usage)

    def add_usage(self, usage: Usage) -> None:
        """Count model tokens used outside :meth:`step` (e.g. a summarisation call)."""
        meter = self._meter
        meter.prompt_tokens += usage.prompt_tokens
        meter.completion_tokens += usage.completion_tokens
        meter.cached_tokens += usage.cached_tokens
        meter.requests += usage.requests

    def time_left(self) -> float:
        """Seconds until the deadline (``inf`` when there is none)."""
        if math.isinf(self.deadline):
            return math.inf
        return max(0.0, self.deadline - anyio.current_time())
