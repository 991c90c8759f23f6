"""The model servers' transport errors, mapped in one place, by two tables.

Our transport (:mod:`.transport`) moves bytes with aiohttp under httpx's API, so it maps
aiohttp's errors into httpx's (:func:`aiohttp_errors`, :data:`AIOHTTP_TO_HTTPX`), as
httpx's own transport maps httpcore's (``httpx/_transports/default.py``); any httpx
transport then looks the same to the client. The client maps httpx's errors, and the
deadlines it sets itself, into the engine's (:func:`llm_errors`, :data:`HTTPX_TO_LLM`).
Each table is looked up by the exception's most specific class listed in it.

``AIOHTTP_TO_HTTPX``:

==============================================  =======================================
``aiohttp.ConnectionTimeoutError``              ``httpx.ConnectTimeout``
``aiohttp.ServerTimeoutError``, ``TimeoutError``  ``httpx.ReadTimeout``
``aiohttp.ClientConnectorError``                ``httpx.ConnectError``
``aiohttp.ServerDisconnectedError``,            ``httpx.RemoteProtocolError``
``aiohttp.ClientPayloadError``
any other ``aiohttp.ClientError``               ``httpx.ReadError``
==============================================  =======================================

``HTTPX_TO_LLM`` (which the engine retries: :attr:`~rsr_async.errors.InfraError.retryable`):

=================================  ===============================  ========
``httpx.TimeoutException``         :class:`LLMTimeoutError`          retried
``TimeoutError`` (our deadline)    :class:`LLMTimeoutError`          retried
``httpx.TransportError``           :class:`LLMConnectionError`       retried
any other ``httpx.HTTPError``      :class:`LLMServerError`           retried
(a reply that cannot be decoded)
=================================  ===============================  ========

A reply's HTTP status is no exception here: the client reads it (``SGLangClient._check``:
429 and 5xx are :class:`LLMServerError`, other 4xx :class:`LLMRequestError`, never
retried). A reply too large for ``llm.max_reply_bytes`` is
:class:`~rsr_async.llm.transport.ReplyTooLarge`, in no table: an output-limit reply.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Final, TypeVar

import aiohttp
import httpx

from ..errors import LLMConnectionError, LLMError, LLMServerError, LLMTimeoutError

__all__ = ["AIOHTTP_TO_HTTPX", "HTTPX_TO_LLM", "aiohttp_errors", "llm_errors", "mapped_type"]

AIOHTTP_TO_HTTPX: Final[dict[type[BaseException], type[httpx.TransportError]]] = {
    aiohttp.ConnectionTimeoutError: httpx.ConnectTimeout,
    aiohttp.ServerTimeoutError: httpx.ReadTimeout,
    TimeoutError: httpx.ReadTimeout,  # aiohttp's total timeout
    aiohttp.ClientConnectorError: httpx.ConnectError,
    aiohttp.ServerDisconnectedError: httpx.RemoteProtocolError,
    aiohttp.ClientPayloadError: httpx.RemoteProtocolError,
    aiohttp.ClientError: httpx.ReadError,
}
"""aiohttp's errors → httpx's, in our transport."""

HTTPX_TO_LLM: Final[dict[type[BaseException], type[LLMError]]] = {
    httpx.TimeoutException: LLMTimeoutError,
    TimeoutError: LLMTimeoutError,  # a deadline of the client's own (anyio.fail_after)
    httpx.TransportError: LLMConnectionError,
    httpx.HTTPError: LLMServerError,  # DecodingError ...: the server's reply is unusable
}
"""httpx's errors (and the client's own deadlines) → the engine's, in the client."""

_T = TypeVar("_T")


def mapped_type(table: Mapping[type[BaseException], _T], exc: BaseException) -> _T | None:
    """The entry of ``exc``'s most specific class in ``table`` (None: not listed)."""
    for cls in type(exc).__mro__:
        if cls in table:
            return table[cls]
    return None


class aiohttp_errors:  # noqa: N801 - used as a context manager, like contextlib's
    """Raise aiohttp's errors (of ``request``) as httpx's, by :data:`AIOHTTP_TO_HTTPX`.

    A class, not a generator: it wraps every model call (a few µs less per call)."""

    __slots__ = ("_request",)

    def __init__(self, request: httpx.Request | None) -> None:
        self._request = request

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None or not isinstance(exc, Exception):
            return
        to = mapped_type(AIOHTTP_TO_HTTPX, exc)
        if to is not None:
            raise to(f"{type(exc).__name__}: {exc}", request=self._request) from exc


class llm_errors:  # noqa: N801 - used as a context manager, like contextlib's
    """Raise httpx's errors of a request to ``url`` as the engine's, by
    :data:`HTTPX_TO_LLM`; a ``TimeoutError`` (a deadline the caller set inside this
    block) says ``deadline``. Errors of no table (ours, cancellation) pass."""

    __slots__ = ("_deadline", "_url")

    def __init__(self, url: str, *, deadline: str = "passed its deadline") -> None:
        self._url = url
        self._deadline = deadline

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None or not isinstance(exc, Exception):
            return
        to = mapped_type(HTTPX_TO_LLM, exc)
        if to is not None:
            said = self._deadline if isinstance(exc, TimeoutError) else str(exc)
            raise to(f"{self._url}: {said}") from exc
