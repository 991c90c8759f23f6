"""Agent harnesses: the shared Terminus protocol, Terminus 2, and (later) StateM and RSRT.

``get_harness(name, config)`` is the registry the episode runner uses. The protocol
pieces (reply parsing, templates, observations) are in :mod:`rsr_async.harness.protocol`;
test doubles (FakeShell, ReplayModel) in :mod:`rsr_async.harness.fakes`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from ..config import HarnessConfig
from ..errors import ConfigError, NotImplementedYetError
from .base import Checkpoint, EpisodeOutcome, Harness
from .terminus2 import Terminus2

__all__ = [
    "BUILT",
    "HARNESSES",
    "Checkpoint",
    "EpisodeOutcome",
    "Harness",
    "Terminus2",
    "check_harness",
    "get_harness",
]

HARNESSES = ("terminus2", "statem", "rsrt")
"""Every harness name the pipeline knows, built or planned."""

BUILT: Mapping[str, Callable[[HarnessConfig], Harness]] = MappingProxyType({Terminus2.name: Terminus2})
"""The harnesses that exist, by name: the registry :func:`get_harness` builds from.
StateM and RSRT are planned (in :data:`HARNESSES`) but not here yet."""


def check_harness(name: str, *, where: str = "") -> None:
    """Raise unless ``name`` is a built harness; ``where`` (a file and key) prefixes the message.

    An unknown name is a :class:`~rsr_async.errors.ConfigError`; a planned one that is not
    built yet is a :class:`~rsr_async.errors.NotImplementedYetError`.
    """
    if name in BUILT:
        return
    prefix = f"{where}: " if where else ""
    built = ", ".join(repr(n) for n in BUILT)
    if name in HARNESSES:
        raise NotImplementedYetError(
            f"{prefix}harness {name!r} is planned but not built yet; built harnesses: {built}"
        )
    raise ConfigError(
        f"{prefix}unknown harness {name!r}: expected one of {', '.join(HARNESSES)} (built: {built})"
    )


def get_harness(name: str, config: HarnessConfig) -> Harness:
    """The harness called ``name``, configured with ``config``."""
    check_harness(name)
    return BUILT[name](config)
