"""What travels between the head and its remote runners: batches of msgpack bytes.

One Ray call costs the head about 0.9 ms of CPU on this project's 2-core machine
(measured: 560 single actor calls/s), so one call per job would cap a head at a few
hundred jobs per second. The head therefore sends jobs in batches
(:class:`Assignment` lists, one ``submit`` call) and collects what finished in batches
(one long ``poll`` call returns every :data:`Outcome` ready since the last one). Both
are encoded here, once, with msgspec, so a batch crosses Ray as one ``bytes`` object
(no pickling of records, and the same bytes whatever carries them).

An outcome says how the attempt ended on the remote side, in the terms the engine
needs to record it exactly as a local attempt: :class:`Finished` (the runner returned a
result), :class:`Raised` (the runner raised; an infrastructure error keeps its class,
``retryable`` and ``permanent``), :class:`Ended` (cancelled by the head, or the remote
backstop deadline passed, with the partial trajectory last checkpointed).
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import msgspec

from ..engine import Job
from ..schema import AnyResult, Trajectory

__all__ = [
    "Assignment",
    "Ended",
    "Finished",
    "Outcome",
    "PollReply",
    "Raised",
    "decode_assignments",
    "decode_outcomes",
    "decode_poll",
    "encode_assignments",
    "encode_outcomes",
    "encode_poll",
]


class Assignment(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One attempt of one job, handed to a remote runner."""

    job: Job
    attempt: int
    """The engine's infrastructure-retry index (0 for the first attempt)."""
    time_left_s: float
    """Seconds of the job's deadline left when the head sent it (``inf``: none). The
    head enforces the deadline; the remote side keeps a backstop a little later."""


class Finished(msgspec.Struct, frozen=True, kw_only=True, tag="finished"):
    key: str
    result: AnyResult
    steps: int
    """Agent steps the attempt reported (the head's progress counters replay them)."""


class Raised(msgspec.Struct, frozen=True, kw_only=True, tag="raised"):
    key: str
    error_type: str
    """The exception's class name; an :mod:`rsr_async.errors` class is rebuilt as itself."""
    message: str
    retryable: bool = False
    permanent: bool = False
    infra: bool = False
    """An :class:`~rsr_async.errors.InfraError` (else a bug, with the remote traceback)."""
    steps: int = 0


class Ended(msgspec.Struct, frozen=True, kw_only=True, tag="ended"):
    key: str
    reason: Literal["cancelled", "timeout"]
    partial: Trajectory | None = None
    steps: int = 0


Outcome: TypeAlias = Finished | Raised | Ended


class PollReply(msgspec.Struct, frozen=True, kw_only=True):
    """What one ``poll`` returns: the finished outcomes and the runner's live numbers."""

    outcomes: list[Outcome]
    running: int = 0
    live_sandboxes: int = 0
    peak_sandboxes: int = 0


_encoder = msgspec.msgpack.Encoder()
_assignments = msgspec.msgpack.Decoder(list[Assignment])
_outcomes = msgspec.msgpack.Decoder(list[Outcome])
_poll = msgspec.msgpack.Decoder(PollReply)


def encode_assignments(batch: list[Assignment]) -> bytes:
    return _encoder.encode(batch)


def decode_assignments(data: bytes) -> list[Assignment]:
    return _assignments.decode(data)


def encode_outcomes(batch: list[Outcome]) -> bytes:
    return _encoder.encode(batch)


def decode_outcomes(data: bytes) -> list[Outcome]:
    return _outcomes.decode(data)


def encode_poll(reply: PollReply) -> bytes:
    return _encoder.encode(reply)


def decode_poll(data: bytes) -> PollReply:
    return _poll.decode(data)
