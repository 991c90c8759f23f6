"""The remote side: a :class:`RemoteRunner` runs the attempts a head assigns, with the
node's own runners, and keeps their outcomes until the head collects them.

It knows nothing of Ray: the actor (:mod:`.actor`) holds one and forwards its calls, and
an in-process head can drive one directly. Each attempt runs exactly as the engine would
run it locally (a :class:`~rsr_async.engine.JobContext`, the job's runner, its
checkpoints), under a backstop deadline a little past the head's, so a head that goes
away without cancelling cannot leave an attempt running for ever::

    head                                  RemoteRunner (on a node)
    submit([Assignment, ...])   ──────▶   one task per attempt, in its task group
    poll(wait_s)                ◀──────   the outcomes finished since the last poll
    cancel([key])               ◀──────   cancels the attempts, returns their partials
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Mapping

import anyio
import anyio.abc

from ..engine import Job, JobContext, JobRunner, Limits
from ..engine.jobs import _Meter
from ..errors import HarnessError, InfraError
from ..schema import JobResult, kind_of
from .wire import (
    Assignment,
    Ended,
    Finished,
    Outcome,
    PollReply,
    Raised,
    decode_assignments,
    encode_outcomes,
    encode_poll,
)

__all__ = ["BACKSTOP_S", "InProcessRemote", "RemoteRunner", "sleeping_runner", "trivial_runner"]

BACKSTOP_S = 30.0
"""How long past the head's deadline an attempt may still run here: the head cancels
it at its deadline; this only catches a head that vanished."""

_CANCEL_WAIT_S = 30.0


class _Attempt:
    __slots__ = ("cancelled", "ctx", "done", "outcome", "scope")

    def __init__(self, ctx: JobContext, scope: anyio.CancelScope) -> None:
        self.ctx = ctx
        self.scope = scope
        self.cancelled = False
        """Cancelled by the head: its outcome goes to the cancel call, not to a poll."""
        self.done = anyio.Event()
        self.outcome: Outcome | None = None


class RemoteRunner:
    """Runs assigned attempts with ``runners`` (one per job kind, ``"*"`` for any) inside
    :meth:`serve`, which must be running for :meth:`submit` to be accepted."""

    def __init__(self, runners: Mapping[str, JobRunner], *, name: str = "remote") -> None:
        self.name = name
        self._runners = dict(runners)
        self._limits = Limits()
        self._tg: anyio.abc.TaskGroup | None = None
        self._running: dict[str, _Attempt] = {}
        self._finished: list[Outcome] = []
        self._ready = anyio.Event()
        self.accepted = 0
        """Attempts accepted so far (all time)."""

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Hold the task group the attempts run in, until cancelled (which cancels them)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                self._tg = None

    # ------------------------------------------------------------------ calls

    def submit(self, data: bytes) -> int:
        """Start every attempt of an encoded batch; returns how many were started.

        An attempt of a key that is already running here (the head retried it after
        losing track) replaces nothing: the running one's outcome answers both."""
        tg = self._tg
        if tg is None:
            raise HarnessError(f"{self.name}: submit before the runner serves (or after it stopped)")
        started = 0
        for assignment in decode_assignments(data):
            key = str(assignment.job.key)
            if key in self._running:
                continue
            tg.start_soon(self._run, assignment, key)
            started += 1
        self.accepted += started
        return started

    async def poll(self, wait_s: float, *, live_sandboxes: int = 0, peak_sandboxes: int = 0) -> bytes:
        """The outcomes finished since the last poll, waiting up to ``wait_s`` for one."""
        if not self._finished:
            with anyio.move_on_after(wait_s):
                await self._ready.wait()
        outcomes, self._finished = self._finished, []
        self._ready = anyio.Event()
        return encode_poll(
            PollReply(
                outcomes=outcomes,
                running=len(self._running),
                live_sandboxes=live_sandboxes,
                peak_sandboxes=peak_sandboxes,
            )
        )

    async def cancel(self, keys: list[str]) -> bytes:
        """Cancel the attempts of ``keys`` still running here; returns their outcomes
        (:class:`~.wire.Ended` with the partial trajectory, or what they finished with
        in the meantime). Keys not running here are left out."""
        attempts = []
        for key in keys:
            attempt = self._running.get(key)
            if attempt is not None:
                attempt.cancelled = True
                attempt.scope.cancel()
                attempts.append(attempt)
        outcomes: list[Outcome] = []
        with anyio.move_on_after(_CANCEL_WAIT_S):
            for attempt in attempts:
                await attempt.done.wait()
                if attempt.outcome is not None:
                    outcomes.append(attempt.outcome)
        return encode_outcomes(outcomes)

    @property
    def running(self) -> int:
        return len(self._running)

    # ------------------------------------------------------------------ one attempt

    async def _run(self, assignment: Assignment, key: str) -> None:
        job = assignment.job
        meter = _Meter()
        time_left = assignment.time_left_s
        deadline = math.inf if math.isinf(time_left) else anyio.current_time() + time_left + BACKSTOP_S
        ctx = JobContext(
            job, stage=job.key.stage, attempt=assignment.attempt, deadline=deadline,
            limits=self._limits, meter=meter,
        )
        scope = anyio.CancelScope(deadline=deadline)
        attempt = _Attempt(ctx, scope)
        self._running[key] = attempt
        outcome: Outcome
        try:
            runner = self._runners.get(kind_of(job.spec)) or self._runners["*"]
            with scope:
                result = await runner(job, ctx)
            if scope.cancelled_caught:
                outcome = Ended(
                    key=key, reason="cancelled" if attempt.cancelled else "timeout",
                    partial=ctx.trajectory, steps=meter.steps,
                )
            else:
                outcome = Finished(key=key, result=result, steps=meter.steps)  # type: ignore[arg-type]
        except InfraError as exc:
            outcome = Raised(
                key=key, error_type=type(exc).__name__, message=str(exc), retryable=exc.retryable,
                permanent=exc.permanent, infra=True, steps=meter.steps,
            )
        except Exception as exc:  # a runner bug: the head stores it with where it happened
            where = "".join(traceback.format_exception(exc)[-6:])
            outcome = Raised(
                key=key, error_type=type(exc).__name__, message=f"{exc}\n{where}", steps=meter.steps,
            )
        finally:
            del self._running[key]
        attempt.outcome = outcome
        attempt.done.set()
        if not attempt.cancelled:
            self._finished.append(outcome)
            self._ready.set()


