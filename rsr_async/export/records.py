"""What the export stage is handed: one trajectory, the set it belongs to, its provenance."""

from __future__ import annotations

from typing import Literal

import msgspec

from ..schema import Trajectory

__all__ = ["ExportRecord", "ExportSet"]

ExportSet = Literal["rewrite", "direct", "baseline"]


class ExportRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One trajectory selected for export, with the set it goes into.

    The same trajectory may come twice under one ``key`` (a direct Terminus 2 success is
    both in the SFT set, as ``direct``, and in the baseline, as ``baseline``); it must then
    be the same trajectory.
    """

    key: str
    """The job key of the trajectory: unique within a set."""
    set: ExportSet
    """``rewrite``: a kept rewrite execution (plain Terminus 2, runbook as a private
    message); ``direct``: a direct Terminus 2 discover success (it goes into the SFT set
    too, as in the paper); ``baseline``: a discover success of any harness, for the
    direct-SFT baseline."""
    task: str
    harness: str
    """The harness that produced the trajectory: ``terminus2``, ``statem`` or ``rsrt``."""
    trajectory: Trajectory
    model: str
    source_key: str = ""
    """Rewrites: the discover job whose trajectory the runbook was written from."""
    runbook: str = ""
    """Rewrites: the runbook's id."""
    reward: float | None = None
