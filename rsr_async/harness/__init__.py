"""Agent harnesses: the shared Terminus protocol, Terminus 2, StateM and RSRT.

``get_harness(name, config, deps)`` is the registry the episode runner uses; ``deps``
(:class:`HarnessDeps`) carries what a harness is handed rather than reaches for: RSRT's
grader and wall clock, StateM's workflow. The protocol
pieces (reply parsing, templates, observations) are in :mod:`rsr_async.harness.protocol`;
test doubles (FakeShell, ReplayModel) in :mod:`rsr_async.harness.fakes`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..config import HARNESS_NAMES, HarnessConfig, check_harness_name
from ..errors import ConfigError, NotImplementedYetError
from .base import Checkpoint, EpisodeOutcome, Grader, Harness
from .rsrt import DEFAULT_WALL_CLOCK_S, Rsrt
from .statem import Statem, Workflow, load_workflow
from .terminus2 import EpisodeEnd, Terminus2, TerminusSession

__all__ = [
    "BUILT",
    "HARNESSES",
    "Checkpoint",
    "EpisodeEnd",
    "EpisodeOutcome",
    "Grader",
    "Harness",
    "HarnessDeps",
    "Rsrt",
    "Statem",
    "Terminus2",
    "TerminusSession",
    "check_harness",
    "get_harness",
    "load_workflow",
]

HARNESSES = HARNESS_NAMES
"""Every harness name a setting may use (defined in :mod:`rsr_async.config`)."""



@dataclass(frozen=True, kw_only=True)
class HarnessDeps:
    """What harnesses are handed by the runner that builds them."""

    grader: Grader | None = None
    """Runs hidden tests on a copy of a sandbox (RSRT's completion check)."""
    rsrt_wall_clock_s: float = DEFAULT_WALL_CLOCK_S
    """RSRT's episode wall clock (``rsr.rsrt_wall_clock_min`` x 60)."""
    workflow: Workflow | None = None
    """StateM's workflow; None: ``harness/workflows/default.toml``."""


def _terminus2(config: HarnessConfig, deps: HarnessDeps) -> Harness:
    return Terminus2(config)


def _rsrt(config: HarnessConfig, deps: HarnessDeps) -> Harness:
    if deps.grader is None:
        raise ConfigError("harness 'rsrt' needs a grader for its hidden tests (HarnessDeps.grader)")
    return Rsrt(config, grader=deps.grader, wall_clock_s=deps.rsrt_wall_clock_s)


def _statem(config: HarnessConfig, deps: HarnessDeps) -> Harness:
    return Statem(config, workflow=deps.workflow)


BUILT: Mapping[str, Callable[[HarnessConfig, HarnessDeps], Harness]] = MappingProxyType(
    {"terminus2": _terminus2, "statem": _statem, "rsrt": _rsrt}
)
"""The harnesses that exist, by name: the registry :func:`get_harness` builds from."""


def check_harness(name: str, *, where: str = "") -> None:
    """Raise unless ``name`` is a built harness; ``where`` (a file and key) prefixes the message.

    An unknown name is a :class:`~rsr_async.errors.ConfigError`; a planned one that is not
    built yet is a :class:`~rsr_async.errors.NotImplementedYetError`.
    """
    check_harness_name(name, where=where)
    if name not in BUILT:
        prefix = f"{where}: " if where else ""
        built = ", ".join(repr(n) for n in BUILT)
        raise NotImplementedYetError(
            f"{prefix}harness {name!r} is planned but not built yet; built harnesses: {built}"
        )


def get_harness(name: str, config: HarnessConfig, deps: HarnessDeps | None = None) -> Harness:
    """The harness called ``name``, configured with ``config`` and handed ``deps``."""
    check_harness(name)
    return BUILT[name](config, deps or HarnessDeps())
