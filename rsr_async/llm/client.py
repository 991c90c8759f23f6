"""One SGLang server over HTTP: native ``/generate`` and OpenAI ``/v1/chat/completions``.

:class:`SGLangClient` speaks both APIs, maps every library error to
:mod:`rsr_async.errors` at this boundary, and retries what may succeed on a second try
(connection errors, timeouts, 5xx, 429, an error inside a 200 stream) with jittered
exponential backoff, never other 4xx. A prompt that does not fit the context window is
raised as :class:`~rsr_async.errors.ContextLengthError` so a harness can summarise.

A cancelled call closes its connection (SGLang aborts a request whose connection
closes, and sglang-router passes the close on to its worker) and also posts
``/abort_request`` with the call's ``rid`` while that endpoint exists. sglang-router
answers it 404 (recorded with sglang-router 0.3.2: ``tests/llm/test_sglang_router.py``):
the first 404 marks the endpoint unavailable for this URL, it is not posted again, and
:meth:`SGLangClient.abort_statistics` says which path each abort took, so no abort is
reported that did not happen.

A reply body longer than ``llm.max_reply_bytes`` is cut off at the transport (memory
stays bounded; the request is aborted) and comes back as an output-limit reply: empty
text, finish reason ``length``, which a harness answers as Terminus does a reply cut at
``max_new_tokens`` (it tells the model and asks again). It is the model's failure for
that call, never retried as infrastructure. Replies over ``_DECODE_IN_THREAD_BYTES``
are parsed on a worker thread, so a large one does not stall the event loop.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

import anyio
import httpx
import msgspec
import yarl

from ..config import LLMConfig
from ..errors import (
    ContextLengthError,
    LLMConnectionError,
    LLMError,
    LLMRequestError,
    LLMServerError,
    LLMTimeoutError,
    NoHealthyServerError,
)
from ..schema import Usage
from .base import ChatMessage, Completion
from .http_errors import llm_errors
from .prompt import ChatTemplate
from .transport import AiohttpTransport, ReplyTooLarge

__all__ = [
    "MIN_SGLANG_VERSION", "SIMULATOR_VERSION", "AbortStats", "GenerateResult", "SGLangClient",
    "ServerIdentity", "make_http_client", "with_retries",
]

T = TypeVar("T")
FinishReason = Literal["stop", "length", "abort"]
RETRYABLE = (LLMConnectionError, LLMTimeoutError, LLMServerError, NoHealthyServerError)
_CONTEXT_ERROR = re.compile(
    r"context length|context window|maximum context|longer than the model|"
    r"exceeds the maximum|input length|too many tokens",
    re.IGNORECASE,
)
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.decode
_log = logging.getLogger(__name__)
_DECODE_IN_THREAD_BYTES = 256 * 1024
"""Replies longer than this are decoded on a worker thread: msgspec decodes ~1 GB/s of
JSON, so below it a decode costs well under a millisecond on the loop; above it the
thread hop (~50 µs) is the cheaper side."""


SIMULATOR_VERSION = "rsr_async-sim"
"""``version`` in the simulator's ``/server_info``: how a client tells it (which always
answers with the scripted stand-in, whatever model name it reports) from a real server."""

MIN_SGLANG_VERSION = (0, 5, 0)
"""The oldest SGLang this client is meant for (the ``[sglang]`` extra's ``sglang>=0.5``);
the shapes it parses are recorded from 0.5.23 (``tests/llm/fixtures/sglang_shapes.json``)."""

ServerKind = Literal["sglang", "sglang-router", "simulator", "openai-compatible", "unknown"]


class ServerIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """What answers at a URL (:meth:`SGLangClient.identify`)."""

    kind: ServerKind
    version: str = ""
    """SGLang's ``version`` from ``/server_info``; empty when it reports none."""
    owned_by: str = ""
    """``owned_by`` of the first ``/v1/models`` card (``vllm``, ``sglang`` ...)."""


def _version_tuple(version: str) -> tuple[int, ...] | None:
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", version)
    if match is None:
        return None
    return tuple(int(part or 0) for part in match.groups())


class GenerateResult(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What ``/generate`` returned."""

    text: str
    finish_reason: FinishReason
    usage: Usage
    output_ids: tuple[int, ...] | None = None
    rid: str = ""


AbortEndpoint = Literal["untried", "available", "unavailable"]
_NO_ROUTE = (404, 405)
"""Statuses that mean "no such endpoint here" (sglang-router: 404)."""


class AbortStats(msgspec.Struct, frozen=True, kw_only=True):
    """How this client's aborted calls were aborted."""

    by_close: int = 0
    """Calls abandoned mid-request whose connection was closed (every one is: SGLang and
    sglang-router abort the request upstream when it closes)."""
    by_endpoint: int = 0
    """Of those, the ones ``/abort_request`` also answered 200 for."""
    endpoint: AbortEndpoint = "untried"
    """``/abort_request`` at this URL: not tried yet, answered 200, or answered 404/405
    (sglang-router), after which it is no longer posted."""


def _timeout(config: LLMConfig) -> httpx.Timeout:
    return httpx.Timeout(
        connect=config.connect_timeout_s, read=config.read_timeout_s,
        write=config.read_timeout_s, pool=config.connect_timeout_s,
    )


def make_http_client(
    config: LLMConfig, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` on the aiohttp transport with the config's timeouts."""
    return httpx.AsyncClient(
        transport=transport or AiohttpTransport(max_reply_bytes=config.max_reply_bytes),
        timeout=_timeout(config), trust_env=False,
    )


async def with_retries(
    attempt: Callable[[int, float], Awaitable[T]],
    config: LLMConfig,
    *,
    what: str,
    on_failure: Callable[[LLMError], None] | None = None,
) -> T:
    """Run ``attempt(n, deadline)`` until it succeeds, retrying retryable errors.

    ``deadline`` (``time.monotonic()`` clock) is ``config.total_timeout_s`` from now and
    covers every attempt and backoff; each attempt must respect it (the client hands it
    to the transport as a total timeout, which costs less per call than a cancel scope).
    """
    deadline = time.monotonic() + config.total_timeout_s
    for n in range(config.max_retries + 1):
        try:
            return await attempt(n, deadline)
        except RETRYABLE as exc:
            if on_failure is not None:
                on_failure(exc)
            left = deadline - time.monotonic()
            if left <= 0:
                raise LLMTimeoutError(
                    f"{what}: no reply within llm.total_timeout_s={config.total_timeout_s} "
                    f"(retries included; last error: {exc}); raise it or check the server"
                ) from exc
            if n >= config.max_retries:
                raise
            delay = min(30.0, config.backoff_s * 2**n) * random.uniform(0.5, 1.5)
            await anyio.sleep(min(delay, left))
    raise AssertionError("unreachable")  # pragma: no cover


def _finish(value: Any) -> FinishReason:
    if isinstance(value, dict):
        value = value.get("type")
    if value in ("length", "abort"):
        return value  # type: ignore[no-any-return]
    return "stop"


class SGLangClient:
    """Client for one SGLang (or simulator, or sglang-router) URL.

    Model calls are ``httpx.Request`` objects sent straight to an httpx transport
    (``transport``; by default our aiohttp one): SGLang needs none of
    ``httpx.AsyncClient``'s per-request layers (auth, redirects, cookies, event hooks),
    and skipping them is most of the gap to raw aiohttp at 512 concurrent calls. Control
    endpoints (health, model info, abort) go through the ``httpx.AsyncClient`` on the
    same transport. Pass ``http`` (and its ``transport``) to share one connection pool
    between many servers (the router does); otherwise ``async with`` opens and closes
    its own.
    """

    def __init__(
        self,
        url: str,
        config: LLMConfig | None = None,
        *,
        http: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        template: ChatTemplate | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.config = config or LLMConfig()
        self.template = template or ChatTemplate(self.config.chat_template)
        self._http = http
        self._transport = transport
        self._owns_http = http is None
        self._generate_url = self.url + "/generate"
        self._chat_url = self.url + "/v1/chat/completions"
        self._urls = {u: httpx.URL(u) for u in (self._generate_url, self._chat_url)}
        self._yarl = {u: yarl.URL(u) for u in (self._generate_url, self._chat_url)}
        self._headers = {"content-type": "application/json"}
        self._request_headers = httpx.Headers(self._headers)
        self._extensions = {"timeout": _timeout(self.config).as_dict()}
        self._abort_endpoint: AbortEndpoint = "untried"
        self._aborts_by_close = 0
        self._aborts_by_endpoint = 0

    async def __aenter__(self) -> SGLangClient:
        if self._http is None:
            self._transport = self._transport or AiohttpTransport(
                max_reply_bytes=self.config.max_reply_bytes)
            self._http = make_http_client(self.config, self._transport)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._owns_http and self._http is not None:
            await self._http.aclose()
            self._http = None

    @property
    def http(self) -> httpx.AsyncClient:
        """The underlying httpx client (open the SGLangClient first)."""
        if self._http is None:
            raise LLMConnectionError(f"{self.url}: client not open; use `async with`")
        return self._http

    # -- one attempt ---------------------------------------------------------------------

    async def _send(self, url: str, body: bytes, deadline: float | None) -> tuple[int, bytes]:
        transport = self._transport
        if isinstance(transport, AiohttpTransport):
            # Fast path (see AiohttpTransport.post_bytes); the deadline rides along as
            # aiohttp's total timeout, so no cancel scope is needed per call.
            return await transport.post_bytes(
                self._yarl[url], body, self._headers, connect_s=self.config.connect_timeout_s,
                read_s=self.config.read_timeout_s,
                total_s=None if deadline is None else max(0.001, deadline - time.monotonic()),
                max_bytes=self.config.max_reply_bytes,
            )
        request = httpx.Request(
            "POST", self._urls[url], content=body, headers=self._request_headers,
            extensions=self._extensions,
        )
        if deadline is None:
            response = await self.http.send(request)
        else:  # the caller's llm_errors says "total deadline passed"
            with anyio.fail_after(max(0.0, deadline - time.monotonic())):
                response = await self.http.send(request)
        if len(response.content) > self.config.max_reply_bytes:  # another transport: late, but the same rule
            raise ReplyTooLarge(str(request.url), self.config.max_reply_bytes, len(response.content))
        return response.status_code, response.content

    async def _post(
        self, url: str, payload: dict[str, Any], rid: str, deadline: float | None = None
    ) -> Any:
        try:
            with llm_errors(url, deadline="total deadline passed"):
                status, content = await self._send(url, _encode(payload), deadline)
        except (LLMConnectionError, LLMTimeoutError):
            raise  # no reply: the connection failed or timed out, nothing runs upstream
        except BaseException:  # ReplyTooLarge too: its caller turns it into a reply
            if rid:
                await self._abort_quietly(rid)
            raise
        if status == 200 and len(content) > _DECODE_IN_THREAD_BYTES:
            return await anyio.to_thread.run_sync(self._check, url, status, content)
        return self._check(url, status, content)

    def _output_limit(self, exc: ReplyTooLarge, start: float) -> Usage:
        _log.warning("%s; answered as an output-limit reply (finish reason 'length')", exc)
        return Usage(latency_s=time.perf_counter() - start, requests=1)

    def _check(self, url: str, status: int, content: bytes) -> Any:
        if status == 200:
            try:
                data = _decode(content)
            except msgspec.DecodeError as exc:
                raise LLMServerError(f"{url}: reply is not JSON: {content[:200]!r}") from exc
            if isinstance(data, dict) and data.get("error"):
                raise LLMServerError(f"{url}: error in a 200 reply: {data['error']}", status=200)
            return data
        text = content[:2000].decode("utf-8", "replace")
        if status == 429 or status >= 500:
            raise LLMServerError(f"{url}: HTTP {status}: {text}", status=status)
        if _CONTEXT_ERROR.search(text):
            raise ContextLengthError(f"{url}: the prompt does not fit: {text}", status=status)
        if status in _NO_ROUTE and url.endswith("/generate"):
            raise LLMRequestError(
                f"{url}: HTTP {status}: no /generate here, so not an SGLang server; for an "
                'OpenAI-compatible server (vLLM ...) set llm.api = "openai"', status=status)
        raise LLMRequestError(f"{url}: HTTP {status} (not retried): {text}", status=status)

    async def _abort_quietly(self, rid: str) -> None:
        # The connection is already closed (cancellation or the reply cap dropped it),
        # which aborts in SGLang and through sglang-router. The explicit abort covers
        # proxies that keep the upstream request alive, while the URL has the endpoint.
        # Bounded, and never masks the cancellation that brought us here.
        self._aborts_by_close += 1
        if self._abort_endpoint == "unavailable":
            return
        http = self.http
        with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
            try:
                with llm_errors(self.url + "/abort_request"):
                    response = await http.post(
                        self.url + "/abort_request", content=_encode({"rid": rid}),
                        headers=self._headers)
            except LLMError:
                return  # best effort: the closed connection already aborts
            self._note_abort_reply(response.status_code)

    def _note_abort_reply(self, status: int) -> bool:
        """Record what ``/abort_request`` answered; True when it took the abort."""
        if status == 200:
            self._abort_endpoint = "available"
            self._aborts_by_endpoint += 1
            return True
        if status in _NO_ROUTE and self._abort_endpoint != "unavailable":
            self._abort_endpoint = "unavailable"
            _log.warning(
                "%s/abort_request answered %d (sglang-router has no such route): aborts at "
                "this URL rely on closing the connection, which the router passes upstream",
                self.url, status)
        return False

    def abort_statistics(self) -> AbortStats:
        """Which path this client's aborts took (see :class:`AbortStats`)."""
        return AbortStats(by_close=self._aborts_by_close, by_endpoint=self._aborts_by_endpoint,
                          endpoint=self._abort_endpoint)

    def _sampling(
        self, max_new_tokens: int | None, temperature: float | None, top_p: float | None,
        stop: Sequence[str] | None, seed: int | None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"max_new_tokens": max_new_tokens or self.config.max_new_tokens}
        temperature = self.config.temperature if temperature is None else temperature
        top_p = self.config.top_p if top_p is None else top_p
        if temperature is not None:
            params["temperature"] = temperature
        if top_p is not None:
            params["top_p"] = top_p
        if stop:
            params["stop"] = list(stop)
        if seed is not None:
            params["sampling_seed"] = seed
        return params

    async def generate_once(
        self,
        *,
        text: str | None = None,
        input_ids: Sequence[int] | None = None,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
        rid: str | None = None,
        stream: bool = False,
        deadline: float | None = None,
    ) -> GenerateResult:
        """One ``POST /generate`` attempt (no retries); ``deadline`` on the monotonic clock."""
        if (text is None) == (input_ids is None):
            raise LLMRequestError("generate: pass exactly one of text and input_ids")
        rid = rid or uuid.uuid4().hex
        payload: dict[str, Any] = {
            "rid": rid,
            "sampling_params": self._sampling(max_new_tokens, temperature, top_p, stop, seed),
        }
        if text is not None:
            payload["text"] = text
        else:
            payload["input_ids"] = list(input_ids or ())
        start = time.perf_counter()
        try:
            if stream:
                payload["stream"] = True
                if deadline is None:
                    data = await self._stream_generate(payload, rid)
                else:
                    with llm_errors(self._generate_url, deadline="stream passed its deadline"), \
                            anyio.fail_after(max(0.0, deadline - time.monotonic())):
                        data = await self._stream_generate(payload, rid)
            else:
                data = await self._post(self._generate_url, payload, rid, deadline)
        except ReplyTooLarge as exc:
            return GenerateResult(text="", finish_reason="length",
                                  usage=self._output_limit(exc, start), rid=rid)
        if isinstance(data, list):  # a batch reply to a single prompt
            data = data[0]
        meta = data.get("meta_info") or {}
        usage = Usage(
            prompt_tokens=int(meta.get("prompt_tokens") or 0),
            completion_tokens=int(meta.get("completion_tokens") or 0),
            cached_tokens=int(meta.get("cached_tokens") or 0),
            latency_s=time.perf_counter() - start,
            requests=1,
        )
        ids = data.get("output_ids")
        return GenerateResult(
            text=data.get("text") or "",
            finish_reason=_finish(meta.get("finish_reason")),
            usage=usage,
            output_ids=tuple(ids) if ids is not None else None,
            rid=rid,
        )

    async def _stream_generate(self, payload: dict[str, Any], rid: str) -> Any:
        request = self.http.build_request(
            "POST", self._generate_url, content=_encode(payload), headers=self._headers,
            extensions={"stream": True},
        )
        last: Any = None
        try:
            with llm_errors(self._generate_url):
                response = await self.http.send(request, stream=True)
                try:
                    if response.status_code != 200:
                        await response.aread()
                        self._check(self._generate_url, response.status_code, response.content)
                    async for event in _sse_events(response.aiter_lines()):
                        if isinstance(event, dict) and event.get("error"):
                            raise LLMServerError(
                                f"{self._generate_url}: error inside a 200 stream: {event['error']}",
                                status=200,
                            )
                        last = event
                finally:
                    await response.aclose()
        except (LLMConnectionError, LLMTimeoutError):
            raise  # no reply: the connection failed or timed out, nothing runs upstream
        except BaseException:
            await self._abort_quietly(rid)
            raise
        if last is None:
            raise LLMServerError(f"{self._generate_url}: the stream ended without a reply")
        return last

    async def chat_completions_once(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        rid: str | None = None,
        deadline: float | None = None,
    ) -> Completion:
        """One ``POST /v1/chat/completions`` attempt (no retries)."""
        payload: dict[str, Any] = {
            "model": self.config.model or "default",  # SGLang serves one model; the name is informational
            "messages": list(messages),
            "max_tokens": max_tokens or self.config.max_new_tokens,
        }
        temperature = self.config.temperature if temperature is None else temperature
        top_p = self.config.top_p if top_p is None else top_p
        if temperature is not None:
            payload["temperature"] = temperature
        if top_p is not None:
            payload["top_p"] = top_p
        if seed is not None:
            payload["seed"] = seed
        if rid:
            payload["rid"] = rid
        start = time.perf_counter()
        try:
            data = await self._post(self._chat_url, payload, rid or "", deadline)
        except ReplyTooLarge as exc:
            return Completion(text="", finish_reason="length",
                              usage=self._output_limit(exc, start), server=self.url)
        try:
            choice = data["choices"][0]
            usage = data.get("usage") or {}
            details = usage.get("prompt_tokens_details") or {}
            return Completion(
                text=choice["message"].get("content") or "",
                finish_reason=_finish(choice.get("finish_reason")),
                usage=Usage(
                    prompt_tokens=int(usage.get("prompt_tokens") or 0),
                    completion_tokens=int(usage.get("completion_tokens") or 0),
                    # Absent unless the server runs with --enable-cache-report and > 0.
                    cached_tokens=int(details.get("cached_tokens") or 0),
                    latency_s=time.perf_counter() - start,
                    requests=1,
                ),
                server=self.url,
            )
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise LLMServerError(f"{self._chat_url}: unexpected reply shape: {data!r:.300}") from exc

    async def chat_once(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        rid: str | None = None,
        deadline: float | None = None,
    ) -> Completion:
        """One attempt in the configured API (``llm.api``)."""
        if self.config.api == "openai":
            return await self.chat_completions_once(
                messages, max_tokens=max_tokens, temperature=temperature, seed=seed, rid=rid,
                deadline=deadline,
            )
        result = await self.generate_once(
            text=self.template.render(messages), max_new_tokens=max_tokens,
            temperature=temperature, stop=self.template.stop, seed=seed, rid=rid,
            deadline=deadline,
        )
        return Completion(
            text=result.text, finish_reason=result.finish_reason, usage=result.usage,
            server=self.url,
        )

    # -- with retries --------------------------------------------------------------------

    async def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        affinity: str = "",
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> Completion:
        """A chat call with retries (one server; ``affinity`` is accepted and unused)."""
        rid = os.urandom(8).hex()
        return await with_retries(
            lambda n, deadline: self.chat_once(
                messages, max_tokens=max_tokens, temperature=temperature, seed=seed,
                rid=f"{rid}-{n}", deadline=deadline,
            ),
            self.config,
            what=self.url,
        )

    async def generate(self, **kwargs: Any) -> GenerateResult:
        """``/generate`` with retries; keyword arguments as :meth:`generate_once`."""
        rid = kwargs.pop("rid", None) or uuid.uuid4().hex
        return await with_retries(
            lambda n, deadline: self.generate_once(
                rid=f"{rid}-{n}" if n else rid, deadline=deadline, **kwargs
            ),
            self.config, what=self._generate_url,
        )

    # -- server endpoints ----------------------------------------------------------------

    async def _get(self, path: str, timeout_s: float) -> Any:
        url = self.url + path
        try:
            with llm_errors(url, deadline=f"no reply within {timeout_s} s"), anyio.fail_after(timeout_s):
                response = await self.http.get(url)
        except ReplyTooLarge as exc:  # a control endpoint: the server's fault, not the model's
            raise LLMServerError(str(exc)) from exc
        if response.status_code != 200:
            self._check(url, response.status_code, response.content)
        return response.content

    async def health(self, *, timeout_s: float = 5.0) -> bool:
        """True when ``/health`` answers 200 within ``timeout_s``."""
        try:
            await self._get("/health", timeout_s)
        except LLMError:
            return False
        return True

    async def _get_first(self, paths: Sequence[str], timeout_s: float) -> Any:
        """JSON of the first of ``paths`` that exists (404/405 means: try the next)."""
        last: LLMError | None = None
        for path in paths:
            try:
                return _decode(await self._get(path, timeout_s))
            except LLMRequestError as exc:
                if exc.status not in _NO_ROUTE:
                    raise
                last = exc
            except msgspec.DecodeError as exc:
                raise LLMServerError(f"{self.url}{path}: reply is not JSON") from exc
        assert last is not None
        raise last

    async def model_info(self, *, timeout_s: float = 10.0) -> dict[str, Any]:
        """``/model_info`` (SGLang 0.5.23; ``/get_model_info`` before, and on routers):
        ``model_path``, ``served_model_name`` ... but no context length."""
        data = await self._get_first(("/model_info", "/get_model_info"), timeout_s)
        return data if isinstance(data, dict) else {}

    async def server_info(self, *, timeout_s: float = 10.0) -> dict[str, Any]:
        """``/server_info`` (``/get_server_info`` before 0.5.23, and on sglang-router):
        the server arguments (``context_length`` is null unless it was passed), the
        scheduler's ``max_total_num_tokens`` (the KV pool, not a window) and
        ``max_req_input_len``, and ``version``."""
        data = await self._get_first(("/server_info", "/get_server_info"), timeout_s)
        return data if isinstance(data, dict) else {}

    async def models(self, *, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """The model cards of ``/v1/models`` (SGLang and vLLM: ``max_model_len`` each)."""
        data = await self._get_first(("/v1/models",), timeout_s)
        cards = data.get("data") if isinstance(data, dict) else None
        return [c for c in cards if isinstance(c, dict)] if isinstance(cards, list) else []

    async def context_length(self, *, timeout_s: float = 10.0) -> int | None:
        """The server's context window, if it reports one (a router's workers are not
        asked here: see :meth:`workers`).

        Where it is, recorded from SGLang 0.5.23: ``/v1/models``' ``max_model_len`` (the
        model's window, always set); ``/server_info``'s ``context_length`` only when the
        server was launched with ``--context-length``; ``/model_info`` has none (older
        servers had it there). ``max_req_input_len`` bounds the prompt, so it is the
        last resort; ``max_total_num_tokens`` is the KV pool's size, never a window."""
        try:
            for card in await self.models(timeout_s=timeout_s):
                value = card.get("max_model_len")
                if not card.get("parent") and isinstance(value, int) and value > 0:
                    return value  # the base model (a LoRA adapter's card has a parent)
        except LLMError:
            pass
        for getter, keys in ((self.model_info, ("context_length",)),
                             (self.server_info, ("context_length", "max_context_length",
                                                 "max_req_input_len"))):
            try:
                info = await getter(timeout_s=timeout_s)
            except LLMError:
                continue
            for key in keys:
                value = info.get(key)
                if isinstance(value, int) and value > 0:
                    return value
        return None

    async def identify(self, *, timeout_s: float = 10.0) -> ServerIdentity:
        """Which kind of server answers here, by its own replies.

        SGLang answers ``/server_info`` (or ``/get_server_info``) with its ``version``;
        sglang-router answers ``/get_server_info`` with ``router_manager``; the simulator
        with :data:`SIMULATOR_VERSION`; an OpenAI-compatible server (vLLM ...) has none of
        them but lists ``/v1/models``; a URL with none of these routes is ``unknown``.
        Raises :class:`~rsr_async.errors.LLMRequestError` for an SGLang older than
        :data:`MIN_SGLANG_VERSION`."""
        try:
            info: dict[str, Any] | None = await self.server_info(timeout_s=timeout_s)
        except LLMRequestError:
            info = None
        if info is not None:
            if "router_manager" in info:
                return ServerIdentity(kind="sglang-router")
            version = info.get("version")
            if version == SIMULATOR_VERSION:
                return ServerIdentity(kind="simulator", version=version)
            if isinstance(version, str) and version:
                parsed = _version_tuple(version)
                if parsed is not None and parsed < MIN_SGLANG_VERSION:
                    least = ".".join(map(str, MIN_SGLANG_VERSION))
                    raise LLMRequestError(
                        f"{self.url}: SGLang {version} is too old: this client needs SGLang "
                        f">= {least} (pip install 'sglang>={least}' on the server host)")
                return ServerIdentity(kind="sglang", version=version)
            if "model_path" in info:
                return ServerIdentity(kind="sglang")  # SGLang that reports no version
        try:
            cards = await self.models(timeout_s=timeout_s)
        except LLMRequestError:
            return ServerIdentity(kind="unknown")  # none of the three routes: say so, not guess
        owned_by = next((str(c.get("owned_by") or "") for c in cards), "")
        return ServerIdentity(kind="openai-compatible", owned_by=owned_by)

    async def workers(self, *, timeout_s: float = 10.0) -> tuple[str, ...]:
        """The worker URLs behind this URL when it is an sglang-router, else ``()``.

        sglang-router 0.3.2 lists them at ``GET /workers`` (``{"workers": [{"url": ...}]}``);
        older routers at ``GET /list_workers`` (``{"urls": [...]}``). A model server
        answers both 404."""
        for path, key in (("/workers", "workers"), ("/list_workers", "urls")):
            try:
                data = _decode(await self._get(path, timeout_s))
            except (LLMError, msgspec.DecodeError):
                continue
            entries = data.get(key) if isinstance(data, dict) else None
            if not isinstance(entries, list):
                continue
            urls = [e.get("url") if isinstance(e, dict) else e for e in entries]
            found = tuple(u.rstrip("/") for u in urls if isinstance(u, str) and u)
            if found:
                return found
        return ()

    async def abort(self, rid: str, *, timeout_s: float = 5.0) -> None:
        """``POST /abort_request`` for ``rid``; raises unless the server took it.

        A URL without the endpoint (sglang-router answers 404) raises
        :class:`~rsr_async.errors.LLMRequestError`: there, cancel the call instead
        (closing its connection aborts it upstream)."""
        url = self.url + "/abort_request"
        with llm_errors(url, deadline=f"no reply within {timeout_s} s"), anyio.fail_after(timeout_s):
            response = await self.http.post(url, content=_encode({"rid": rid}),
                                            headers=self._headers)
        if self._note_abort_reply(response.status_code):
            return
        if response.status_code in _NO_ROUTE:
            raise LLMRequestError(
                f"{url}: HTTP {response.status_code}: no abort endpoint here (sglang-router "
                f"has none); rid {rid} was not aborted: cancel the call instead, closing its "
                "connection aborts it upstream", status=response.status_code)
        self._check(url, response.status_code, response.content)  # raises: not 200
        raise AssertionError("unreachable")  # pragma: no cover

    async def flush_cache(self, *, timeout_s: float = 10.0) -> None:
        """``POST /flush_cache`` (SGLang refuses while requests run)."""
        with llm_errors(self.url + "/flush_cache", deadline=f"no reply within {timeout_s} s"), \
                anyio.fail_after(timeout_s):
            response = await self.http.post(self.url + "/flush_cache")
        if response.status_code != 200:
            self._check(self.url + "/flush_cache", response.status_code, response.content)


async def _sse_events(lines: AsyncIterator[str]) -> AsyncIterator[Any]:
    async for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            yield json.loads(data)
        except json.JSONDecodeError as exc:
            raise LLMServerError(f"malformed event in stream: {data[:200]!r}", status=200) from exc
