"""RSRT (recursive self-reflect Terminus): Terminus 2 plus a hidden-verifier loop.

When the model confirms completion, the :class:`~rsr_async.harness.base.Grader` it was
handed runs the task's hidden tests out of the agent's reach: in the engine, a commit of
the sandbox started as a sibling container (:meth:`SandboxPool.snapshot`), so ``/tests``,
the reward file and the verifier's output never exist in the container the agent keeps
typing into. On a pass the episode ends; on a fail the model hears one fixed sentence
(``templates/rsrt_failed.txt``: no test names, no output, no answer) and keeps working.
The loop ends on a pass, at ``rsr.rsrt_wall_clock_min`` (the episode's wall clock, unless
the spec sets its own deadline), or at the turn cap. The last hidden run's verdict is
the episode's (:attr:`EpisodeOutcome.verification`); each claim and its verdict is a
``harness`` record in the trajectory.

The first prompt carries one harness note (``templates/rsrt_intro.txt``) saying that a
failed check lets the agent keep working, which Terminus's confirmation text denies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import HarnessError
from .protocol import render
from .terminus2 import Terminus2, TerminusSession

if TYPE_CHECKING:
    from ..config import HarnessConfig
    from ..schema import EpisodeSpec
    from .base import Grader

__all__ = ["Rsrt", "RsrtSession"]

DEFAULT_WALL_CLOCK_S = 180 * 60.0
"""The paper's RSRT wall clock (``rsr.rsrt_wall_clock_min`` = 180)."""


class RsrtSession(TerminusSession):
    """A Terminus session whose completion claims go to a hidden grader."""

    harness: Rsrt
    claims: int = 0

    def first_prompt_notes(self) -> list[str]:
        return [render("rsrt_intro")]

    async def on_completion(self) -> str | None:
        if self.sandbox is None:
            raise HarnessError("RSRT needs the episode's sandbox to copy for its hidden tests")
        self.claims += 1
        verification = await self.harness.grader(self.sandbox, self.spec.task, key=str(self.spec.key))
        self.verification = verification
        verdict = "passed" if verification.passed else "failed"
        self.record_harness(
            f"[rsrt] completion claim {self.claims} at turn {self.turn}: hidden tests {verdict}"
        )
        return None if verification.passed else render("rsrt_failed")


class Rsrt(Terminus2):
    """The RSRT harness; ``grader`` runs the hidden tests on a copy of the sandbox."""

    name = "rsrt"
    session_class = RsrtSession

    def __init__(
        self, config: HarnessConfig, *, grader: Grader, wall_clock_s: float = DEFAULT_WALL_CLOCK_S
    ) -> None:
        super().__init__(config)
        self.grader = grader
        self.wall_clock_s = wall_clock_s

    def deadline_for(self, spec: EpisodeSpec) -> float:
        """RSRT's own wall clock, unless the spec sets a deadline."""
        return spec.deadline_s if spec.deadline_s is not None else self.wall_clock_s
