"""The :class:`Engine`: runs jobs on one event loop, stores every result, resumes.

Structure (all inside the engine's task group, opened by ``async with Engine(...)``)::

    Engine task group
    ├── services scope: loop-lag monitor, progress timer, shutdown grace timer
    └── one scheduler task per ``engine.run(jobs)``
        └── run scope (cancelled on escalation, or when the consumer stops reading)
            └── job task group: one task per job in flight (global semaphore: concurrency)

A job task runs attempts (infra retries with backoff), each under its own deadline,
then hands the result to the store writer and, once it is committed, to the consumer.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
import traceback
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol

import anyio
import anyio.abc
import anyio.lowlevel
import msgspec
from anyio.streams.memory import MemoryObjectSendStream

from ..config import Config
from ..errors import (
    PERMANENT_PREFIX,
    HarnessError,
    InfraError,
    RsrError,
    StoreError,
    is_permanent_error,
)
from ..schema import EndReason, JobResult, JobStatus, kind_of
from .jobs import Job, JobContext, JobRunner, _Meter
from .limits import Limits
from .looplag import LoopLagMonitor
from .metrics import serve_metrics
from .progress import ProgressSink, Snapshot, StageView, make_progress
from .store import FINISHED, Store

__all__ = ["Engine", "EngineStats", "StageStats"]

_RESULT_STATUSES = frozenset({"succeeded", "failed", "infra_error", "cancelled"})
_CANCEL_STORE_TIMEOUT_S = 30.0
_COMMIT_TIMEOUT_S = 60.0


class StageStats(msgspec.Struct, frozen=True, kw_only=True):
    """Counts for one stage (all runs of it in this engine)."""

    total: int = 0
    skipped: int = 0
    """Finished in an earlier run of the same run directory; not run again."""
    done: int = 0
    """Reached a final status in this engine (succeeded, failed, infra_error, cancelled)."""
    running: int = 0
    pending: int = 0
    """Submitted but not started (e.g. left by a shutdown)."""
    succeeded: int = 0
    failed: int = 0
    """Stored ``failed``: the model's failures plus ``permanent`` errors."""
    infra_error: int = 0
    cancelled: int = 0
    retries: int = 0
    steps: int = 0
    permanent: int = 0
    """Of ``failed``: ended by the task's or the config's fault (never graded)."""


class EngineStats(msgspec.Struct, frozen=True, kw_only=True):
    """A frozen record of what the engine did so far (``engine.statistics()``)."""

    total: int
    skipped: int
    done: int
    running: int
    pending: int
    succeeded: int
    failed: int
    infra_error: int
    cancelled: int
    retries: int
    steps: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    elapsed_s: float
    loop_lag_p99_ms: float
    loop_lag_max_ms: float
    shutdown: Literal["none", "draining", "cancelling"]
    recovered_running: int
    """Jobs that a crashed earlier run left ``running``; they were queued again."""
    stages: dict[str, StageStats]
    permanent: int = 0
    """Of ``failed``: ended by the task's or the config's fault (never graded)."""

    @property
    def complete(self) -> bool:
        """Every submitted job has a final status and none is left pending or running."""
        return self.pending == 0 and self.running == 0 and self.shutdown == "none"


@dataclass(slots=True)
class _StageCounts:
    started_at: float
    meter: _Meter = field(default_factory=_Meter)
    total: int = 0
    skipped: int = 0
    started: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    infra_error: int = 0
    cancelled: int = 0
    retries: int = 0
    permanent: int = 0

    @property
    def done(self) -> int:
        return self.succeeded + self.failed + self.infra_error + self.cancelled

    def freeze(self) -> StageStats:
        return StageStats(
            total=self.total,
            skipped=self.skipped,
            done=self.done,
            running=self.running,
            pending=self.total - self.skipped - self.started,
            succeeded=self.succeeded,
            failed=self.failed,
            infra_error=self.infra_error,
            cancelled=self.cancelled,
            retries=self.retries,
            steps=self.meter.steps,
            permanent=self.permanent,
        )


