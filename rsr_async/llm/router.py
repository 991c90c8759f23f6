"""Cache-affine routing of chat calls over N SGLang servers.

Prefix caching is won or lost here. Every call carries an ``affinity`` key; the first
call of a key picks a server and every later call of the key goes back to it, so the
server's radix cache holds the conversation so far. A key of the form ``group#member``
(e.g. ``runbook-17#exec-2``) starts on the server its group already uses, so all M
executions of one runbook (or all attempts of one task) share one cached prefix.

The sticky choice yields when servers are imbalanced, by sglang-router's cache_aware rule:
``max - min > balance_abs_threshold`` and ``max > min * balance_rel_threshold`` over
in-flight counts; then the call goes to the least loaded server and the key moves there.
Servers failing health checks or with an open circuit breaker are skipped; each server
has an in-flight limit. ``routing = "router"`` sends everything to one sglang-router
URL, which routes by itself; ``round_robin`` ignores affinity (a baseline).

The context window is read from the servers when the router opens. A router URL's own
``/get_server_info`` has none, so its workers (``GET /workers``) are asked, and the
smallest window wins. When nothing reports one, ``llm.context_length`` is used if set;
unset, opening fails naming the URLs: never a silent default.
"""

from __future__ import annotations

import contextlib
import os
import time
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from types import TracebackType

import anyio
import httpx
import msgspec

from ..config import LLMConfig
from ..errors import (
    LLMConnectionError,
    LLMError,
    LLMRequestError,
    LLMServerError,
    LLMTimeoutError,
    NoHealthyServerError,
)
from ..schema import Usage
from .base import ChatMessage, Completion
from .client import AbortStats, SGLangClient, make_http_client, with_retries
from .prompt import ChatTemplate
from .transport import AiohttpTransport

__all__ = ["ModelRouter", "RouterStats", "ServerStats"]

_MAX_AFFINITIES = 200_000


_RECHECK_DOWN_S = 1.0
"""How soon a server that failed its health check is checked again."""

class ServerStats(msgspec.Struct, frozen=True, kw_only=True):
    """One server's counters."""

    url: str
    requests: int
    """Calls answered successfully."""
    in_flight: int
    healthy: bool
    breaker_open: bool
    errors: int
    """Failed attempts (each retry counts)."""
    usage: Usage
    aborts: AbortStats = AbortStats()
    """Calls abandoned mid-request, and which path aborted them."""
    workers: tuple[str, ...] = ()
    """The workers behind this URL when it is an sglang-router."""


