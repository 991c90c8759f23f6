"""The oracle "agent" (the task's reference solution) and ``tasks validate``.

``validate`` checks every task two ways, each in its own fresh sandbox: the oracle must
pass (main reward 1) and the untouched environment must not (a task that passes with no
work measures nothing). A task without a reference solution still gets the second check;
the first is skipped and the row says so (:attr:`ValidationRow.notes`).
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol, TypeVar

import anyio
import msgspec

from ..errors import InfraError, SandboxError, TaskError
from ..sandbox.base import ExecResult, Sandbox
from ..schema import Task
from .keystrokes import is_keystroke_solution, run_keystroke_solution
from .steps import grade_steps
from .verifier import Verification, VerificationError, try_grade

__all__ = ["SandboxProvider", "ValidationRow", "run_oracle", "validate", "validate_task"]

_SLACK_S = 30.0
T = TypeVar("T")
_HARBOR_SOLUTION_DIR = "/solution"


class SandboxProvider(Protocol):
    """What validation needs from a pool (``rsr_async.sandbox.SandboxPool`` fits)."""

    async def ensure_image(self, task: Task) -> str: ...

    def sandbox(self, task: Task, *, key: str) -> AbstractAsyncContextManager[Sandbox]: ...


def _solution_location(task: Task) -> tuple[Path, str, str]:
    """(local path to upload, remote path, script to run)."""
    if not task.solution_path:
        raise TaskError("task has no reference solution", task=task.name, path=task.path)
    script = Path(task.solution_path)
    if task.format == "harbor":
        local = script.parent  # solve.sh may use files next to it
        text = script.read_text(encoding="utf-8", errors="replace")
        # Harbor mounts solution/ at /solution and some solutions name that path; honour it,
        # otherwise use a fresh temporary path that cannot collide with the task's own files.
        if _HARBOR_SOLUTION_DIR + "/" in text:
            remote = _HARBOR_SOLUTION_DIR
        else:
            remote = f"/tmp/rsr-oracle-{uuid.uuid4().hex[:12]}"
        return local, remote, f"{remote}/{script.name}"
    remote = f"/tmp/rsr-oracle-{uuid.uuid4().hex[:12]}"
    return script, f"{remote}/{script.name}", f"{remote}/{script.name}"


async def run_oracle(sandbox: Sandbox, task: Task, *, time_limit: float | None = None) -> ExecResult:
    """Run the task's reference solution in ``sandbox`` in place of a model.

    The solution is uploaded to a temporary path, run with bash from the task's workdir
    under the agent timeout, then removed, so the verifier sees only its effects. A
    terminal-bench ``solution.yaml`` is typed into the sandbox's tmux shell instead, as
    terminal-bench's oracle types it (:mod:`.keystrokes`); its output is the pane.
    """
    if is_keystroke_solution(task):
        return await run_keystroke_solution(sandbox, task, time_limit=time_limit)
    local, remote, script = await anyio.to_thread.run_sync(_solution_location, task)
    limit = task.agent_timeout_s if time_limit is None else time_limit
    top = remote if task.format == "harbor" else remote.rsplit("/", 1)[0]
    try:
        await sandbox.upload(local, remote)
        with anyio.fail_after(limit + _SLACK_S):
            return await sandbox.run(f"bash {script}", time_limit=limit, env=dict(task.env), workdir=task.workdir)
    finally:
        failing = sys.exc_info()[1] is not None
        with anyio.CancelScope(shield=True), anyio.move_on_after(_SLACK_S):
            try:
                await sandbox.run(f"rm -rf {top}", time_limit=_SLACK_S)
            except SandboxError:
                # A broken sandbox is reported by the error already propagating.
                if not failing:
                    raise


class ValidationRow(msgspec.Struct, kw_only=True):
    """One task's validation: image build, oracle run, untouched-environment run."""

    name: str
    category: str = ""
    difficulty: str = ""
    build_s: float = 0.0
    oracle_reward: float | None = None
    oracle_rewards: dict[str, float] = msgspec.field(default_factory=dict)
    nop_reward: float | None = None
    nop_rewards: dict[str, float] = msgspec.field(default_factory=dict)
    duration_s: float = 0.0
    problems: list[str] = msgspec.field(default_factory=list)
    notes: list[str] = msgspec.field(default_factory=list)
    """What was not checked, and why (not a fault: ``ok`` ignores them)."""
    oracle_skipped: bool = False
    """No reference solution: only the untouched environment was checked."""
    oracle_output: str = ""
    """The solution's and then the verifier's output (for diagnosing a failure)."""
    nop_output: str = ""

    @property
    def ok(self) -> bool:
        """Oracle passes (or has no solution to run), untouched environment does not,
        nothing went wrong."""
        return not self.problems


