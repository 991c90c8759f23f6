"""The LLM side's two error tables (issue 32), driven by real failures on loopback: a
closed port, a server that hangs up, one that cuts its body short, one too slow, one
whose gzip is garbage. Each goes through the real aiohttp client, our transport (the
aiohttp -> httpx table) and the client (the httpx -> LLMError table), and the engine's
retry rule (``retryable``) must come out as the table says."""

from __future__ import annotations

import asyncio
import inspect
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import anyio
import httpx
import pytest
from aiohttp import web

from rsr_async.config import LLMConfig
from rsr_async.errors import (
    InfraError,
    LLMConnectionError,
    LLMError,
    LLMServerError,
    LLMTimeoutError,
)
from rsr_async.llm.client import SGLangClient
from rsr_async.llm.http_errors import (
    AIOHTTP_TO_HTTPX,
    HTTPX_TO_LLM,
    aiohttp_errors,
    llm_errors,
    mapped_type,
)
from rsr_async.llm.transport import AiohttpTransport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _raw_server(handler: Handler) -> tuple[asyncio.Server, str]:
    """A TCP server on loopback that answers with whatever bytes ``handler`` writes."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def _read_request(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":")[1]))


async def _hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _read_request(reader)
    writer.close()  # no status line: the server "disconnected"


async def _short_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _read_request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100\r\n\r\n{\"text\": ")
    await writer.drain()
    writer.close()  # 91 bytes short


@pytest.fixture
async def web_server() -> AsyncIterator[Callable[[web.Application], Awaitable[str]]]:
    runners: list[web.AppRunner] = []

    async def serve(app: web.Application) -> str:
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    yield serve
    for runner in runners:
        await runner.cleanup()


def _closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # bound, then closed: nothing listens


async def _transport_error(url: str, *, read_s: float = 5.0) -> BaseException:
    """What our transport raises for one POST to ``url`` (the model-call fast path; its
    whole wait is connect plus read time)."""
    transport = AiohttpTransport()
    try:
        with pytest.raises(httpx.HTTPError) as caught:
            await transport.post_bytes(url + "/generate", b"{}", {"content-type": "application/json"},
                                       connect_s=min(read_s, 5.0), read_s=read_s, total_s=None)
    finally:
        await transport.aclose()
    return caught.value


async def _client_error(url: str, config: LLMConfig | None = None) -> LLMError:
    """What one ``generate_once`` against ``url`` raises."""
    async with SGLangClient(url, config or LLMConfig()) as client:
        with pytest.raises(LLMError) as caught:
            await client.generate_once(text="hi")
    return caught.value


# -- aiohttp -> httpx, in the transport -------------------------------------------------


async def test_a_closed_port_is_a_connect_error_then_a_retried_connection_error() -> None:
    url = _closed_port()
    error = await _transport_error(url)
    assert type(error) is httpx.ConnectError
    assert isinstance(error.__cause__, aiohttp.ClientConnectorError)
    mapped = await _client_error(url)
    assert type(mapped) is LLMConnectionError and mapped.retryable
    assert url in str(mapped)


async def test_a_server_that_hangs_up_is_a_protocol_error_then_a_connection_error() -> None:
    server, url = await _raw_server(_hang_up)
    async with server:
        error = await _transport_error(url)
        assert type(error) is httpx.RemoteProtocolError
        assert isinstance(error.__cause__, aiohttp.ServerDisconnectedError)
        mapped = await _client_error(url)
    assert type(mapped) is LLMConnectionError and mapped.retryable


async def test_a_body_cut_short_is_a_protocol_error_then_a_connection_error() -> None:
    server, url = await _raw_server(_short_body)
    async with server:
        error = await _transport_error(url)
        assert type(error) is httpx.RemoteProtocolError
        assert isinstance(error.__cause__, aiohttp.ClientPayloadError)
        mapped = await _client_error(url)
    assert type(mapped) is LLMConnectionError and mapped.retryable


async def test_a_server_too_slow_is_a_read_timeout_then_a_retried_timeout(
    web_server: Callable[[web.Application], Awaitable[str]],
) -> None:
    release = anyio.Event()

    async def slow(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({"text": "late"})

    app = web.Application()
    app.router.add_post("/generate", slow)
    app.router.add_get("/health", slow)
    url = await web_server(app)
    try:
        error = await _transport_error(url, read_s=0.2)
        assert type(error) is httpx.ReadTimeout
        assert isinstance(error.__cause__, TimeoutError)
        mapped = await _client_error(url, LLMConfig(connect_timeout_s=0.2, read_timeout_s=0.2))
        assert type(mapped) is LLMTimeoutError and mapped.retryable
        # A deadline of the client's own (anyio), through the same table.
        async with SGLangClient(url, LLMConfig()) as client:
            with pytest.raises(LLMTimeoutError, match=r"/health: no reply within 0.2 s"):
                await client._get("/health", 0.2)
    finally:
        release.set()


async def test_a_reply_that_cannot_be_decoded_is_a_server_error(
    web_server: Callable[[web.Application], Awaitable[str]],
) -> None:
    async def garbled(request: web.Request) -> web.Response:
        return web.Response(body=b"not gzip at all", headers={"Content-Encoding": "gzip"})

    app = web.Application()
    app.router.add_get("/model_info", garbled)
    url = await web_server(app)
    async with SGLangClient(url, LLMConfig()) as client:
        with pytest.raises(LLMServerError) as caught:
            await client.model_info(timeout_s=5.0)
    assert isinstance(caught.value.__cause__, httpx.DecodingError)
    assert caught.value.retryable  # the server's fault: another attempt may read a good one


async def test_a_streamed_reply_maps_the_same() -> None:
    # The streaming path (httpx.AsyncClient over our transport's byte stream).
    server, url = await _raw_server(_short_body)
    async with server:
        async with SGLangClient(url, LLMConfig()) as client:
            with pytest.raises(LLMConnectionError) as caught:
                await client.generate_once(text="hi", stream=True)
    assert isinstance(caught.value.__cause__, httpx.RemoteProtocolError)


# -- the tables themselves ----------------------------------------------------------------


def _classes(module: object, base: type[BaseException]) -> list[type[BaseException]]:
    return [v for v in vars(module).values()
            if inspect.isclass(v) and issubclass(v, base)]


def test_every_aiohttp_client_error_becomes_an_httpx_transport_error() -> None:
    for cls in _classes(aiohttp, aiohttp.ClientError):
        to = mapped_type(AIOHTTP_TO_HTTPX, cls.__new__(cls))
        assert to is not None and issubclass(to, httpx.TransportError), cls
    # Most specific first: a connect timeout is no read timeout, though it is one too.
    assert mapped_type(AIOHTTP_TO_HTTPX, aiohttp.ConnectionTimeoutError()) is httpx.ConnectTimeout
    assert mapped_type(AIOHTTP_TO_HTTPX, aiohttp.SocketTimeoutError()) is httpx.ReadTimeout


def test_every_httpx_error_becomes_a_retried_llm_error_and_nothing_else_does() -> None:
    for cls in _classes(httpx, httpx.HTTPError):
        to = mapped_type(HTTPX_TO_LLM, cls.__new__(cls))
        assert to is not None and issubclass(to, InfraError) and to.retryable, cls
    for cls in _classes(httpx, httpx.TimeoutException):
        assert mapped_type(HTTPX_TO_LLM, cls.__new__(cls)) is LLMTimeoutError, cls
    # Not a library failure: a bug of ours, or httpx misused, stays what it is.
    with pytest.raises(httpx.InvalidURL), llm_errors("http://x"):
        raise httpx.InvalidURL("bad")
    with pytest.raises(ValueError), aiohttp_errors(None):
        raise ValueError("ours")