class RouterStats(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of the router: per server, and totals for the run."""

    servers: tuple[ServerStats, ...]
    usage: Usage
    """Sum over successful calls."""
    errors: int
    affinities: int
    """Affinity keys currently pinned to a server."""
    rerouted: int
    """Calls moved off their sticky server (imbalance, health or breaker)."""


class _Server:
    def __init__(self, client: SGLangClient, config: LLMConfig) -> None:
        self.client = client
        self.url = client.url
        self.limiter = anyio.CapacityLimiter(config.max_inflight_per_server)
        self.in_flight = 0
        self.requests = 0
        self.errors = 0
        self.usage = Usage()
        self.healthy = True
        self.failures = 0
        self.open_until = 0.0
        self.probing = False
        self.workers: tuple[str, ...] = ()
        self._config = config

    def available(self, now: float) -> bool:
        if not self.healthy:
            return False
        if self.failures >= self._config.breaker_failures:
            # Half-open: after the reset time, one probe call may go through.
            return now >= self.open_until and not self.probing
        return True

    def breaker_open(self, now: float) -> bool:
        return self.failures >= self._config.breaker_failures and now < self.open_until

    def record_failure(self) -> None:
        self.errors += 1
        self.failures += 1
        if self.failures >= self._config.breaker_failures:
            self.open_until = time.monotonic() + self._config.breaker_reset_s

    def record_success(self, usage: Usage) -> None:
        self.failures = 0
        self.requests += 1
        self.usage = self.usage + usage


class ModelRouter:
    """:class:`~rsr_async.llm.base.ChatModel` over N SGLang servers (see module doc).

    ``urls`` overrides ``config.urls``. Use as ``async with ModelRouter(cfg) as model``:
    entering opens the HTTP client, reads the context length and starts the health
    checks in a task group the router owns; leaving stops them and closes the client.
    """

    def __init__(self, config: LLMConfig, *, urls: Sequence[str] | None = None) -> None:
        urls = tuple(urls if urls is not None else config.urls)
        if not urls:
            raise LLMConnectionError(
                "ModelRouter: no server URLs; set llm.urls or pass urls= (or start "
                "simulators with spawn_sim_servers)"
            )
        if config.routing == "router" and len(urls) != 1:
            raise LLMConnectionError(
                f"llm.routing = 'router' expects one sglang-router URL, got {len(urls)}"
            )
        self.config = config
        self._urls = urls
        self._template = ChatTemplate(config.chat_template)
        self._servers: list[_Server] = []
        self._http: httpx.AsyncClient | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._pins: OrderedDict[str, int] = OrderedDict()
        self._episode_usage: OrderedDict[str, Usage] = OrderedDict()
        self._next = 0
        self._rerouted = 0
        self._context_length: int | None = config.context_length or None
        self._reported = False
        self._model_name = config.model
        self._transport: AiohttpTransport | None = None

    @property
    def model_name(self) -> str:
        """Name recorded in trajectories: ``llm.model``, else the servers' ``model_path``."""
        return self._model_name

    @property
    def context_length(self) -> int:
        """Smallest context window the servers (or a router's workers) report, else
        ``llm.context_length``; raises when neither is known (servers down at start)."""
        if self._context_length is None:
            raise LLMConnectionError(
                "ModelRouter: context length unknown: no server answered when asked ("
                + ", ".join(self._urls) + "); start them or set llm.context_length"
            )
        return self._context_length

    async def __aenter__(self) -> ModelRouter:
        self._transport = AiohttpTransport(max_reply_bytes=self.config.max_reply_bytes)
        self._http = make_http_client(self.config, self._transport)
        self._servers = [
            _Server(SGLangClient(u, self.config, http=self._http, transport=self._transport,
                                 template=self._template), self.config)
            for u in self._urls
        ]
        names: list[str] = []
        refused: list[LLMRequestError] = []

        async def model_name(server: _Server) -> None:
            if server.healthy and not self.config.model:
                with contextlib.suppress(LLMError, msgspec.DecodeError):
                    info = await server.client.model_info(timeout_s=self.config.connect_timeout_s)
                    if isinstance(name := info.get("model_path"), str) and name:
                        names.append(name)

        try:
            async with anyio.create_task_group() as tg:
                for server in self._servers:
                    async def probe(server: _Server = server) -> None:
                        server.healthy = await server.client.health(
                            timeout_s=self.config.connect_timeout_s)
                        if server.healthy:
                            try:
                                await self._check_kind(server.client)
                            except LLMRequestError as exc:
                                refused.append(exc)  # raised below, alone, not in a group
                                return
                        await model_name(server)

                    tg.start_soon(probe)
            if refused:
                raise refused[0]
            await self._learn_context_length()
        except BaseException:
            await self._http.aclose()
            self._http = None
            raise
        if names:  # llm.model unset: record what the servers say they serve
            self._model_name = sorted(names)[0]
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        for server in self._servers:
            self._tg.start_soon(self._health_loop, server)
        return self

    async def _check_kind(self, client: SGLangClient) -> None:
        """Refuse, at open, a server this configuration cannot drive: an SGLang older
        than the client supports, or an OpenAI-compatible server (vLLM ...) when
        ``llm.api`` is the native ``/generate``, which only SGLang has."""
        try:
            identity = await client.identify(timeout_s=self.config.connect_timeout_s)
        except (LLMConnectionError, LLMTimeoutError, LLMServerError):
            return  # unreachable or failing now: the health checks deal with it
        if identity.kind == "openai-compatible" and self.config.api == "native":
            raise LLMRequestError(
                f"{client.url} is an OpenAI-compatible server (owned_by "
                f"{identity.owned_by or 'unknown'!r}), not SGLang: it has no /generate. "
                "Set llm.api = \"openai\" to use its /v1/chat/completions")

    async def _server_context_length(self, server: _Server) -> tuple[int | None, str]:
        """(window, what was asked) for one healthy server or router URL."""
        timeout_s = self.config.connect_timeout_s
        client = server.client
        if self.config.routing != "router" and (length := await client.context_length(timeout_s=timeout_s)):
            return length, client.url
        # A router: its /get_server_info is its own (no window), and a proxied
        # /get_model_info answers for one worker of its choosing. Ask every worker.
        server.workers = await client.workers(timeout_s=timeout_s)
        if not server.workers:
            if self.config.routing == "router" and (length := await client.context_length(timeout_s=timeout_s)):
                return length, client.url  # a router too old to list its workers
            return None, f"{client.url} (no context length in /get_model_info or /get_server_info)"
        assert self._http is not None and self._transport is not None
        found: list[int] = []

        async def ask(url: str) -> None:
            worker = SGLangClient(url, self.config, http=self._http, transport=self._transport)
            if length := await worker.context_length(timeout_s=timeout_s):
                found.append(length)

        async with anyio.create_task_group() as tg:
            for url in server.workers:
                tg.start_soon(ask, url)
        if found:
            return min(found), client.url
        return None, (f"{client.url} (a router; none of its workers "
                      f"{', '.join(server.workers)} reported a context length)")

    async def _learn_context_length(self) -> None:
        """Read the window from every healthy server; fail when all answered with none."""
        if self._reported:
            return
        results: list[tuple[int | None, str]] = []

        async def one(server: _Server) -> None:
            results.append(await self._server_context_length(server))

        async with anyio.create_task_group() as tg:
            for server in self._servers:
                if server.healthy:
                    tg.start_soon(one, server)
        if not results:
            return  # nobody to ask yet: probe_servers asks again
        lengths = [length for length, _ in results if length]
        if lengths:
            self._context_length = min(lengths)
            self._reported = True
        elif not self.config.context_length:
            raise LLMConnectionError(
                "no context length: " + "; ".join(what for _, what in results)
                + ". Set llm.context_length to the model's context window"
            )

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
                # The body's exception is the caller's to see: handing it to the task
                # group would come back wrapped in an ExceptionGroup.
                await self._tg.__aexit__(None, None, None)
        finally:
            self._tg = None
            if self._http is not None:
                await self._http.aclose()
                self._http = None

    async def probe_servers(self, *, timeout_s: float | None = None) -> tuple[str, ...]:
        """``/health`` of every server at once within one deadline (``llm.probe_timeout_s``);
        marks each healthy or not and returns the URLs that did not answer 200 in time.

        Run before any sandbox starts: a fleet that is down from the start is then one
        clear error, not one infrastructure failure per episode."""
        limit = self.config.probe_timeout_s if timeout_s is None else timeout_s
        answered: set[str] = set()

        async def check(server: _Server) -> None:
            if await server.client.health(timeout_s=limit):
                answered.add(server.url)

        with anyio.move_on_after(limit):
            async with anyio.create_task_group() as tg:
                for server in self._servers:
                    tg.start_soon(check, server)
        for server in self._servers:
            server.healthy = server.url in answered
        await self._learn_context_length()  # servers down when the router opened
        return tuple(s.url for s in self._servers if s.url not in answered)

    async def _health_loop(self, server: _Server) -> None:
        while True:
            # A server that failed its check is checked again soon: it is back in the
            # rotation within a second of answering, well inside the calls' retry span.
            interval = self.config.health_interval_s
            await anyio.sleep(interval if server.healthy else min(interval, _RECHECK_DOWN_S))
            server.healthy = await server.client.health(timeout_s=self.config.connect_timeout_s)

    # -- routing --------------------------------------------------------------------------

    def _balanced_pick(self, candidates: list[int], key: str) -> int:
        # Least loaded; ties broken by a hash of the key so equal loads spread evenly.
        low = min(self._servers[i].in_flight for i in candidates)
        ties = [i for i in candidates if self._servers[i].in_flight == low]
        return ties[zlib.crc32(key.encode()) % len(ties)]

    def _pick(self, affinity: str) -> int:
        now = time.monotonic()
        candidates = [i for i, s in enumerate(self._servers) if s.available(now)]
        if not candidates:
            # Every server failed its last health check. That flag chooses among servers;
            # it never fails a call on its own: a stalled or restarting server may answer
            # this call (its breaker still guards against one that keeps failing).
            candidates = [i for i, s in enumerate(self._servers)
                          if not s.breaker_open(now) and not s.probing]
        if not candidates:
            raise NoHealthyServerError(
                "every model server is unhealthy or has its circuit breaker open: "
                + ", ".join(s.url for s in self._servers)
            )
        if self.config.routing == "round_robin":
            self._next += 1
            return candidates[self._next % len(candidates)]
        if len(self._servers) == 1:
            return candidates[0]
        pinned = self._pins.get(affinity)
        if pinned is None and "#" in affinity:
            pinned = self._pins.get(affinity.rsplit("#", 1)[0])
        loads = [self._servers[i].in_flight for i in candidates]
        low, high = min(loads), max(loads)
        imbalanced = (
            high - low > self.config.balance_abs_threshold
            and high > low * self.config.balance_rel_threshold
        )
        if pinned is not None and pinned in candidates:
            load = self._servers[pinned].in_flight
            if not (imbalanced and load - low > self.config.balance_abs_threshold
                    and load > low * self.config.balance_rel_threshold):
                return pinned
            self._rerouted += 1
        elif pinned is not None:
            self._rerouted += 1
        return self._balanced_pick(candidates, affinity)

    def _pin(self, affinity: str, index: int) -> None:
        for key in (affinity, affinity.rsplit("#", 1)[0]) if "#" in affinity else (affinity,):
            self._pins[key] = index
            self._pins.move_to_end(key)
        while len(self._pins) > _MAX_AFFINITIES:
            self._pins.popitem(last=False)

    @staticmethod
    async def _acquire(server: _Server, deadline: float) -> None:
        try:
            server.limiter.acquire_nowait()
        except anyio.WouldBlock:
            try:
                with anyio.fail_after(max(0.0, deadline - time.monotonic())):
                    await server.limiter.acquire()
            except TimeoutError as exc:
                raise LLMTimeoutError(
                    f"{server.url}: waited past the deadline for one of its "
                    f"llm.max_inflight_per_server slots"
                ) from exc

    async def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        affinity: str,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> Completion:
        """Send a chat call to the affinity's server; retried, rerouted on failure."""
        if self._http is None:
            raise LLMConnectionError("ModelRouter: not open; use `async with ModelRouter(...)`")
        rid = os.urandom(8).hex()
        start = time.perf_counter()

        async def attempt(n: int, deadline: float) -> Completion:
            index = self._pick(affinity)
            if self.config.routing != "round_robin":
                self._pin(affinity, index)
            server = self._servers[index]
            probe = server.failures >= self.config.breaker_failures
            if probe:
                server.probing = True
            try:
                await self._acquire(server, deadline)
                server.in_flight += 1
                try:
                    completion = await server.client.chat_once(
                        messages, max_tokens=max_tokens, temperature=temperature,
                        seed=seed, rid=f"{rid}-{n}", deadline=deadline,
                    )
                finally:
                    server.in_flight -= 1
                    server.limiter.release()
            except LLMError as exc:
                if not isinstance(exc, (NoHealthyServerError,)) and exc.retryable:
                    server.record_failure()
                raise
            finally:
                if probe:
                    server.probing = False
            server.record_success(completion.usage)
            return completion

        completion = await with_retries(attempt, self.config, what=f"model call ({affinity})")
        usage = msgspec.structs.replace(completion.usage, latency_s=time.perf_counter() - start)
        self._episode_usage[affinity] = self._episode_usage.get(affinity, Usage()) + usage
        self._episode_usage.move_to_end(affinity)
        while len(self._episode_usage) > _MAX_AFFINITIES:
            self._episode_usage.popitem(last=False)
        return msgspec.structs.replace(completion, usage=usage)

    # -- accounting ----------------------------------------------------------------------

    def usage(self, affinity: str) -> Usage:
        """Usage summed over the calls of one affinity key (one episode)."""
        return self._episode_usage.get(affinity, Usage())

    def pop_usage(self, affinity: str) -> Usage:
        """Usage of one affinity key, forgetting it (call when an episode ends)."""
        return self._episode_usage.pop(affinity, Usage())

    def statistics(self) -> RouterStats:
        """A frozen snapshot of per-server counters and run totals."""
        now = time.monotonic()
        servers = tuple(
            ServerStats(
                url=s.url, requests=s.requests, in_flight=s.in_flight, healthy=s.healthy,
                breaker_open=s.breaker_open(now), errors=s.errors, usage=s.usage,
                aborts=s.client.abort_statistics(), workers=s.workers,
            )
            for s in self._servers
        )
        total = Usage()
        for s in self._servers:
            total = total + s.usage
        return RouterStats(
            servers=servers, usage=total, errors=sum(s.errors for s in self._servers),
            affinities=len(self._pins), rerouted=self._rerouted,
        )
