"""A lean httpx transport over aiohttp: httpx stays the API, aiohttp moves the bytes.

httpx's default transport (httpcore) collapses at hundreds of concurrent requests on one
loop (measured: 55 req/s at 512 in flight where aiohttp served 1,200). ``httpx-aiohttp``
fixes most of it; this transport goes further for our traffic (small JSON bodies): the
reply body is read whole inside aiohttp and handed to httpx as bytes, so no per-chunk
async iterator sits between the two, and one ``ClientTimeout`` is reused per timeout
setting. Reply bodies are read in chunks up to ``max_reply_bytes``: a longer 200 reply is
cut off (the connection dropped, which makes SGLang abort) and raised as
:class:`ReplyTooLarge`, so one runaway reply cannot take the process's memory (a longer
error reply is cut to its first ``max_reply_bytes`` and keeps its status). A ``"total"``
key in the ``timeout`` extension (seconds) bounds the whole
request, which lets a caller enforce a deadline without a cancel scope. Streaming replies (SSE) are supported when the request carries the
``"stream": True`` extension. ``bench/llm.py`` measures it against raw aiohttp.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import httpx
import yarl

from .http_errors import aiohttp_errors

__all__ = ["AiohttpTransport", "ReplyTooLarge"]


class ReplyTooLarge(Exception):  # noqa: N818 - a signal to the client, not an error tree member
    """A reply body passed the transport's cap. Deliberately no ``httpx`` or
    :mod:`rsr_async.errors` type: the client turns it into an output-limit reply (the
    model's failure), and nothing may retry it as a connection error."""

    def __init__(self, url: str, limit: int, read: int) -> None:
        self.url = url
        self.limit = limit
        self.read = read
        super().__init__(f"{url}: reply passed llm.max_reply_bytes={limit} "
                         f"(at least {read} bytes; the rest dropped)")


async def _read_capped(response: aiohttp.ClientResponse, limit: int | None) -> bytes:
    """The whole body, or :class:`ReplyTooLarge` once it passes ``limit`` bytes; never
    holds more than ``limit`` plus one chunk."""
    length = response.content_length
    if limit is None or (length is not None and length <= limit):
        return await response.read()  # the common case: one read, as before
    url = str(response.url)
    if length is not None and response.status == 200:
        response.close()
        raise ReplyTooLarge(url, limit, length)
    chunks: list[bytes] = []
    total = 0
    async for chunk in response.content.iter_any():
        total += len(chunk)
        if total > limit:
            response.close()
            if response.status != 200:  # an error page: its status decides, its head is enough
                chunks.append(chunk[: len(chunk) - (total - limit)])
                return b"".join(chunks)
            raise ReplyTooLarge(url, limit, total)
        chunks.append(chunk)
    return b"".join(chunks)


class _Stream(httpx.AsyncByteStream):
    def __init__(
        self, response: aiohttp.ClientResponse, request: httpx.Request, limit: int | None
    ) -> None:
        self._response = response
        self._request = request
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        total = 0
        with aiohttp_errors(self._request):
            async for chunk in self._response.content.iter_any():
                total += len(chunk)
                if self._limit is not None and total > self._limit:
                    self._response.close()
                    raise ReplyTooLarge(str(self._request.url), self._limit, total)
                yield chunk

    async def aclose(self) -> None:
        # Closing before the end drops the connection, which makes SGLang abort.
        self._response.close()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """httpx transport on one ``aiohttp.ClientSession``.

    ``limit`` caps open connections (0: no cap; the router limits in-flight requests
    itself). ``keepalive_s`` should stay under the server's keep-alive (SGLang: 5 s) so
    an idle connection is never reused just as the server closes it.
    ``max_reply_bytes`` caps every reply body, streamed or not (None: no cap).
    """

    def __init__(
        self, *, limit: int = 0, keepalive_s: float = 4.0, max_reply_bytes: int | None = None
    ) -> None:
        self._limit = limit
        self._max_reply_bytes = max_reply_bytes
        self._keepalive_s = keepalive_s
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple[Any, Any], aiohttp.ClientTimeout] = {}

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self._limit, limit_per_host=0, keepalive_timeout=self._keepalive_s,
            enable_cleanup_closed=False,
        )
        self._session = aiohttp.ClientSession(
            connector=connector, auto_decompress=False, skip_auto_headers=("User-Agent",),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        return self._session

    def _timeout(self, request: httpx.Request) -> aiohttp.ClientTimeout:
        spec = request.extensions.get("timeout") or {}
        key = (spec.get("connect"), spec.get("read"))
        total = spec.get("total")  # our extension: the call's remaining deadline
        if total is not None:
            return aiohttp.ClientTimeout(total=total, sock_connect=key[0], sock_read=key[1])
        timeout = self._timeouts.get(key)
        if timeout is None:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=key[0], sock_read=key[1])
            self._timeouts[key] = timeout
        return timeout

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` through aiohttp; the body is read whole unless streaming."""
        session = self._session or self._open()
        try:
            body = request.content
        except httpx.RequestNotRead:  # httpx's signal that a streamed body is unread: no failure
            body = await request.aread()
        with aiohttp_errors(request):
            response = await session.request(
                request.method, str(request.url), data=body or None,
                headers=request.headers.multi_items(), allow_redirects=False,
                timeout=self._timeout(request),
            )
            if request.extensions.get("stream"):
                return httpx.Response(
                    response.status, headers=response.raw_headers,
                    stream=_Stream(response, request, self._max_reply_bytes), request=request,
                )
            try:
                content = await _read_capped(response, self._max_reply_bytes)
            finally:
                response.release()
        return httpx.Response(
            response.status, headers=response.raw_headers, content=content, request=request
        )

    async def post_bytes(
        self,
        url: str | yarl.URL,
        body: bytes,
        headers: Mapping[str, str],
        *,
        connect_s: float | None,
        read_s: float | None,
        total_s: float | None,
        max_bytes: int | None = None,
    ) -> tuple[int, bytes]:
        """POST ``body``; return (status, whole reply body). Errors as httpx exceptions;
        a body over ``max_bytes`` (default: the transport's cap) as :class:`ReplyTooLarge`.

        The model-call fast path: the same connection pool and error mapping as
        :meth:`handle_async_request`, without building ``httpx.Request`` and
        ``httpx.Response`` objects, which cost about a third of the client's CPU per
        call at high concurrency (profiled; see bench/llm.py).
        """
        session = self._session or self._open()
        # A non-streamed reply sends nothing until generation ends, so the gap between
        # bytes is the whole wait: ``read_s`` folds into the total timeout, sparing
        # aiohttp a read timer rescheduled on every chunk (measured: ~25 µs per call).
        limit = None if read_s is None else read_s + (connect_s or 0.0)
        if total_s is not None:
            limit = total_s if limit is None else min(limit, total_s)
        timeout = aiohttp.ClientTimeout(total=limit, sock_connect=connect_s)
        with aiohttp_errors(None):
            async with session.post(
                url, data=body, headers=headers, allow_redirects=False, timeout=timeout
            ) as response:
                cap = self._max_reply_bytes if max_bytes is None else max_bytes
                return response.status, await _read_capped(response, cap)

    async def aclose(self) -> None:
        """Close the session and its connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None