class _Run:
    """One ``engine.run()``: its scope, its result stream and the keys it owns."""

    __slots__ = ("error", "graph", "keys", "rerun", "scope", "send", "stage", "stages", "tg")

    def __init__(
        self,
        stage: str,
        graph: JobGraph | None,
        rerun: frozenset[str],
        stages: frozenset[str] | None,
    ) -> None:
        self.stage = stage
        self.stages = stages
        self.graph = graph
        self.rerun = rerun
        self.keys: set[str] = set()
        self.scope = anyio.CancelScope()
        self.error: BaseException | None = None
        self.send: MemoryObjectSendStream[JobResult] | None = None
        self.tg: anyio.abc.TaskGroup | None = None


class JobGraph(Protocol):
    """What makes a run a pipeline: the jobs that follow a finished job.

    Called once per job that reaches ``succeeded`` or ``failed`` (in this run, or found
    finished by a rerun). Must be a pure function of the job and its stored result, so
    that a rerun recreates the same successors with the same keys.
    """

    def successors(self, job: Job, result: JobResult) -> Iterable[Job]: ...


def _unwrap(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


class Engine:
    """Runs jobs concurrently on the current event loop; embeds in any asyncio program.

    ::

        async with Engine(config, runner=runners, run_dir="runs/x") as engine:
            async for result in engine.run(jobs, graph=graph):
                ...

    The engine is generic: ``runner`` is one :data:`JobRunner` per job kind (a mapping
    such as ``{"episode": ..., "plan": ...}``) or one runner for every kind, and the
    optional :class:`JobGraph` says which jobs follow a finished one. The real runners
    (model servers, Docker sandboxes) and the pipeline's graph are opened together with
    the engine by :func:`rsr_async.open_pipeline`; tests pass fakes.

    - No global state, no signal handlers, no ``asyncio.run`` inside: the CLI adds those
      (:func:`rsr_async.engine.signals.shutdown_on_signals`).
    - Results are yielded after they are committed to the store.
    - Rerunning the same jobs in the same ``run_dir`` resumes: ``succeeded`` and
      ``failed`` jobs are skipped; ``pending``, ``running`` (a crash), ``cancelled`` and
      ``infra_error`` jobs run again (``rerun`` changes that set).
    - Cancelling the caller's scope cancels the jobs; each stores its partial
      trajectory with status ``cancelled``. Leaving the ``async with`` block, or
      stopping to read ``run()``, cancels what is still running the same way.
    - asyncio only (uvloop welcome); anyio code on the asyncio backend is fine.

    ``gauges`` are extra live numbers (sandboxes alive, server queue depth ...) the
    display and the metrics endpoint show, read on every refresh.
    """

    def __init__(
        self,
        config: Config,
        *,
        runner: JobRunner | Mapping[str, JobRunner],
        run_dir: Path | str,
        force: bool = False,
        progress: ProgressSink | Literal["auto", "rich", "plain", "none"] | None = None,
        gauges: Mapping[str, Callable[[], float]] | None = None,
        limits: Limits | None = None,
        lag_interval_s: float = 0.05,
    ) -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        self.limits = limits if limits is not None else Limits()
        # One runner per job kind (``episode``, ``plan`` ...); a lone runner runs every kind.
        self._runners: dict[str, JobRunner] = (
            dict(runner) if isinstance(runner, Mapping) else {"*": runner}
        )
        self._force = force
        self._progress_choice = progress
        self._gauges = dict(gauges or {})
        self._lag = LoopLagMonitor(lag_interval_s)
        self._store: Store | None = None
        self._stack: AsyncExitStack | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._services = anyio.CancelScope()
        # Capacity per resource: sandbox jobs (episodes) and model-only jobs (planner,
        # critic, auditor) never take each other's slots.
        self._slots: dict[str, anyio.Semaphore] = {
            "sandbox": anyio.Semaphore(config.run.concurrency),
            "model": anyio.Semaphore(config.run.model_concurrency),
        }
        self._stages: dict[str, _StageCounts] = {}
        self._runs: set[_Run] = set()
        self._active_keys: set[str] = set()
        self._shutdown: Literal["none", "draining", "cancelling"] = "none"
        self._shutdown_event: anyio.Event | None = None
        self._started = 0.0
        self._progress: ProgressSink | None = None
        self._rate_mark: tuple[float, int, int] = (0.0, 0, 0)
        self._rates = (0.0, 0.0)
        self._rng = random.Random()

    # ------------------------------------------------------------------ lifecycle

    @property
    def store(self) -> Store:
        """The run's store (for queries); only while the engine is open."""
        if self._store is None:
            raise RsrError("the engine is not open: use `async with Engine(...) as engine`")
        return self._store

    async def __aenter__(self) -> Engine:
        if self._stack is not None:
            raise RsrError("this Engine is already open; an Engine is entered once")
        try:
            asyncio.get_running_loop()
        except RuntimeError as exc:
            raise RsrError("rsr_async.Engine runs on asyncio (or anyio on asyncio), not trio") from exc
        cfg = self.config.engine
        self._started = time.monotonic()
        self._rate_mark = (self._started, 0, 0)
        self._shutdown_event = anyio.Event()
        stack = AsyncExitStack()
        try:
            store = await anyio.to_thread.run_sync(
                lambda: Store.open(
                    self.run_dir,
                    config=self.config.to_dict(),
                    force=self._force,
                    batch_ms=cfg.store_batch_ms,
                )
            )
            self._store = store
            stack.push_async_callback(self._close_store)
            choice = self._progress_choice
            self._progress = (
                make_progress(cfg.progress if choice is None else choice)
                if choice is None or isinstance(choice, str)
                else choice
            )
            if cfg.metrics_port:
                stop_metrics = await anyio.to_thread.run_sync(
                    serve_metrics, self.snapshot, cfg.metrics_port
                )
                stack.push_async_callback(self._in_thread_shielded, stop_metrics)
            tg = self._tg = anyio.create_task_group()
            await tg.__aenter__()

            async def close_task_group() -> None:
                # Exit it without the body's exception: the caller sees that unwrapped,
                # not inside an ExceptionGroup. Runs are cancelled by __aexit__ already.
                tg.cancel_scope.cancel()
                await tg.__aexit__(None, None, None)

            stack.push_async_callback(close_task_group)
            tg.start_soon(self._run_services, name="rsr-engine-services")
            store.log_event(
                {
                    "event": "open",
                    "at": time.time(),
                    "run_dir": str(self.run_dir),
                    "recovered_running": store.recovered_running,
                }
            )
        except BaseException:
            with anyio.CancelScope(shield=True):
                await stack.aclose()
            self._store = None
            raise
        self._stack = stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._stack is not None
        for run in list(self._runs):
            run.scope.cancel()  # results nobody will read: store them as cancelled
        self._services.cancel()
        try:
            return await self._stack.__aexit__(exc_type, exc, tb)
        finally:
            self._stack = None

    async def _close_store(self) -> None:
        store = self._store
        if store is None:
            return
        stats = self.statistics()
        store.log_event({"event": "close", "at": time.time(), **msgspec.to_builtins(stats)})
        if self._progress is not None:
            self._progress.stop(self.snapshot())
        await self._in_thread_shielded(store.close)

    @staticmethod
    async def _in_thread_shielded(fn: Callable[[], Any]) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(fn)

    async def _run_services(self) -> None:
        with self._services:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._lag.run)
                tg.start_soon(self._refresh)
                tg.start_soon(self._grace_timer)

    async def _refresh(self) -> None:
        progress = self._progress
        assert progress is not None and self._store is not None
        progress.start()
        last_event = time.monotonic()
        while True:
            await anyio.sleep(progress.interval_s)
            snap = self.snapshot()
            progress.update(snap)
            if time.monotonic() - last_event >= 10.0:
                self._store.log_event({"at": time.time(), **snap.to_event()})
                last_event = time.monotonic()

    async def _grace_timer(self) -> None:
        assert self._shutdown_event is not None
        await self._shutdown_event.wait()
        await anyio.sleep(self.config.engine.grace_period_s)
        self.request_shutdown(immediate=True)

    def request_shutdown(self, *, immediate: bool = False) -> None:
        """Stop scheduling new jobs; let running ones finish within the grace period, then
        cancel them (stored ``cancelled`` with their partial trajectory).

        A second call (or ``immediate=True``) cancels running jobs now. Safe to call from
        a signal handler installed on the loop (``loop.add_signal_handler``).
        """
        if self._shutdown == "none" and not immediate:
            self._shutdown = "draining"
            if self._shutdown_event is not None:
                self._shutdown_event.set()
            self._log({"event": "shutdown", "mode": "draining", "at": time.time()})
            return
        if self._shutdown == "cancelling":
            return
        self._shutdown = "cancelling"
        self._log({"event": "shutdown", "mode": "cancelling", "at": time.time()})
        for run in list(self._runs):
            run.scope.cancel()

    def _stopping(self) -> bool:
        return self._shutdown != "none"

    def _log(self, event: dict[str, Any]) -> None:
        if self._store is not None:
            self._store.log_event(event)

    # ------------------------------------------------------------------ running

    def run(
        self,
        jobs: Iterable[Job],
        *,
        stage: str | None = None,
        graph: JobGraph | None = None,
        only_stages: Iterable[str] | None = None,
        rerun: Iterable[JobStatus] = ("pending", "running", "cancelled", "infra_error"),
    ) -> AsyncIterator[JobResult]:
        """Run ``jobs``; yield each result as soon as it is stored.

        Jobs whose key the store already holds with a status outside ``rerun`` (by
        default: ``succeeded`` and ``failed``) are skipped and not yielded (read them
        with ``engine.store.results(stage=...)``). Duplicate keys raise ``ValueError``.
        Several ``run()`` calls may be active at once; they share the capacity limits.

        With a ``graph``, each job that reaches a final status (``succeeded`` or
        ``failed``), in this run or an earlier one, is handed to
        ``graph.successors(job, result)`` and the jobs it returns join this run at once:
        no barrier between stages, and since successors are a function of stored
        results, a rerun after a crash recreates exactly the jobs still to do.
        ``only_stages`` limits what runs to jobs of those key stages; jobs of other stages
        are only walked: if an earlier run finished them, the graph expands below them,
        otherwise they are left alone (neither run nor stored). This is how one stage
        runs alone on an existing run directory.

        ``stage`` only labels the run in the event log (counts are per job key stage).
        """
        if self._tg is None or self._store is None:
            raise RsrError("the engine is not open: use `async with Engine(...) as engine`")
        job_list = list(jobs)
        keys = [str(job.key) for job in job_list]
        if len(set(keys)) != len(keys):
            seen: set[str] = set()
            dupes = sorted({k for k in keys if k in seen or seen.add(k)})  # type: ignore[func-returns-value]
            raise ValueError(f"duplicate job keys ({len(dupes)}), e.g. {dupes[:3]}")
        for job in job_list:
            self._check_job(job)
        rerun_set = frozenset(rerun)
        if rerun_set & FINISHED and "pending" not in rerun_set:
            raise ValueError("rerun must include 'pending'")
        label = stage or (job_list[0].key.stage if job_list else "-")
        stages = None if only_stages is None else frozenset(only_stages)
        return self._results(job_list, keys, label, rerun_set, graph, stages)

    def _check_job(self, job: Job) -> None:
        if job.spec.key != job.key:
            raise ValueError(f"job {job.key}: its spec has another key ({job.spec.key})")
        kind = kind_of(job.spec)
        if kind not in self._runners and "*" not in self._runners:
            raise ValueError(f"job {job.key}: no runner for jobs of kind {kind!r}")
        if job.spec.resource not in self._slots:
            raise ValueError(f"job {job.key}: unknown resource {job.spec.resource!r}")

    def _counts(self, stage: str) -> _StageCounts:
        counts = self._stages.get(stage)
        if counts is None:
            counts = self._stages[stage] = _StageCounts(started_at=time.monotonic())
        return counts

    async def _results(
        self,
        jobs: list[Job],
        keys: list[str],
        stage: str,
        rerun: frozenset[str],
        graph: JobGraph | None,
        stages: frozenset[str] | None,
    ) -> AsyncIterator[JobResult]:
        assert self._tg is not None
        busy = self._active_keys.intersection(keys)
        if busy:
            raise ValueError(
                f"{len(busy)} job keys are already being run by another run() of this engine, "
                f"e.g. {sorted(busy)[:3]}"
            )
        run = _Run(stage, graph, rerun, stages)
        send, receive = anyio.create_memory_object_stream[JobResult](math.inf)
        run.send = send
        self._runs.add(run)
        self._tg.start_soon(self._schedule, run, jobs, name=f"rsr-run:{stage}")
        try:
            with receive:
                async for result in receive:
                    yield result
            if run.error is not None:
                raise run.error
        finally:
            run.scope.cancel()  # the consumer stopped reading: stop its jobs too
            self._runs.discard(run)
            self._active_keys.difference_update(run.keys)

    async def _schedule(self, run: _Run, jobs: list[Job]) -> None:
        assert run.send is not None
        with run.send, run.scope:
            try:
                async with anyio.create_task_group() as tg:
                    run.tg = tg
                    await self._admit(run, jobs)
                    self.store.log_event(
                        {"event": "run", "at": time.time(), "stage": run.stage, "jobs": len(jobs)}
                    )
            except Exception as exc:  # delivered to the consumer as itself, not as a group
                run.error = _unwrap(exc)
                run.scope.cancel()

    async def _admit(self, run: _Run, jobs: list[Job]) -> None:
        """Register ``jobs``, start those still to do (as capacity frees), and expand the
        graph below those an earlier run finished."""
        if not jobs:
            return
        store = self.store
        keys = [str(job.key) for job in jobs]
        clash = run.keys.intersection(keys)
        if clash:  # successors of two parents must not collide
            raise ValueError(f"the job graph produced a job twice: {sorted(clash)[:3]}")
        run.keys.update(keys)
        self._active_keys.update(keys)
        statuses = await anyio.to_thread.run_sync(store.statuses, keys)
        todo: list[tuple[Job, str]] = []
        finished: list[Job] = []
        new: list[Job] = []
        for job, key in zip(jobs, keys, strict=True):
            status = statuses.get(key)
            if status in FINISHED and run.graph is not None:
                finished.append(job)  # done in an earlier run: its successors may not be
            if run.stages is not None and job.key.stage not in run.stages:
                continue  # walked only
            counts = self._counts(job.key.stage)
            counts.total += 1
            if status is None:
                new.append(job)
            if (status or "pending") in run.rerun:
                todo.append((job, key))
            else:
                counts.skipped += 1
        if new:
            await self._wait(store.register(new))
        if finished:
            assert run.graph is not None
            graph = run.graph
            stored = await anyio.to_thread.run_sync(
                lambda: [(job, store.get(job.key)) for job in finished]
            )
            later: list[Job] = []
            for job, result in stored:
                if result is not None:
                    later.extend(graph.successors(job, result))
            await self._admit(run, later)
        assert run.tg is not None
        burst = 0
        for job, key in todo:
            if self._stopping():
                break
            slots = self._slots[job.spec.resource]
            try:
                slots.acquire_nowait()
            except anyio.WouldBlock:
                burst = 0
                await slots.acquire()
            else:
                # Start free slots in bursts without a loop round-trip each,
                # yet yield now and then so a big ramp-up does not stall the loop.
                burst += 1
                if burst >= 128:
                    burst = 0
                    await anyio.lowlevel.checkpoint()
            if self._stopping():
                slots.release()
                break
            try:  # never start a job once this run is cancelled (no yield when it is not)
                await anyio.lowlevel.checkpoint_if_cancelled()
            except BaseException:
                slots.release()
                raise
            counts = self._counts(job.key.stage)
            counts.started += 1
            counts.running += 1
            run.tg.start_soon(self._job, run, job, key, slots, name=key)

    async def _job(self, run: _Run, job: Job, key: str, slots: anyio.Semaphore) -> None:
        counts = self._counts(job.key.stage)
        store = self.store
        slot_held = True
        ctx: JobContext | None = None
        started = time.time()
        try:
            attempt = 0
            while True:
                ctx = JobContext(
                    job,
                    stage=job.key.stage,
                    attempt=attempt,
                    deadline=anyio.current_time() + self._deadline_s(job),
                    limits=self.limits,
                    meter=counts.meter,
                )
                store.mark_running(key)
                try:
                    result = await self._attempt(job, ctx, started)
                except InfraError as exc:
                    if exc.permanent:
                        # The task's or the config's fault: another attempt (now or on
                        # resume) fails the same way. Stored as a finished `failed` with
                        # the cause first, so it is not rerun; never graded (errors.py).
                        result = self._ended(job, ctx, started, "failed", "error", exc)
                        break
                    if exc.retryable and attempt < self.config.engine.infra_retries and (
                        self._shutdown == "none"
                    ):
                        counts.retries += 1
                        store.log_event(
                            {"event": "retry", "at": time.time(), "key": key, "attempt": attempt,
                             "error": f"{type(exc).__name__}: {exc}"[:500]}
                        )
                        await anyio.sleep(self._backoff(attempt))
                        attempt += 1
                        continue
                    result = self._ended(job, ctx, started, "infra_error", "infra", exc)
                except Exception as exc:  # a runner/harness bug: not the model's fault
                    result = self._ended(job, ctx, started, "infra_error", "error", exc)
                break
            slots.release()
            slot_held = False
        except anyio.get_cancelled_exc_class():
            if slot_held:
                slots.release()
                slot_held = False
            result = self._ended(job, ctx, started, "cancelled", "cancelled", None)
            counts.running -= 1
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_STORE_TIMEOUT_S):
                await self._finish(run, job, key, result, attempt_count=ctx.attempt + 1 if ctx else 0)
            raise
        finally:
            if slot_held:
                slots.release()
        counts.running -= 1
        await self._finish(run, job, key, result, attempt_count=ctx.attempt + 1)
        if run.graph is not None and result.status in FINISHED and not self._stopping():
            await self._admit(run, list(run.graph.successors(job, result)))

    async def _attempt(self, job: Job, ctx: JobContext, started: float) -> JobResult:
        runner = self._runners.get(kind_of(job.spec)) or self._runners["*"]
        with anyio.CancelScope(deadline=ctx.deadline) as scope:
            result = await runner(job, ctx)
        if scope.cancelled_caught:
            # The job outran its whole budget. An episode's agent clock is enforced inside
            # the harness, so what overran is waiting (builds, starts, verifier slots) or a
            # stuck server/sandbox: infrastructure, never scored against the model.
            return self._ended(job, ctx, started, "infra_error", "timeout", None)
        expected = job.spec.result_type
        if not isinstance(result, expected):
            raise HarnessError(
                f"job {job.key}: the runner returned {type(result).__name__}, "
                f"not {expected.__name__}"
            )
        if result.key != job.key:
            raise HarnessError(f"job {job.key}: the runner returned the result of {result.key}")
        if result.status not in _RESULT_STATUSES:
            raise HarnessError(f"job {job.key}: the runner returned status {result.status!r}")
        if not result.started_at:
            result.started_at = started
        if not result.finished_at:
            result.finished_at = time.time()
        return result

    def _ended(
        self,
        job: Job,
        ctx: JobContext | None,
        started: float,
        status: JobStatus,
        reason: EndReason,
        exc: BaseException | None,
    ) -> JobResult:
        error = None
        if exc is not None:
            error = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, InfraError) and exc.permanent:
                error = PERMANENT_PREFIX + error
            if not isinstance(exc, RsrError):  # a bug: keep where it happened
                error += "\n" + "".join(traceback.format_exception(exc)[-6:])
        elif reason == "timeout":
            error = f"deadline of {self._deadline_s(job):g} s passed"
        return job.spec.result_type.ended(
            key=job.key,
            status=status,
            end_reason=reason,
            error=error,
            started_at=started,
            finished_at=time.time(),
            partial=ctx.trajectory if ctx is not None else None,
        )

    async def _finish(
        self,
        run: _Run,
        job: Job,
        key: str,
        result: JobResult,
        *,
        attempt_count: int,
    ) -> None:
        store = self.store
        future = store.put_result(result, job=job)
        store.log_event(
            {
                "event": "job",
                "at": time.time(),
                "key": key,
                "status": result.status,
                "end_reason": result.end_reason,
                "reward": result.columns()[0],
                "seconds": round(result.finished_at - result.started_at, 3),
                "attempts": attempt_count,
                "error": (result.error or "")[:300] or None,
            }
        )
        # Shielded: once the runner is done, its result must reach the store and the
        # counters even if a cancellation arrives while the batch commits.
        deadline = anyio.current_time() + _COMMIT_TIMEOUT_S
        with anyio.CancelScope(shield=True, deadline=deadline) as scope:
            await self._wait(future)
        if scope.cancelled_caught:
            raise StoreError(
                f"{store.path}: the store writer did not commit job {key} within "
                f"{_COMMIT_TIMEOUT_S:g} s (disk stalled?)"
            )
        counts = self._counts(job.key.stage)
        status = result.status
        if status == "succeeded":
            counts.succeeded += 1
        elif status == "failed":
            counts.failed += 1
            if is_permanent_error(getattr(result, "error", None)):
                counts.permanent += 1
        elif status == "infra_error":
            counts.infra_error += 1
        else:
            counts.cancelled += 1
        try:
            assert run.send is not None
            run.send.send_nowait(result)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the consumer left; the result is stored

    @staticmethod
    async def _wait(future: Any) -> Any:
        if future is None:
            return None
        try:
            return await asyncio.wrap_future(future)
        except StoreError:
            raise
        except Exception as exc:  # the writer hit something that is not an sqlite3 error
            raise StoreError(f"storing a job failed: {exc}") from exc

    def _deadline_s(self, job: Job) -> float:
        return job.spec.budget_s(self.config.engine.job_deadline_s)

    def _backoff(self, attempt: int) -> float:
        base: float = self.config.engine.retry_backoff_s
        return min(60.0, base * 2.0**attempt) * (0.5 + self._rng.random())

    # ------------------------------------------------------------------ numbers

    def statistics(self) -> EngineStats:
        """What the engine did so far, as a frozen record."""
        stages = {name: c.freeze() for name, c in self._stages.items()}
        meters = [c.meter for c in self._stages.values()]

        def total(name: str) -> int:
            return sum(getattr(s, name) for s in stages.values())

        return EngineStats(
            total=total("total"),
            skipped=total("skipped"),
            done=total("done"),
            running=total("running"),
            pending=total("pending"),
            succeeded=total("succeeded"),
            failed=total("failed"),
            infra_error=total("infra_error"),
            cancelled=total("cancelled"),
            retries=total("retries"),
            steps=sum(m.steps for m in meters),
            prompt_tokens=sum(m.prompt_tokens for m in meters),
            completion_tokens=sum(m.completion_tokens for m in meters),
            cached_tokens=sum(m.cached_tokens for m in meters),
            elapsed_s=time.monotonic() - self._started if self._started else 0.0,
            loop_lag_p99_ms=self._lag.percentile(0.99) * 1000,
            loop_lag_max_ms=self._lag.max_s * 1000,
            shutdown=self._shutdown,
            recovered_running=self._store.recovered_running if self._store else 0,
            stages=stages,
            permanent=total("permanent"),
        )

    @property
    def loop_lag(self) -> LoopLagMonitor:
        """The loop-lag monitor (e.g. to reset it after a warm-up)."""
        return self._lag

    def snapshot(self) -> Snapshot:
        """What the live display shows (rates are over the time since the last call)."""
        now = time.monotonic()
        views = []
        for name, c in self._stages.items():
            elapsed = now - c.started_at
            remaining = c.total - c.skipped - c.done
            eta = remaining * elapsed / c.done if c.done and remaining else (0.0 if not remaining else None)
            views.append(
                StageView(
                    stage=name, total=c.total, skipped=c.skipped, done=c.done, running=c.running,
                    succeeded=c.succeeded, failed=c.failed, infra_error=c.infra_error,
                    cancelled=c.cancelled, retries=c.retries, steps=c.meter.steps,
                    elapsed_s=elapsed, eta_s=eta, permanent=c.permanent,
                )
            )
        meters = [c.meter for c in self._stages.values()]
        completion = sum(m.completion_tokens for m in meters)
        prompt = sum(m.prompt_tokens for m in meters)
        cached = sum(m.cached_tokens for m in meters)
        mark_t, mark_c, mark_p = self._rate_mark
        if now - mark_t >= 1.0:
            self._rates = ((completion - mark_c) / (now - mark_t), (prompt - mark_p) / (now - mark_t))
            self._rate_mark = (now, completion, prompt)
        gauges: dict[str, float] = {}
        for name, read in self._gauges.items():
            try:
                gauges[name] = float(read())
            except Exception:  # a broken gauge must not take the display down
                gauges[name] = math.nan
        return Snapshot(
            elapsed_s=now - self._started if self._started else 0.0,
            stages=tuple(views),
            tokens_per_s=self._rates[0],
            prompt_tokens_per_s=self._rates[1],
            cached_share=cached / prompt if prompt else 0.0,
            loop_lag_p99_ms=self._lag.percentile(0.99) * 1000,
            loop_lag_max_ms=self._lag.max_s * 1000,
            gauges=gauges,
            shutdown=self._shutdown,
        )
