"""The simulator server (``python -m rsr_async sim-server``).

Speaks SGLang's API: native ``/generate`` (text or ``input_ids``, optional SSE stream),
OpenAI ``/v1/chat/completions``, ``/health``, ``/health_generate``, ``/get_model_info``,
``/get_server_info`` (and ``/server_info``), ``/v1/models``, ``/flush_cache``,
``/abort_request``, ``/metrics`` with SGLang's metric names; plus ``/rsr/stats``
(simulator only: per-rid completions and aborts, for tests).

Prompt tokens go through :class:`RadixCache` (capacity, LRU eviction), so
``cached_tokens`` is what a prefix cache would really serve. Latency: a request waits for
one of ``max_running_requests`` slots (queueing), then ``prefill_us_per_token`` per
uncached prompt token plus ``decode_us_per_token`` per generated token. Faults: a share
of requests answered 500 (or, for a stream, an error event inside a 200 stream), slowed
by ``slow_s``, or dropped (connection closed, nothing processed). Faults are decided
before any work, so a failed request has no side effect on the cache or the counters.

Replies come from :class:`~rsr_async.llm.scripted.ScriptedModel`, a test double.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
from aiohttp import web

from ...config import SimConfig
from ...errors import LLMConnectionError
from ...lifeline import guarded_argv
from ..base import ChatMessage
from ..prompt import CHATML_END, parse_chatml, render_chatml
from ..scripted import ScriptedModel, load_solutions
from ..tokenizer import SimTokenizer
from .radix import RadixCache

__all__ = ["SIM_VERSION", "SimServer", "spawn_sim_servers"]

SIM_VERSION = "rsr_async-sim"
"""``version`` in ``/get_server_info``: how a client tells the simulator (which always
answers with the scripted stand-in, whatever model name it reports) from a real server."""

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.decode
_JSON = "application/json"
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
READY_LINE = "rsr_async sim-server listening on "
_REPO_ROOT = str(Path(__file__).resolve().parents[3])


class _Histogram:
    def __init__(self) -> None:
        self.counts = [0] * len(_BUCKETS)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.total += 1
        self.sum += value
        for i, bound in enumerate(_BUCKETS):
            if value <= bound:
                self.counts[i] += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out = [f"# TYPE {name} histogram"]
        out += [f'{name}_bucket{{{labels},le="{b}"}} {c}' for b, c in zip(_BUCKETS, self.counts, strict=True)]
        out += [
            f'{name}_bucket{{{labels},le="+Inf"}} {self.total}',
            f"{name}_sum{{{labels}}} {self.sum}",
            f"{name}_count{{{labels}}} {self.total}",
        ]
        return out


class SimServer:
    """One simulated SGLang server on the current event loop (async context manager).

    ``model`` defaults to a :class:`ScriptedModel` knowing the tasks under ``tasks_dir``,
    seeded with ``config.seed``; ``fault_seed`` (default ``config.seed``) drives faults.
    ``port=0`` in the config picks a free port; read :attr:`url` once entered.
    """

    def __init__(
        self,
        config: SimConfig | None = None,
        *,
        model: ScriptedModel | None = None,
        tasks_dir: str | Path | None = None,
        fault_seed: int | None = None,
    ) -> None:
        self.config = config or SimConfig()
        if model is None:
            solutions = load_solutions(tasks_dir) if tasks_dir else {}
            model = ScriptedModel(
                solutions, seed=self.config.seed, model_name=self.config.model_name,
                context_length=self.config.context_length,
            )
        self.model = model
        self.tokenizer = SimTokenizer()
        self.cache = RadixCache(self.config.cache_tokens)
        # Faults may differ per server; the model's replies must not (an episode's outcome
        # depends on task, harness and seed, never on which server answered).
        self._rng = random.Random(self.config.seed if fault_seed is None else fault_seed)
        self._slots = asyncio.Semaphore(self.config.max_running_requests)
        self._running: dict[str, asyncio.Task[Any]] = {}
        self._aborts: dict[str, asyncio.Event] = {}
        self._queued = 0
        self.completed: Counter[str] = Counter()
        """Requests answered, per rid (a rid answered twice would show 2)."""
        self.aborted: list[str] = []
        """Rids whose request was aborted (``/abort_request`` or a closed connection)."""
        self.faults: Counter[str] = Counter()
        self.prompt_tokens_total = 0
        self.cached_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_total = 0
        self._ttft = _Histogram()
        self._e2e = _Histogram()
        self._runner: web.AppRunner | None = None
        self.url = ""

    # -- lifecycle -----------------------------------------------------------------------

    def app(self) -> web.Application:
        """The aiohttp application (routes only; :meth:`__aenter__` serves it)."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes([
            web.get("/health", self._health),
            web.get("/health_generate", self._health),
            web.get("/get_model_info", self._model_info),
            web.get("/model_info", self._model_info),
            web.get("/get_server_info", self._server_info),
            web.get("/server_info", self._server_info),
            web.get("/v1/models", self._models),
            web.get("/metrics", self._metrics),
            web.get("/rsr/stats", self._stats),
            web.post("/generate", self._generate),
            web.post("/v1/chat/completions", self._chat),
            web.post("/flush_cache", self._flush_cache),
            web.get("/flush_cache", self._flush_cache),
            web.post("/abort_request", self._abort_request),
        ])
        return app

    async def __aenter__(self) -> SimServer:
        # handler_cancellation: a closed connection cancels its handler, which is how
        # SGLang aborts requests whose client went away.
        self._runner = web.AppRunner(
            self.app(), handler_cancellation=True, access_log=None, keepalive_timeout=5.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port, backlog=4096)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://{self.config.host}:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- small endpoints -----------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _model_info(self, request: web.Request) -> web.Response:
        return web.json_response({
            "model_path": self.config.model_name, "tokenizer_path": self.config.model_name,
            "is_generation": True, "context_length": self.config.context_length,
        })

    async def _server_info(self, request: web.Request) -> web.Response:
        return web.json_response({
            "model_path": self.config.model_name, "context_length": self.config.context_length,
            "max_running_requests": self.config.max_running_requests,
            "max_total_num_tokens": self.config.cache_tokens, "enable_cache_report": True,
            "enable_metrics": True, "version": SIM_VERSION,
        })

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.config.model_name, "object": "model", "owned_by": "rsr_async-sim",
             "max_model_len": self.config.context_length},
        ]})

    async def _flush_cache(self, request: web.Request) -> web.Response:
        if self._running:
            return web.Response(status=400, text="Cache not flushed: requests are running.")
        self.cache.clear()
        return web.Response(text="Cache flushed.")

    async def _abort_request(self, request: web.Request) -> web.Response:
        body = await request.read()
        rid = (_decode(body) if body else {}).get("rid", "")
        abort = self._aborts.get(rid)
        if abort is not None:
            abort.set()
        return web.Response(text="")

    async def _stats(self, request: web.Request) -> web.Response:
        return web.Response(body=_encode({
            "completed": dict(self.completed), "aborted": self.aborted,
            "faults": dict(self.faults), "requests_total": self.requests_total,
            "prompt_tokens_total": self.prompt_tokens_total,
            "cached_tokens_total": self.cached_tokens_total,
            "cache_size": self.cache.size, "cache_evicted": self.cache.evicted,
            "running": len(self._running), "queued": self._queued,
        }), content_type=_JSON)

    async def _metrics(self, request: web.Request) -> web.Response:
        labels = f'model_name="{self.config.model_name}"'
        hit = self.cached_tokens_total / self.prompt_tokens_total if self.prompt_tokens_total else 0.0
        lines = []
        for kind, name, value in (
            ("gauge", "num_running_reqs", len(self._running) - self._queued),
            ("gauge", "num_queue_reqs", self._queued),
            ("gauge", "token_usage", self.cache.size / self.cache.capacity),
            ("gauge", "cache_hit_rate", hit),
            ("counter", "prompt_tokens_total", self.prompt_tokens_total),
            ("counter", "cached_tokens_total", self.cached_tokens_total),
            ("counter", "generation_tokens_total", self.generation_tokens_total),
            ("counter", "num_requests_total", self.requests_total),
        ):
            lines += [f"# TYPE sglang:{name} {kind}", f"sglang:{name}{{{labels}}} {value}"]
        lines += self._ttft.lines("sglang:time_to_first_token_seconds", labels)
        lines += self._e2e.lines("sglang:e2e_request_latency_seconds", labels)
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    # -- generation ----------------------------------------------------------------------

    def _fault(self, request: web.Request) -> str | None:
        """Decide this request's injected fault, before any work is done."""
        cfg = self.config
        draw = self._rng.random()
        if draw < cfg.drop_rate:
            return "drop"
        if draw < cfg.drop_rate + cfg.error_rate:
            return "error"
        if self._rng.random() < cfg.slow_rate:
            return "slow"
        return None

    @staticmethod
    def _error(status: int, message: str) -> web.Response:
        return web.Response(
            status=status, body=_encode({"error": {"message": message, "code": status},
                                         "object": "error", "message": message}),
            content_type=_JSON,
        )

    async def _run(
        self, rid: str, messages: Sequence[ChatMessage], tokens: list[int], max_new: int,
        seed: int | None, slow: bool,
    ) -> tuple[str, list[int], int, str]:
        """Queue, match the cache, 'decode', insert; returns (text, ids, cached, finish)."""
        start = time.perf_counter()
        self._running[rid] = asyncio.current_task()  # type: ignore[assignment]
        try:
            self._queued += 1
            try:
                await self._slots.acquire()
            finally:
                self._queued -= 1
            try:
                # Like SGLang, at least the last prompt token is always computed.
                cached = max(0, min(self.cache.match(tokens), len(tokens) - 1))
                limit = min(max_new, self.config.context_length - len(tokens))
                full = self.model.reply(messages, seed=seed)
                text, n_out = self.tokenizer.truncate(full, limit)
                finish = "length" if text != full else "stop"
                prefill = (len(tokens) - cached) * self.config.prefill_us_per_token / 1e6
                decode = n_out * self.config.decode_us_per_token / 1e6
                delay = prefill + decode + (self.config.slow_s if slow else 0.0)
                if delay > 0:
                    abort = self._aborts[rid] = asyncio.Event()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await abort.wait()
                    if abort.is_set():
                        # As SGLang: an aborted request still answers, with finish "abort".
                        self.aborted.append(rid)
                        return "", [], cached, "abort"
                out_ids = self.tokenizer.encode(text)
                # SGLang caches generated tokens too (up to the end-of-turn token).
                suffix = self.tokenizer.encode(CHATML_END) if finish == "stop" else []
                self.cache.insert(tokens + out_ids + suffix)
            finally:
                self._slots.release()
        except asyncio.CancelledError:
            self.aborted.append(rid)
            raise
        finally:
            self._running.pop(rid, None)
            self._aborts.pop(rid, None)
        if len(self.completed) > 200_000:  # a test aid; keep long runs' memory flat
            self.completed.clear()
            self.aborted.clear()
        self.completed[rid] += 1
        self.requests_total += 1
        self.prompt_tokens_total += len(tokens)
        self.cached_tokens_total += cached
        self.generation_tokens_total += n_out
        elapsed = time.perf_counter() - start
        self._ttft.observe(elapsed - decode)
        self._e2e.observe(elapsed)
        return text, out_ids, cached, finish

    def _too_long(self, n: int) -> web.Response | None:
        if n >= self.config.context_length:
            return self._error(
                400, f"The input ({n} tokens) is longer than the model's context length "
                f"({self.config.context_length} tokens).",
            )
        return None

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        fault = self._fault(request)
        body = _decode(await request.read())
        stream = bool(body.get("stream"))
        if fault == "drop":
            self.faults["drop"] += 1
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if fault == "error":
            self.faults["error"] += 1
            if stream:
                response = web.StreamResponse(headers={"content-type": "text/event-stream"})
                await response.prepare(request)
                await response.write(b'data: {"error": {"message": "injected fault"}}\n\n')
                return response
            return self._error(500, "injected fault")
        params = body.get("sampling_params") or {}
        if isinstance(body.get("rid"), list) or isinstance(body.get("text"), list):
            return self._error(400, "batched requests are not simulated")
        rid = str(body.get("rid") or uuid.uuid4().hex)
        if body.get("input_ids") is not None:
            tokens = [int(t) for t in body["input_ids"]]
            text = self.tokenizer.decode(tokens)
        else:
            text = str(body.get("text") or "")
            tokens = self.tokenizer.encode(text)
        if (refusal := self._too_long(len(tokens))) is not None:
            return refusal
        max_new = int(params.get("max_new_tokens") or 128)  # SGLang's default
        seed = params.get("sampling_seed", params.get("seed"))
        reply, out_ids, cached, finish = await self._run(
            rid, parse_chatml(text), tokens, max_new, seed, fault == "slow"
        )
        meta = {
            "id": rid, "prompt_tokens": len(tokens), "completion_tokens": len(out_ids),
            "cached_tokens": cached,
            "finish_reason": {"type": "stop", "matched": CHATML_END} if finish == "stop"
            else {"type": finish, "length": len(out_ids)},
        }
        result: dict[str, Any] = {"text": reply, "meta_info": meta}
        if body.get("input_ids") is not None:
            result["output_ids"] = out_ids
        if stream:
            response = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await response.prepare(request)
            await response.write(b"data: " + _encode(result) + b"\n\ndata: [DONE]\n\n")
            return response
        return web.Response(body=_encode(result), content_type=_JSON)

    async def _chat(self, request: web.Request) -> web.Response:
        fault = self._fault(request)
        body = _decode(await request.read())
        if fault == "drop":
            self.faults["drop"] += 1
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if fault == "error":
            self.faults["error"] += 1
            return self._error(500, "injected fault")
        messages: list[ChatMessage] = [
            {"role": m.get("role", "user"), "content": str(m.get("content") or "")}
            for m in body.get("messages") or []
        ]
        tokens = self.tokenizer.encode(render_chatml(messages))
        if (refusal := self._too_long(len(tokens))) is not None:
            return refusal
        rid = str(body.get("rid") or uuid.uuid4().hex)
        max_new = int(body.get("max_tokens") or body.get("max_completion_tokens") or
                      self.config.context_length)
        reply, out_ids, cached, finish = await self._run(
            rid, messages, tokens, max_new, body.get("seed"), fault == "slow"
        )
        usage: dict[str, Any] = {
            "prompt_tokens": len(tokens), "completion_tokens": len(out_ids),
            "total_tokens": len(tokens) + len(out_ids),
        }
        if cached > 0:  # as SGLang with --enable-cache-report: only when above zero
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        return web.Response(body=_encode({
            "id": rid, "object": "chat.completion", "created": int(time.time()),
            "model": self.config.model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                         "finish_reason": finish}],
            "usage": usage,
        }), content_type=_JSON)