def _problem(prefix: str, exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"{prefix}: infrastructure: a sandbox call did not finish in time"
    if isinstance(exc, InfraError) and exc.retryable:
        return f"{prefix}: infrastructure: {type(exc).__name__}: {exc}"
    return f"{prefix}: {type(exc).__name__}: {exc}"


INFRA_ATTEMPTS = 2
"""Tries per check when the sandbox itself fails (a loaded Docker host, not the task)."""


async def _in_sandbox(
    pool: SandboxProvider, task: Task, key: str, work: Callable[[Sandbox], Awaitable[T]]
) -> T:
    """Run ``work`` in a fresh sandbox; an infrastructure failure gets one fresh retry."""
    for attempt in range(1, INFRA_ATTEMPTS + 1):
        try:
            async with pool.sandbox(task, key=f"{key}/{attempt}") as sandbox:
                return await work(sandbox)
        except (InfraError, TimeoutError) as exc:
            if attempt == INFRA_ATTEMPTS or (isinstance(exc, InfraError) and not exc.retryable):
                raise
    raise AssertionError("unreachable")


async def _oracle_check(pool: SandboxProvider, task: Task, row: ValidationRow) -> None:
    async def work(sandbox: Sandbox) -> tuple[ExecResult, Verification]:
        key = f"validate/{task.name}/oracle"
        if task.steps:  # each step's solution, then its tests, as Harbor's oracle runs them
            ran: list[ExecResult] = []

            async def solve(step: Task) -> str:
                ran.append(await run_oracle(sandbox, step))
                return f"$ solve.sh (exit {ran[-1].exit_code})\n{ran[-1].output}\n$ tests\n"

            verdict = await _try(grade_steps(sandbox, task, pool=pool, key=key, act=solve))
            worst = next((r for r in ran if r.timed_out), ran[-1] if ran else ExecResult(exit_code=0, output=""))
            return worst, verdict
        return await run_oracle(sandbox, task), await try_grade(sandbox, task, pool=pool, key=key)

    try:
        result, verdict = await _in_sandbox(pool, task, f"validate/{task.name}/oracle", work)
    except Exception as exc:  # one broken task must not sink the whole validation
        row.problems.append(_problem("oracle", exc))
        return
    label = Path(task.solution_path or "solve.sh").name
    row.oracle_output = f"$ {label} (exit {result.exit_code})\n{result.output}\n$ tests\n{verdict.output}"
    _record(row, "oracle", verdict)
    if result.timed_out and is_keystroke_solution(task):
        row.problems.append("oracle: " + result.output.partition("\n")[0].strip("[]"))
    elif result.timed_out:
        row.problems.append(f"oracle: solution timed out after {task.agent_timeout_s:g}s")
    if verdict.error:
        row.problems.append(f"oracle: {verdict.error}")
    elif not verdict.passed:
        row.problems.append(f"oracle: reward {verdict.reward:g}, expected 1")


async def _nop_check(pool: SandboxProvider, task: Task, row: ValidationRow) -> None:
    async def work(sandbox: Sandbox) -> Verification:
        if task.steps:
            return await _try(grade_steps(sandbox, task, pool=pool, key=f"validate/{task.name}/nop"))
        return await try_grade(sandbox, task, pool=pool, key=f"validate/{task.name}/nop")

    try:
        verdict = await _in_sandbox(pool, task, f"validate/{task.name}/nop", work)
    except Exception as exc:  # one broken task must not sink the whole validation
        row.problems.append(_problem("untouched", exc))
        return
    row.nop_output = verdict.output
    _record(row, "nop", verdict)
    if verdict.error:
        row.problems.append(f"untouched: {verdict.error}")
    elif verdict.passed:
        row.problems.append("untouched: the environment passes without any work")


async def _try(grading: Awaitable[Verification]) -> Verification:
    """``grading``, a verifier error becoming ``Verification(reward=None, error=...)`` (as
    :func:`try_grade`)."""
    try:
        return await grading
    except VerificationError as exc:
        return Verification(reward=None, output=exc.output, logs=exc.logs, error=str(exc), exit_code=exc.exit_code)


def _record(row: ValidationRow, which: str, verdict: Verification) -> None:
    if which == "oracle":
        row.oracle_reward, row.oracle_rewards = verdict.reward, verdict.rewards
    else:
        row.nop_reward, row.nop_rewards = verdict.reward, verdict.rewards


async def validate_task(task: Task, pool: SandboxProvider) -> ValidationRow:
    """Build the task's image, then run the oracle and untouched checks side by side."""
    row = ValidationRow(name=task.name, category=task.category, difficulty=task.difficulty)
    started = time.monotonic()
    unsolved = [s.name for s in task.steps if not s.solution_path]
    if not task.solution_path and not task.steps:
        row.oracle_skipped = True
        row.notes.append("solution check skipped: no reference solution (solution/solve.sh or solution.sh)")
    elif unsolved:
        row.oracle_skipped = True
        row.notes.append(f"solution check skipped: steps {', '.join(unsolved)} have no reference solution "
                         "(steps/<name>/solution/solve.sh or solution/solve.sh)")
    try:
        with anyio.fail_after(task.build_timeout_s + _SLACK_S):
            await pool.ensure_image(task)
    except TimeoutError:
        row.problems.append(f"build: did not finish within {task.build_timeout_s:g}s")
    except Exception as exc:  # reported in the table; the other tasks go on
        row.problems.append(_problem("build", exc))
    row.build_s = time.monotonic() - started
    if row.problems:
        row.duration_s = row.build_s
        return row
    async with anyio.create_task_group() as tg:
        if not row.oracle_skipped:
            tg.start_soon(_oracle_check, pool, task, row)
        tg.start_soon(_nop_check, pool, task, row)
    row.duration_s = time.monotonic() - started
    return row


async def validate(
    tasks: list[Task], pool: SandboxProvider, *, concurrency: int = 2
) -> list[ValidationRow]:
    """Validate every task, ``concurrency`` at a time; rows in the order of ``tasks``."""
    rows: list[ValidationRow | None] = [None] * len(tasks)
    limiter = anyio.CapacityLimiter(max(1, concurrency))

    async def one(index: int, task: Task) -> None:
        async with limiter:
            rows[index] = await validate_task(task, pool)

    async with anyio.create_task_group() as tg:
        for index, task in enumerate(tasks):
            tg.start_soon(one, index, task)
    return [row for row in rows if row is not None]
