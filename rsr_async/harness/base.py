"""What every harness promises the episode runner: :class:`Harness` and its outcome."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

import anyio
import msgspec

from ..schema import EndReason, Trajectory, Usage
from ..tasks.verifier import Verification

if TYPE_CHECKING:  # the llm and sandbox packages pull in HTTP and Docker clients
    from ..llm.base import ChatModel
    from ..sandbox.base import Sandbox, ShellSession
    from ..schema import EpisodeSpec, Task

__all__ = ["DEFAULT_MODEL_CALL_BUDGET_S", "AgentClock", "Checkpoint", "EpisodeOutcome", "Grader", "Harness"]

DEFAULT_MODEL_CALL_BUDGET_S = 120.0
"""How long one model call may take on the agent's clock; beyond it the server stalls."""


class _Deadline:
    """A ``move_on_after`` scope registered with an :class:`AgentClock` while it is open."""

    def __init__(self, clock: AgentClock, seconds: float) -> None:
        self._clock = clock
        self._scope = anyio.move_on_after(seconds)

    def __enter__(self) -> anyio.CancelScope:
        scope = self._scope.__enter__()
        self._clock._scopes.append(scope)
        return scope

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        self._clock._scopes.remove(self._scope)
        return bool(self._scope.__exit__(kind, exc, tb))


class AgentClock:
    """The agent's wall clock, which a stalled model server does not run down.

    Every deadline opened with :meth:`deadline` (the harness's own clock, the runner's
    backstop) stops while a model call (:meth:`model_call`) runs past ``call_budget_s``:
    time blocked on the model server beyond that budget is the server's, not the agent's.
    A server that never answers is then the model client's to give up on: its total
    timeout raises :class:`~rsr_async.errors.LLMTimeoutError`, an infrastructure error
    the engine retries, instead of an agent ``timeout`` counted in pass@k.

    A call that starts with no more than ``call_budget_s`` left on a deadline is charged
    in full (until the call has taken the budget, it is the agent's time).
    """

    def __init__(self, call_budget_s: float = DEFAULT_MODEL_CALL_BUDGET_S) -> None:
        self.call_budget_s = call_budget_s
        self.excused_s = 0.0
        """Seconds of model calls past the budget, not charged to the agent so far."""
        self._scopes: list[anyio.CancelScope] = []

    def deadline(self, seconds: float) -> _Deadline:
        """Like ``anyio.move_on_after(seconds)``, paused during model calls past the budget."""
        return _Deadline(self, seconds)

    @contextmanager
    def model_call(self) -> Iterator[None]:
        """Wrap one model call: its time past the budget moves every deadline on."""
        started = anyio.current_time()
        held = [(scope, scope.deadline) for scope in self._scopes
                if scope.deadline - started > self.call_budget_s]
        for scope, _ in held:
            scope.deadline = math.inf  # the budget's end is re-applied below, by the excess
        try:
            yield
        finally:
            excess = max(0.0, anyio.current_time() - started - self.call_budget_s)
            if held:
                self.excused_s += excess
            for scope, deadline in held:
                scope.deadline = deadline + excess

Checkpoint = Callable[[Trajectory], None]
"""Called after every turn with the live trajectory (updated in place: encode or copy it
if you keep it), so a cancelled or timed-out episode still leaves its partial record."""


class EpisodeOutcome(msgspec.Struct, kw_only=True):
    """How an agent episode went. The verifier has not run yet: the runner runs it."""

    trajectory: Trajectory
    end_reason: EndReason
    """``completed``, ``max_turns``, ``timeout``, ``context`` or ``error``."""
    turns: int
    """Model calls of the agent loop (handoff calls not counted)."""
    usage: Usage
    """Summed over every model call, handoff calls included."""
    error: str | None = None
    """What went wrong, for ``error`` and ``context`` endings."""
    verification: Verification | None = None
    """The harness's own last hidden verification (RSRT), which is then the episode's
    verdict; None when the runner should run the verifier itself."""


class Grader(Protocol):
    """Runs a task's hidden tests against the state of ``sandbox``, out of the agent's
    reach (RSRT is handed one; it never reaches for the sandbox pool itself)."""

    async def __call__(self, sandbox: Sandbox, task: Task, *, key: str) -> Verification: ...


class Harness(Protocol):
    """An agent harness: drives one model through one episode in one sandbox.

    Infrastructure failures (:class:`~rsr_async.errors.InfraError`: the model server,
    Docker) propagate, so the engine can retry the episode; everything the protocol can
    absorb ends up in :attr:`EpisodeOutcome.end_reason`.
    """

    name: str

    def deadline_for(self, spec: EpisodeSpec) -> float:
        """The agent's wall clock for ``spec`` in seconds (the runner's backstop adds to it)."""
        ...

    async def run(
        self,
        spec: EpisodeSpec,
        sandbox: Sandbox,
        model: ChatModel,
        *,
        checkpoint: Checkpoint | None = None,
        clock: AgentClock | None = None,
        shell: ShellSession | None = None,
        continued: bool = False,
    ) -> EpisodeOutcome:
        """``clock`` times the agent (the runner passes the one its backstop uses);
        None: a fresh :class:`AgentClock` with the default per-call budget. ``shell``: a
        shell the caller keeps open across calls (a multi-step task's steps), else the
        harness opens and closes its own; ``continued``: a later step on that shell."""
        ...
