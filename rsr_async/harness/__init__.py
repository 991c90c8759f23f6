"""Agent harnesses: the shared Terminus protocol, Terminus 2, and (later) StateM and RSRT.

``get_harness(name, config)`` is the registry the episode runner uses. The protocol
pieces (reply parsing, templates, observations) are in :mod:`rsr_async.harness.protocol`;
test doubles (FakeShell, ReplayModel) in :mod:`rsr_async.harness.fakes`.
"""

from __future__ import annotations

from ..config import HarnessConfig
from ..errors import ConfigError, NotImplementedYetError
from .base import Checkpoint, EpisodeOutcome, Harness
from .terminus2 import Terminus2

__all__ = ["HARNESSES", "Checkpoint", "EpisodeOutcome", "Harness", "Terminus2", "get_harness"]

HARNESSES = ("terminus2", "statem", "rsrt")
"""Every harness name the pipeline knows; StateM and RSRT are planned, not built yet."""


def get_harness(name: str, config: HarnessConfig) -> Harness:
    """The harness called ``name``, configured with ``config``."""
    if name == Terminus2.name:
        return Terminus2(config)
    if name in HARNESSES:
        raise NotImplementedYetError(
            f"harness {name!r} is planned but not built yet; use 'terminus2'"
        )
    raise ConfigError(f"unknown harness {name!r}: expected one of {', '.join(HARNESSES)}")