async def trivial_runner(job: Job, ctx: JobContext) -> JobResult:
    """A runner that succeeds at once: what ``bench scale`` measures the head's dispatch
    capacity with (the cost of handing out and storing a job, nothing else)."""
    ctx.step()
    return job.spec.result_type(key=job.key, status="succeeded")


def sleeping_runner(latency_s: float) -> JobRunner:
    """:func:`trivial_runner` after ``latency_s`` of waiting: a stand-in episode of known
    length, to measure what a remote hop adds per episode."""
    if latency_s <= 0:
        return trivial_runner

    async def run(job: Job, ctx: JobContext) -> JobResult:
        await anyio.sleep(latency_s)
        return await trivial_runner(job, ctx)

    return run


class InProcessRemote:
    """A :class:`~.dispatch.Remote` over a :class:`RemoteRunner` in this process: the
    dispatcher's batching and placement without Ray (the baseline ``bench scale``
    compares Ray's cost with, and the seam the dispatcher's own tests use)."""

    def __init__(self, runner: RemoteRunner, *, capacity: int) -> None:
        self.runner = runner
        self.name = runner.name
        self.capacity = capacity

    async def submit(self, data: bytes) -> None:
        self.runner.submit(data)

    async def poll(self, wait_s: float) -> bytes:
        return await self.runner.poll(wait_s)

    async def cancel(self, keys: list[str]) -> bytes:
        return await self.runner.cancel(keys)