@asynccontextmanager
async def spawn_sim_servers(
    config: SimConfig, *, count: int, tasks_dir: Path | None = None,
    start_timeout_s: float = 60.0,
) -> AsyncIterator[list[str]]:
    """Start ``count`` simulator subprocesses on free loopback ports; yield their URLs.

    Each runs ``python -m rsr_async sim-server`` (its own process, so its own core),
    reports its port on stdout, and is checked with ``/health`` before this yields.
    On exit every process is terminated (killed if it lingers). Should this process die
    without running that (SIGKILL), the simulators die with it: they start behind
    :func:`~rsr_async.lifeline.guarded_argv` (PDEATHSIG, no inherited descriptors)
    and also exit when their parent pid changes.
    """
    sim_json = json.dumps(msgspec.to_builtins(msgspec.structs.replace(config, port=0)))
    env = dict(os.environ)
    env["PYTHONPATH"] = _REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    processes: list[anyio.abc.Process] = []
    urls: list[str] = []
    try:
        for i in range(count):
            argv = [sys.executable, "-m", "rsr_async", "sim-server", "--sim-json", sim_json,
                    "--seed-offset", str(i), "--parent-pid", str(os.getpid())]
            if tasks_dir is not None:
                argv += ["--tasks", str(tasks_dir)]
            # Spawned from the loop's thread (PDEATHSIG follows the forking thread).
            processes.append(await anyio.open_process(guarded_argv(argv), env=env, stderr=None))
        try:
            with anyio.fail_after(start_timeout_s):
                urls.extend([await _read_url(process) for process in processes])
        except TimeoutError as exc:  # only the start-up: the caller's timeouts are its own
            raise LLMConnectionError(
                f"sim-server: {count - len(urls)} of {count} simulators did not report a port "
                f"within {start_timeout_s} s; run `python -m rsr_async sim-server` to see why"
            ) from exc
        yield urls
    finally:
        with anyio.CancelScope(shield=True):
            for process in processes:
                if process.returncode is None:
                    process.terminate()
            for process in processes:
                with anyio.move_on_after(5.0):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    with anyio.move_on_after(5.0):
                        await process.wait()
                await process.aclose()


async def _read_url(process: anyio.abc.Process) -> str:
    assert process.stdout is not None
    buffer = b""
    while b"\n" not in buffer:
        try:
            buffer += await process.stdout.receive()
        except anyio.EndOfStream as exc:
            raise LLMConnectionError(
                f"sim-server exited with code {await process.wait()} before it was ready"
            ) from exc
    line = buffer.split(b"\n", 1)[0].decode()
    if not line.startswith(READY_LINE):
        raise LLMConnectionError(f"sim-server: unexpected first line {line!r}")
    return line[len(READY_LINE):].strip()
