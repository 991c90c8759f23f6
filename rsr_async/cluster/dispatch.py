"""The head side: a :class:`Dispatcher` is the engine's runner for jobs that run remotely.

The engine stays the scheduler and the one store: it calls the dispatcher once per
attempt, exactly as it calls a local runner, and records what it returns or raises. The
dispatcher places the attempt on a :class:`Remote` (a Ray actor, through
:mod:`.ray_backend`, or any object with the same four calls), sends it there in a batch,
and waits for its outcome, which a per-remote collecting loop brings back in batches::

    engine job task ──▶ Dispatcher.__call__ ──▶ link.pending ─▶ sender ─▶ remote.submit(batch)
          ▲                                                                    │
          └──────── waiter.event ◀── collector ◀── remote.poll(wait_s) ◀───────┘

Placement: attempts of one runbook (the M executions, whose prompts share a prefix) go
to the same remote by rendezvous hashing, so its model servers' prefix cache serves
them; other jobs go round-robin among remotes with a free slot.

A remote that fails a call (its actor died, its node was lost) is *lost*: its in-flight
attempts raise :class:`~rsr_async.errors.RunnerLostError` (an infrastructure error the
engine retries, on the remotes left), attempts not yet sent are placed again, and
``on_lost`` is told (the Ray backend kills the actor for certain and has the survivors
sweep its containers). ``replace``, when given, may bring a new remote in its place (the
Ray backend starts one on the lost actor's node if that node is alive); placement waits
for it rather than fail while it is the only hope. Nothing is stored twice: only the
engine stores, once per job.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import anyio
import anyio.abc
import msgspec

from .. import errors
from ..engine import Job, JobContext
from ..errors import HarnessError, InfraError, RunnerLostError
from ..schema import JobResult
from .wire import (
    Assignment,
    Ended,
    Finished,
    Outcome,
    Raised,
    decode_outcomes,
    decode_poll,
    encode_assignments,
)

__all__ = ["DispatchStats", "Dispatcher", "Remote"]

log = logging.getLogger(__name__)


class Remote(Protocol):
    """What the dispatcher needs of one remote runner. Every call raises
    :class:`~rsr_async.errors.RunnerLostError` when the remote is gone, and has a
    deadline of its own."""

    name: str
    capacity: int
    """Attempts it runs at once."""

    async def submit(self, data: bytes) -> None: ...

    async def poll(self, wait_s: float) -> bytes: ...

    async def cancel(self, keys: list[str]) -> bytes: ...


class DispatchStats(msgspec.Struct, frozen=True, kw_only=True):
    """A frozen record of the dispatcher (``dispatcher.statistics()``)."""

    remotes: int
    alive: int
    in_flight: int
    sent: int
    """Attempts sent to remotes."""
    batches: int
    """Submit calls (``sent / batches`` is the mean batch)."""
    polls: int
    lost: tuple[str, ...]
    """Names of the remotes lost so far."""
    live_sandboxes: int
    peak_sandboxes: int
    """Sum over remotes of each one's peak (an upper bound of the cluster's peak)."""


class _Waiter:
    __slots__ = ("assignment", "event", "outcome", "lost", "sent")

    def __init__(self, assignment: Assignment) -> None:
        self.assignment = assignment
        self.event = anyio.Event()
        self.outcome: Outcome | None = None
        self.lost: RunnerLostError | None = None
        self.sent = False


class _Link:
    """One remote as the head sees it."""

    def __init__(self, remote: Remote) -> None:
        self.remote = remote
        self.name = remote.name
        self.alive = True
        self.done = 0
        """Outcomes collected from it."""
        self.in_flight: dict[str, _Waiter] = {}
        """Placed here, sent or not, until its outcome arrives."""
        self.pending: list[_Waiter] = []
        self.wake = anyio.Event()
        self.live_sandboxes = 0
        self.peak_sandboxes = 0

    @property
    def free(self) -> int:
        return self.remote.capacity - len(self.in_flight)


class Dispatcher:
    """A :data:`~rsr_async.engine.JobRunner` that runs each attempt on a remote.

    Use inside ``async with anyio.create_task_group() as tg: await tg.start(d.serve)``;
    the engine calls the dispatcher like any runner.
    """

    def __init__(
        self,
        remotes: Sequence[Remote],
        *,
        batch_max: int = 256,
        batch_window_s: float = 0.005,
        poll_wait_s: float = 1.0,
        on_lost: Callable[[str, BaseException], Awaitable[None]] | None = None,
        replace: Callable[[str], Awaitable[Remote | None]] | None = None,
    ) -> None:
        if not remotes:
            raise HarnessError("a dispatcher needs at least one remote runner")
        self._links = [_Link(remote) for remote in remotes]
        self._batch_max = batch_max
        self._window_s = batch_window_s
        self._poll_wait_s = poll_wait_s
        self._on_lost = on_lost
        self._replace = replace
        self._room = anyio.Event()
        """Set when a slot frees up on some remote (or one is lost)."""
        self._next = 0
        self._sent = 0
        self._batches = 0
        self._polls = 0
        self._lost: list[str] = []
        self._replacing = 0
        """Losses whose ``on_lost`` is still running (it may bring a replacement)."""
        self._tg: anyio.abc.TaskGroup | None = None

    @property
    def remotes(self) -> list[Remote]:
        """The remotes it was given or took on since, lost ones included."""
        return [link.remote for link in self._links]

    def add(self, remote: Remote) -> None:
        """Place on ``remote`` too, from now on (a replacement for a lost one)."""
        if self._tg is None:
            raise HarnessError("Dispatcher.add: the dispatcher is not serving")
        if any(link.name == remote.name for link in self._links):
            raise HarnessError(f"Dispatcher.add: a remote named {remote.name!r} is known already")
        link = _Link(remote)
        self._links.append(link)
        self._tg.start_soon(self._drive, link)
        self._room.set()

    @property
    def capacity(self) -> int:
        """Attempts the live remotes run at once, all together."""
        return sum(link.remote.capacity for link in self._links if link.alive)

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run every remote's sender and collector until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            for link in self._links:
                tg.start_soon(self._drive, link)
            task_status.started()

    # ------------------------------------------------------------------ the runner

    async def __call__(self, job: Job, ctx: JobContext) -> JobResult:
        time_left = ctx.time_left()
        assignment = Assignment(job=job, attempt=ctx.attempt, time_left_s=time_left)
        key = str(job.key)
        while True:
            link = await self._place(job)
            waiter = _Waiter(assignment)
            link.in_flight[key] = waiter
            link.pending.append(waiter)
            link.wake.set()
            try:
                await waiter.event.wait()
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    await self._cancel_remote(link, key, waiter, ctx)
                raise
            if waiter.outcome is not None:
                return self._result(waiter.outcome, ctx)
            if waiter.lost is not None and waiter.sent:
                raise waiter.lost
            # Lost before it was sent: nothing ran, so place it again.

    async def _place(self, job: Job) -> _Link:
        while True:
            alive = [link for link in self._links if link.alive]
            if not alive and not self._replacing:
                raise RunnerLostError(
                    f"every remote runner is lost ({', '.join(self._lost)}); no node is left to run on"
                )
            link = self._choose(job, alive) if alive else None
            if link is not None:
                return link
            if self._room.is_set():
                self._room = anyio.Event()
            await self._room.wait()

    def _choose(self, job: Job, alive: list[_Link]) -> _Link | None:
        key = job.key
        if key.runbook != "-":
            # Rendezvous hashing: the executions of one runbook meet on one remote while
            # it is alive and has room, and move together to the next best when not.
            affinity = f"{key.task}/{key.runbook}".encode()
            ranked = sorted(alive, key=lambda link: _weight(affinity, link.name), reverse=True)
            return next((link for link in ranked if link.free > 0), None)
        count = len(alive)
        for offset in range(count):
            link = alive[(self._next + offset) % count]
            if link.free > 0:
                self._next = (self._next + offset + 1) % count
                return link
        return None

    def _result(self, outcome: Outcome, ctx: JobContext) -> JobResult:
        for _ in range(outcome.steps):
            ctx.step()
        if isinstance(outcome, Finished):
            ctx.add_usage(outcome.result.usage)
            return outcome.result
        if isinstance(outcome, Raised):
            raise _rebuild(outcome)
        assert isinstance(outcome, Ended)
        if outcome.partial is not None:
            ctx.checkpoint(outcome.partial)
        # The remote's backstop fired before the head's deadline (clocks apart, or the
        # head stalled): infrastructure time, as the engine treats its own deadline.
        exc = InfraError(f"{outcome.key}: the remote runner's backstop deadline passed")
        exc.retryable = False
        raise exc

    async def _cancel_remote(self, link: _Link, key: str, waiter: _Waiter, ctx: JobContext) -> None:
        if link.in_flight.get(key) is waiter:
            del link.in_flight[key]
            self._room.set()
        if not waiter.sent:
            if waiter in link.pending:
                link.pending.remove(waiter)
            return
        if not link.alive or waiter.event.is_set():
            return
        try:
            with anyio.fail_after(60.0):
                data = await link.remote.cancel([key])
        except (RunnerLostError, TimeoutError):
            return  # the engine records the cancellation; the remote's loss is the collector's
        for outcome in decode_outcomes(data):
            if isinstance(outcome, Ended) and outcome.partial is not None:
                ctx.checkpoint(outcome.partial)

    # ------------------------------------------------------------------ per remote

    async def _drive(self, link: _Link) -> None:
        async with anyio.create_task_group() as tg:

            async def guarded(loop: Callable[[_Link], Awaitable[None]]) -> None:
                try:
                    await loop(link)
                except RunnerLostError as exc:
                    tg.cancel_scope.cancel()  # the other loop of this remote, too
                    await self._lose(link, exc)

            tg.start_soon(guarded, self._sender)
            tg.start_soon(guarded, self._collector)

    async def _sender(self, link: _Link) -> None:
        while True:
            await link.wake.wait()
            if len(link.pending) < self._batch_max and self._window_s > 0:
                await anyio.sleep(self._window_s)  # let the attempts placed meanwhile share the call
            link.wake = anyio.Event()
            batch, link.pending = link.pending[: self._batch_max], link.pending[self._batch_max :]
            if link.pending:
                link.wake.set()
            if not batch:
                continue
            for waiter in batch:
                waiter.sent = True
            await link.remote.submit(encode_assignments([w.assignment for w in batch]))
            self._sent += len(batch)
            self._batches += 1

    async def _collector(self, link: _Link) -> None:
        while True:
            reply = decode_poll(await link.remote.poll(self._poll_wait_s))
            self._polls += 1
            link.live_sandboxes = reply.live_sandboxes
            link.peak_sandboxes = max(link.peak_sandboxes, reply.peak_sandboxes)
            link.done += len(reply.outcomes)
            for outcome in reply.outcomes:
                waiter = link.in_flight.pop(outcome.key, None)
                if waiter is not None:
                    waiter.outcome = outcome
                    waiter.event.set()
            if reply.outcomes:
                self._room.set()

    async def _lose(self, link: _Link, exc: RunnerLostError) -> None:
        if not link.alive:
            return
        link.alive = False
        self._lost.append(link.name)
        lost = RunnerLostError(f"remote runner {link.name} was lost with this attempt on it: {exc}")
        waiters, link.in_flight, link.pending = list(link.in_flight.values()), {}, []
        for waiter in waiters:
            waiter.lost = lost
            waiter.event.set()
        if self._replace is not None and self._tg is not None:
            # In the dispatcher's own task group: this remote's is cancelled already, and
            # a replacement starting (seconds, minutes on a fresh node) must not hold up
            # a shutdown.
            self._replacing += 1
            self._tg.start_soon(self._bring_replacement, link.name)
        self._room.set()
        if self._on_lost is not None:
            with anyio.CancelScope(shield=True):
                await self._on_lost(link.name, exc)

    async def _bring_replacement(self, name: str) -> None:
        try:
            replacement = await self._replace(name) if self._replace is not None else None
            if replacement is not None:
                self.add(replacement)
        except Exception as exc:  # a failed replacement leaves the others running
            log.warning("no replacement for lost remote %s: %s: %s", name, type(exc).__name__, exc)
        finally:
            self._replacing -= 1
            self._room.set()  # placement waiting on a replacement: there is one, or none

    # ------------------------------------------------------------------ numbers

    def statistics(self) -> DispatchStats:
        return DispatchStats(
            remotes=len(self._links),
            alive=sum(link.alive for link in self._links),
            in_flight=sum(len(link.in_flight) for link in self._links),
            sent=self._sent,
            batches=self._batches,
            polls=self._polls,
            lost=tuple(self._lost),
            live_sandboxes=sum(link.live_sandboxes for link in self._links if link.alive),
            peak_sandboxes=sum(link.peak_sandboxes for link in self._links),
        )

    def in_flight_on(self, name: str) -> int:
        """Attempts placed on the remote called ``name`` and not yet back."""
        return sum(len(link.in_flight) for link in self._links if link.name == name)

    def done_on(self, name: str) -> int:
        """Outcomes the remote called ``name`` sent back."""
        return sum(link.done for link in self._links if link.name == name)


def _weight(affinity: bytes, name: str) -> int:
    return int.from_bytes(hashlib.blake2b(affinity + b"\0" + name.encode(), digest_size=8).digest(), "big")


def _rebuild(raised: Raised) -> Exception:
    """The remote's exception as the engine would have seen it locally: an error of this
    package keeps its class (so its stored text is the same), its retryable and
    permanent marks; a bug keeps the remote traceback in its message."""
    if not raised.infra:
        return HarnessError(f"on a remote runner, {raised.error_type}: {raised.message}")
    cls = getattr(errors, raised.error_type, None)
    exc: InfraError
    if isinstance(cls, type) and issubclass(cls, InfraError):
        try:
            exc = cls(raised.message)
        except TypeError:
            exc = InfraError(raised.message)
    else:
        exc = InfraError(raised.message)
    exc.retryable = raised.retryable
    exc.permanent = raised.permanent
    return exc

