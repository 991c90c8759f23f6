"""What every harness promises the episode runner: :class:`Harness` and its outcome."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import msgspec

from ..schema import EndReason, Trajectory, Usage

if TYPE_CHECKING:  # the llm and sandbox packages pull in HTTP and Docker clients
    from ..llm.base import ChatModel
    from ..sandbox.base import Sandbox
    from ..schema import EpisodeSpec

__all__ = ["Checkpoint", "EpisodeOutcome", "Harness"]

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


class Harness(Protocol):
    """An agent harness: drives one model through one episode in one sandbox.

    Infrastructure failures (:class:`~rsr_async.errors.InfraError`: the model server,
    Docker) propagate, so the engine can retry the episode; everything the protocol can
    absorb ends up in :attr:`EpisodeOutcome.end_reason`.
    """

    name: str

    async def run(
        self,
        spec: EpisodeSpec,
        sandbox: Sandbox,
        model: ChatModel,
        *,
        checkpoint: Checkpoint | None = None,
    ) -> EpisodeOutcome: ...
