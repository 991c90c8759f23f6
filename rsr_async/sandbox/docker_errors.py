"""Docker's errors, mapped in one place.

Every call into aiodocker (and the aiohttp client under it) in :mod:`rsr_async.sandbox`
runs inside ``with docker_errors(what, url=...)``, which turns what those libraries raise
into this package's sandbox errors (:mod:`rsr_async.errors`) by the two tables below, the
way httpx maps httpcore's errors in one context manager (``httpx/_transports/default.py``).
``what`` names the operation and its object (the episode, container or image); the
message adds what Docker said and what to do about it.

By the exception's type (:data:`BY_TYPE`; its most specific class listed there):

====================================  =================================================
``aiodocker.DockerError``             Docker answered: by its status (next table)
``aiohttp.ClientError``, ``OSError``  the connection failed: :class:`DockerUnavailableError`
``AssertionError``, ``RuntimeError``  the same, when raised inside aiodocker or aiohttp
                                      (their way of saying the connection vanished:
                                      ``assert transport is not None``, "Cannot write to
                                      closed transport"); our own stay bugs
``TimeoutError``                      no answer in time: :class:`SandboxError`
====================================  =================================================

By Docker's status (:data:`BY_STATUS`, else by its hundred):

===================  =================================================================
900                  aiodocker's "cannot connect": :class:`DockerUnavailableError`
404, 408, 409, 429   gone, timed out, conflict or busy, throttled: ``error``, transient
0                    an error inside a 200 stream (a build step failed): ``error``,
                     permanent with ``permanent_4xx``
other 4xx            our request is wrong (a bad reference, a config Docker refuses):
                     ``error``, permanent with ``permanent_4xx``
5xx, anything else   the daemon failed: ``error``, transient
===================  =================================================================

A refusal whose words name the host's trouble (:data:`HOST_TROUBLE`: a full disk, a
reset connection, an I/O timeout) is never permanent: another attempt may pass.

An answer the caller handles as a result, not an error (an image that is not there, a
container already gone, a subnet that overlaps another), is named at the call:
``expected={404}`` (or a predicate on status and message) makes such an answer raise
:class:`DockerAnswer`, which only that caller catches. What is never a Docker error at
all, closing a stream that already broke, is :func:`close_quietly`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import Any, Final

import aiodocker
import aiohttp
import anyio

from ..errors import ContainerError, DockerUnavailableError, SandboxError

__all__ = [
    "BY_STATUS",
    "BY_TYPE",
    "HOST_TROUBLE",
    "DockerAnswer",
    "Fate",
    "close_quietly",
    "docker_errors",
    "fate_of",
    "permanent_status",
]


class Fate(enum.Enum):
    """What a library error means for the engine."""

    ANSWERED = "Docker answered with an error status: see BY_STATUS"
    UNREACHABLE = "the daemon or the connection to it failed"
    LIBRARY_STATE = "the library's own check failed: the connection vanished under it"
    NO_ANSWER = "no answer in time"
    TRANSIENT = "Docker refused; another attempt may pass"
    REFUSED = "Docker refused our request; permanent where the caller says 4xx is"


BY_TYPE: Final[dict[type[BaseException], Fate]] = {
    aiodocker.DockerError: Fate.ANSWERED,
    aiohttp.ClientError: Fate.UNREACHABLE,
    OSError: Fate.UNREACHABLE,  # ConnectionError and friends: the socket, not the request
    TimeoutError: Fate.NO_ANSWER,  # an OSError too, but this entry is more specific
    AssertionError: Fate.LIBRARY_STATE,
    RuntimeError: Fate.LIBRARY_STATE,
}
"""Exception type → fate; an exception takes the entry of its most specific class
(aiohttp's ``ServerTimeoutError`` is a ``ClientError`` before it is a ``TimeoutError``)."""

BY_STATUS: Final[dict[int, Fate]] = {
    900: Fate.UNREACHABLE,  # aiodocker's code for "cannot connect"
    404: Fate.TRANSIENT,  # gone (the caller that expects it says expected={404})
    408: Fate.TRANSIENT,
    409: Fate.TRANSIENT,  # conflict: busy, already in progress, not running
    429: Fate.TRANSIENT,
    0: Fate.REFUSED,  # HTTP 200, then an error in the stream: the request's own outcome
}
"""Docker's status → fate; any other 4xx is REFUSED, anything else TRANSIENT."""

HOST_TROUBLE: Final = ("no space left on device", "connection reset", "i/o timeout")
"""Words of a refusal that say the host failed, not the request: never permanent."""


def permanent_status(status: int) -> bool:
    """Whether Docker's HTTP ``status`` means our request itself is wrong (a bad image
    reference, a config Docker refuses): another attempt sends the same request."""
    return status // 100 == 4 and _status_fate(status) is Fate.REFUSED


def _status_fate(status: int) -> Fate:
    return BY_STATUS.get(status, Fate.REFUSED if status // 100 == 4 else Fate.TRANSIENT)


def fate_of(exc: BaseException) -> Fate | None:
    """The fate of a library error (None: not one of the libraries' errors). A Docker
    answer is given by its status."""
    for cls in type(exc).__mro__:
        fate = BY_TYPE.get(cls)
        if fate is None:
            continue
        if fate is Fate.LIBRARY_STATE:
            return Fate.UNREACHABLE if _raised_in_client_library(exc) else None
        if fate is Fate.ANSWERED:
            assert isinstance(exc, aiodocker.DockerError)
            return _status_fate(exc.status)
        return fate
    return None


def _raised_in_client_library(exc: BaseException) -> bool:
    tb = exc.__traceback__
    last = ""
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        tb = tb.tb_next
    return "/aiodocker/" in last or "/aiohttp/" in last


class DockerAnswer(Exception):  # noqa: N818 - a result for one caller, not an error tree member
    """Docker answered what the caller listed in ``expected`` (``status``, Docker's
    ``message``): a result that caller handles right there (not there, already gone).

    Raised only to a caller that asked for it, so it never travels further; deliberately
    no :class:`~rsr_async.errors.RsrError`. ``error`` is the sandbox error the answer
    maps to otherwise, for a caller whose second look finds it unexpected after all."""

    def __init__(self, status: int, message: str, error: SandboxError) -> None:
        self.status = status
        self.message = message
        self.error = error
        super().__init__(f"Docker answered {status}: {message}")


Expected = Collection[int] | Callable[[int, str], bool]
"""Statuses, or a predicate on (status, message), that a caller takes as a result."""


@contextmanager
def docker_errors(
    what: str,
    *,
    url: str = "",
    permanent_4xx: bool = False,
    error: type[SandboxError] = ContainerError,
    expected: Expected = (),
) -> Iterator[None]:
    """Map aiodocker/aiohttp failures of ``what`` (on the Docker host ``url``) to the
    engine's sandbox errors by :data:`BY_TYPE` and :data:`BY_STATUS` (see the module doc).

    A refusal is an ``error`` (default :class:`ContainerError`). With ``permanent_4xx``
    (creating or starting a container, building or inspecting an image) a refusal of our
    request is the task's or the config's fault: marked permanent, never retried. 5xx,
    timeouts and connection failures stay transient. Answers matching ``expected`` raise
    :class:`DockerAnswer` instead. Exceptions of no library (ours, cancellation) pass.
    """
    try:
        yield
    except Exception as exc:
        fate = fate_of(exc)
        if fate is None:
            raise
        where = url or "its URL"
        if isinstance(exc, aiodocker.DockerError):
            message = str(exc.message)
            if fate is Fate.UNREACHABLE:
                raise DockerUnavailableError(
                    f"{what}: Docker daemon unreachable at {where}: {message}; "
                    "is dockerd running and the URL in sandbox.docker_urls right?"
                ) from exc
            said = f"{what}: {message}" if exc.status == 0 else f"{what}: Docker said {exc.status}: {message}"
            mapped = error(said)
            if (
                permanent_4xx
                and fate is Fate.REFUSED
                and not any(word in message.lower() for word in HOST_TROUBLE)
            ):
                mapped.as_permanent()
            else:
                mapped.retryable = True  # ImageBuildError defaults to False: this one may pass
            mapped.__cause__ = exc
            if _expects(expected, exc.status, message):
                raise DockerAnswer(exc.status, message, mapped) from exc
            raise mapped from exc
        if fate is Fate.UNREACHABLE:
            detail = str(exc) or type(exc).__name__
            if isinstance(exc, (AssertionError, RuntimeError)):
                said = f": {exc}" if str(exc) else ""
                detail = (f"the connection to Docker is gone (aiodocker raised "
                          f"{type(exc).__name__} on it{said})")
            raise DockerUnavailableError(
                f"{what}: Docker daemon unreachable at {where}: {detail}; "
                "is dockerd running and the URL in sandbox.docker_urls right?"
            ) from exc
        raise SandboxError(f"{what}: Docker did not answer in time") from exc


def _expects(expected: Expected, status: int, message: str) -> bool:
    if callable(expected):
        return bool(expected(status, message))
    return status in expected


async def close_quietly(stream: Any, *, what: str = "close a stream") -> None:
    """Close an attached exec stream (shielded, at most 5 s). A stream that already
    broke has nothing left to close: that Docker error is expected and dropped."""
    with anyio.move_on_after(5, shield=True):
        try:
            with docker_errors(what):
                await stream.close()
        except SandboxError:
            pass  # the daemon or the connection already closed it
