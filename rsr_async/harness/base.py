"""What every harness promises the episode runner: :class:`Harness` and its outcome."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import msgspec

from ..schema import EndReason, Trajectory, Usage
from ..tasks.verifier import Verification

if TYPE_CHECKING:  # the llm and sandbox packages pull in HTTP and Docker clients
    from ..llm.base import ChatModel
    from ..sandbox.base import Sandbox
    from ..schema import EpisodeSpec, Task

__all__ = ["Checkpoint", "EpisodeOutcome", "Grader", "Harness"]

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
    ) -> EpisodeOutcome: ...
