"""The simulator server (``python -m rsr_async sim-server``).

Answers as SGLang 0.5.23 does, shape for shape (recorded from SGLang's own code by
``scripts/record_sglang_shapes.py``; ``tests/llm/test_server_shapes.py`` compares): native
``/generate`` (text or ``input_ids``; SSE stream with cumulative text, as SGLang's
default; ``sampling_params`` with an unknown key refused 400 with the contract's serde
message), OpenAI ``/v1/chat/completions`` and ``/v1/completions`` (plain and
``stream=True``, ``stream_options.include_usage``), ``/v1/models`` and
``/v1/models/{model}``, ``/health``, ``/health_generate``, ``/ready``, ``/model_info``
and ``/get_model_info`` (no context length there, as in SGLang), ``/server_info`` and
``/get_server_info`` (server arguments, ``context_length`` among them, scheduler info,
``version``), ``/flush_cache`` (refused while requests run), ``/abort_request``,
``/metrics`` with SGLang's metric names; plus ``/rsr/stats`` (simulator only: per-rid
completions and aborts, for tests).

Prompt tokens go through :class:`RadixCache` (capacity, LRU eviction), so
``cached_tokens`` is what a prefix cache would really serve. Latency: a request waits for
one of ``max_running_requests`` slots (queueing), then ``prefill_us_per_token`` per
uncached prompt token plus ``decode_us_per_token`` per generated token. A stream's
events are sent once that time has passed (the simulator does not model time to first
token). Faults: a share of requests answered 500 (or, for a stream, an error event
inside a 200 stream), slowed by ``slow_s``, or dropped (connection closed, nothing
processed). Faults are decided before any work, so a failed request has no side effect
on the cache or the counters.

Replies come from :class:`~rsr_async.llm.scripted.ScriptedModel`, a test double; the
``version`` in ``/server_info`` is :data:`SIM_VERSION`, so a client can tell.
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
from ..client import SIMULATOR_VERSION
from ..prompt import CHATML_END, parse_chatml, render_chatml
from ..scripted import ScriptedModel, load_solutions
from ..tokenizer import SimTokenizer
from .radix import RadixCache

__all__ = ["SAMPLING_PARAMS_FIELDS", "SIM_VERSION", "SimServer", "spawn_sim_servers"]

SIM_VERSION = SIMULATOR_VERSION
"""``version`` in ``/server_info``: how a client tells the simulator (which always
answers with the scripted stand-in, whatever model name it reports) from a real server."""

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.decode
_JSON = "application/json"
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
READY_LINE = "rsr_async sim-server listening on "
_REPO_ROOT = str(Path(__file__).resolve().parents[3])
_STREAM_CHUNK_TOKENS = 8
"""Tokens per stream event (SGLang's ``--stream-interval`` is 1; fewer events keep the
simulator cheap and still give a client several chunks to join)."""

SAMPLING_PARAMS_FIELDS = (
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p",
    "top_k", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty",
    "min_new_tokens", "n", "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos",
    "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
    "stream_interval", "logit_bias", "sampling_seed", "custom_params", "beam_width",
    "watermark", "choice",
)
"""``/generate``'s ``sampling_params`` keys in SGLang's JSON contract, in its order (the
order its unknown-field message lists them); any other key is refused with HTTP 400."""


def _unknown_field(key: str, fields: Sequence[str]) -> str:
    """serde's unknown-field text, as SGLang's contract gate words it."""
    if not fields:
        return f"unknown field `{key}`, there are no fields"
    if len(fields) == 1:
        return f"unknown field `{key}`, expected `{fields[0]}`"
    if len(fields) == 2:
        return f"unknown field `{key}`, expected `{fields[0]}` or `{fields[1]}`"
    listed = ", ".join(f"`{f}`" for f in fields)
    return f"unknown field `{key}`, expected one of {listed}"


def _sse(payload: Any) -> bytes:
    return b"data: " + _encode(payload) + b"\n\n"


_DONE = b"data: [DONE]\n\n"


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
        self._port = 0
        self._startup_time = time.time()
        self._eot = self.tokenizer.encode(CHATML_END)[0]
        """Token id of the end-of-turn token: ``finish_reason.matched`` of a stop, as SGLang
        reports a stop on the model's EOS token."""
        self.url = ""

    # -- lifecycle -----------------------------------------------------------------------

    def app(self) -> web.Application:
        """The aiohttp application (routes only; :meth:`__aenter__` serves it)."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes([
            web.get("/health", self._health),
            web.get("/health_generate", self._health),
            web.get("/ready", self._health),
            web.get("/get_model_info", self._model_info),
            web.get("/model_info", self._model_info),
            web.get("/get_server_info", self._server_info),
            web.get("/server_info", self._server_info),
            web.get("/v1/models", self._models),
            web.get("/v1/models/{model:.+}", self._model_card),
            web.get("/metrics", self._metrics),
            web.get("/rsr/stats", self._stats),
            web.post("/generate", self._generate),
            web.put("/generate", self._generate),
            web.post("/v1/chat/completions", self._chat),
            web.post("/v1/completions", self._completions),
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
        self._port = self._runner.addresses[0][1]
        self.url = f"http://{self.config.host}:{self._port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- small endpoints -----------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _model_info(self, request: web.Request) -> web.Response:
        # SGLang 0.5.23's /model_info keys; the context window is not among them.
        name = self.config.model_name
        return web.json_response({
            "model_path": name, "served_model_name": name, "tokenizer_path": name,
            "is_generation": True, "preferred_sampling_params": None,
            "weight_version": "default", "load_format": "auto", "reasoning_parser": None,
            "tool_call_parser": None, "disaggregation_mode": "null",
            "has_image_understanding": False, "has_audio_understanding": False,
            "model_type": "rsr_async_scripted", "architectures": ["ScriptedModel"],
        })

    async def _server_info(self, request: web.Request) -> web.Response:
        # Server arguments (as launched: serve passes --context-length only when asked,
        # the simulator always knows its window), then the scheduler's info, then what
        # /server_info adds. A real server lists ~550 arguments; these are the ones a
        # client of this project reads.
        cfg = self.config
        args = {
            "model_path": cfg.model_name, "served_model_name": cfg.model_name,
            "tokenizer_path": cfg.model_name, "context_length": cfg.context_length,
            "host": cfg.host, "port": self._port, "tp_size": 1, "dp_size": 1,
            "max_running_requests": cfg.max_running_requests,
            "enable_cache_report": cfg.enable_cache_report, "enable_metrics": True,
            "incremental_streaming_output": False, "schedule_policy": "fcfs",
            "disaggregation_mode": "null",
        }
        scheduler = {
            "status": "ready", "max_total_num_tokens": cfg.cache_tokens,
            "max_req_input_len": cfg.context_length - 1, "startup_time": self._startup_time,
        }
        return web.json_response({**args, **scheduler, "internal_states": [{}],
                                  "version": SIM_VERSION, "frontend": "python"})

    def _card(self) -> dict[str, Any]:
        name = self.config.model_name
        return {"id": name, "object": "model", "created": int(self._startup_time),
                "owned_by": "sglang", "root": name, "parent": None,
                "max_model_len": self.config.context_length}

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self._card()]})

    async def _model_card(self, request: web.Request) -> web.Response:
        model = request.match_info["model"]
        if model != self.config.model_name:
            return web.json_response({"error": {
                "message": f"The model '{model}' does not exist",
                "type": "invalid_request_error", "param": "model", "code": "model_not_found",
            }}, status=404)
        return web.json_response(self._card())

    async def _flush_cache(self, request: web.Request) -> web.Response:
        if self._running:
            return web.Response(status=400, text="Flush cache failed.\n")
        self.cache.clear()
        return web.Response(text=(
            "Cache flushed.\nPlease check backend logs for more details. (When there are "
            "running or waiting requests, the operation will not be performed.)\n"))

    async def _abort_request(self, request: web.Request) -> web.Response:
        body = await request.read()
        fields = _decode(body) if body else {}
        if fields.get("abort_all"):
            targets = list(self._aborts.values())
        else:
            targets = [a for a in (self._aborts.get(str(fields.get("rid") or "")),) if a]
        for abort in targets:
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
    def _error(status: int, message: str, kind: str = "BadRequestError") -> web.Response:
        # SGLang's OpenAI ErrorResponse (object, message, type, param, code); the native
        # routes answer {"error": {"message": ...}}: a client reading either finds both.
        return web.Response(
            status=status, body=_encode({
                "object": "error", "message": message, "type": kind, "param": None,
                "code": status, "error": {"message": message, "code": status}}),
            content_type=_JSON,
        )

    def _faulted(self, request: web.Request, fault: str | None) -> web.Response | None:
        """The reply of a dropped or failed request (None: no such fault)."""
        if fault == "drop":
            self.faults["drop"] += 1
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if fault == "error":
            self.faults["error"] += 1
            return self._error(500, "injected fault", "InternalServerError")
        return None

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

    def _finish_reason(self, finish: str, n_out: int) -> dict[str, Any]:
        """SGLang's ``finish_reason`` object (``to_json`` of its finish classes)."""
        if finish == "stop":
            return {"type": "stop", "matched": self._eot}
        if finish == "length":
            return {"type": "length", "length": n_out}
        return {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}

    def _meta_info(self, rid: str, n_prompt: int, n_out: int, cached: int,
                   finish: dict[str, Any] | None, latency: float | None) -> dict[str, Any]:
        """``meta_info`` with the keys SGLang always sends (``e2e_latency`` once finished)."""
        meta: dict[str, Any] = {
            "id": rid, "finish_reason": finish, "prompt_tokens": n_prompt,
            "weight_version": "default", "num_retractions": 0, "reasoning_tokens": 0,
            "completion_tokens": n_out, "cached_tokens": cached,
        }
        if latency is not None:
            meta["e2e_latency"] = latency
        return meta

    def _pieces(self, text: str) -> list[str]:
        """The reply cut into stream events of ``_STREAM_CHUNK_TOKENS`` tokens."""
        pieces = self.tokenizer.pieces(text)
        step = _STREAM_CHUNK_TOKENS
        return ["".join(pieces[i:i + step]) for i in range(0, len(pieces), step)] or [""]

    async def _begin(
        self, request: web.Request
    ) -> tuple[str | None, dict[str, Any], bool, web.StreamResponse | None]:
        """A generation request's injected fault, body, whether it streams, and the
        fault's response when one is due now (an error inside a stream when it streams)."""
        fault = self._fault(request)
        body = _decode(await request.read())
        stream = bool(body.get("stream"))
        if fault == "error" and stream:
            return fault, body, stream, await self._stream_error(request)
        return fault, body, stream, self._faulted(request, fault)

    async def _stream_error(self, request: web.Request) -> web.StreamResponse:
        self.faults["error"] += 1
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(_sse({"error": {"message": "injected fault",
                                             "type": "InternalServerError", "code": 500,
                                             "retryable": True}}))
        await response.write(_DONE)
        return response

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        fault, body, stream, faulted = await self._begin(request)
        if faulted is not None:
            return faulted
        params = body.get("sampling_params") or {}
        if isinstance(params, dict):
            for key in params:
                if key not in SAMPLING_PARAMS_FIELDS:
                    # SGLang's contract gate: 400 with the schema's own text.
                    return web.json_response(
                        {"error": _unknown_field(key, SAMPLING_PARAMS_FIELDS)}, status=400)
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
        start = time.perf_counter()
        reply, out_ids, cached, finish = await self._run(
            rid, parse_chatml(text), tokens, max_new, seed, fault == "slow"
        )
        finish_reason = self._finish_reason(finish, len(out_ids))
        if not stream:
            return web.Response(body=_encode({
                "text": reply, "output_ids": out_ids,
                "meta_info": self._meta_info(rid, len(tokens), len(out_ids), cached,
                                             finish_reason, time.perf_counter() - start),
            }), content_type=_JSON)
        # SGLang's default stream: every event carries the text and ids so far.
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        pieces = self._pieces(reply)
        sent_text, sent_ids = "", 0
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            sent_text += piece
            sent_ids = len(out_ids) if last else min(len(out_ids), sent_ids + _STREAM_CHUNK_TOKENS)
            meta = self._meta_info(
                rid, len(tokens), sent_ids, cached, finish_reason if last else None,
                time.perf_counter() - start if last else None)
            await response.write(_sse({"text": sent_text, "output_ids": out_ids[:sent_ids],
                                       "meta_info": meta}))
        await response.write(_DONE)
        return response

    # -- OpenAI-compatible ----------------------------------------------------------------

    def _usage(self, n_prompt: int, n_out: int, cached: int) -> dict[str, Any]:
        """SGLang's ``UsageInfo``: ``prompt_tokens_details`` set with cache reports on
        (``cached_tokens`` may be 0), null without; ``prompt_tokens`` includes cached."""
        return {
            "prompt_tokens": n_prompt, "total_tokens": n_prompt + n_out,
            "completion_tokens": n_out,
            "prompt_tokens_details": ({"cached_tokens": cached}
                                      if self.config.enable_cache_report else None),
            "reasoning_tokens": 0, "completion_tokens_details": None,
        }

    async def _openai_request(
        self, messages: list[ChatMessage], tokens: list[int], body: dict[str, Any],
        fault: str | None,
    ) -> tuple[str, str, list[int], int, str, float] | web.Response:
        """Run one OpenAI request: (rid, text, ids, cached, finish, created) or a refusal."""
        if (refusal := self._too_long(len(tokens))) is not None:
            return refusal
        rid = str(body.get("rid") or uuid.uuid4().hex)
        max_new = int(body.get("max_completion_tokens") or body.get("max_tokens") or
                      self.config.context_length)
        created = time.time()
        reply, out_ids, cached, finish = await self._run(
            rid, messages, tokens, max_new, body.get("seed"), fault == "slow"
        )
        return rid, reply, out_ids, cached, finish, created

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        fault, body, stream, faulted = await self._begin(request)
        if faulted is not None:
            return faulted
        messages: list[ChatMessage] = [
            {"role": m.get("role", "user"), "content": str(m.get("content") or "")}
            for m in body.get("messages") or []
        ]
        tokens = self.tokenizer.encode(render_chatml(messages))
        ran = await self._openai_request(messages, tokens, body, fault)
        if isinstance(ran, web.Response):
            return ran
        rid, reply, out_ids, cached, finish, created = ran
        model = str(body.get("model") or self.config.model_name)
        matched = self._eot if finish == "stop" else None
        usage = self._usage(len(tokens), len(out_ids), cached)
        if not stream:
            return web.Response(body=_encode({
                "id": rid, "object": "chat.completion", "created": int(created),
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": reply,
                                                     "reasoning_content": None, "tool_calls": None},
                             "logprobs": None, "finish_reason": finish, "matched_stop": matched,
                             "hidden_states": None, "meta_info": None,
                             "prompt_token_ids": None, "response_token_ids": None}],
                "usage": usage, "metadata": {"weight_version": "default"}, "sglext": None,
            }), content_type=_JSON)

        def chunk(delta: dict[str, Any], finish_reason: str | None,
                  usage: dict[str, Any] | None = None, choices: bool = True) -> bytes:
            return _sse({
                "id": rid, "object": "chat.completion.chunk", "created": int(created),
                "model": model,
                "choices": [{"index": 0, "delta": {"role": None, "content": None,
                                                   "reasoning_content": None,
                                                   "tool_calls": None, "hidden_states": None,
                                                   **delta},
                             "logprobs": None, "finish_reason": finish_reason,
                             "matched_stop": matched if finish_reason else None}] if choices else [],
                "usage": usage, "sglext": None,
            })

        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(chunk({"role": "assistant", "content": ""}, None))
        for piece in self._pieces(reply):
            if piece:
                await response.write(chunk({"content": piece}, None))
        await response.write(chunk({}, finish))
        if (body.get("stream_options") or {}).get("include_usage"):
            await response.write(chunk({}, None, usage, choices=False))
        await response.write(_DONE)
        return response

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        fault, body, stream, faulted = await self._begin(request)
        if faulted is not None:
            return faulted
        prompt = body.get("prompt")
        if isinstance(prompt, list):
            if len(prompt) != 1 or not isinstance(prompt[0], str):
                return self._error(400, "batched prompts are not simulated")
            prompt = prompt[0]
        text = str(prompt or "")
        messages = parse_chatml(text) or [{"role": "user", "content": text}]
        tokens = self.tokenizer.encode(text)
        if body.get("max_tokens") is None:
            body = {**body, "max_tokens": 16}  # the OpenAI default, which SGLang keeps
        ran = await self._openai_request(messages, tokens, body, fault)
        if isinstance(ran, web.Response):
            return ran
        rid, reply, out_ids, cached, finish, created = ran
        model = str(body.get("model") or self.config.model_name)
        matched = self._eot if finish == "stop" else None
        usage = self._usage(len(tokens), len(out_ids), cached)

        def choice(piece: str, finish_reason: str | None) -> dict[str, Any]:
            return {"index": 0, "text": piece, "logprobs": None, "finish_reason": finish_reason,
                    "matched_stop": matched if finish_reason else None, "hidden_states": None,
                    "prompt_token_ids": None, "token_ids": None}

        if not stream:
            return web.Response(body=_encode({
                "id": rid, "object": "text_completion", "created": int(created), "model": model,
                "choices": [choice(reply, finish)], "usage": usage, "metadata": None,
                "sglext": None,
            }), content_type=_JSON)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        pieces = [p for p in self._pieces(reply) if p] or [""]
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            await response.write(_sse({
                "id": rid, "object": "text_completion", "created": int(created), "model": model,
                "choices": [choice(piece, finish if last else None)], "usage": None,
                "sglext": None,
            }))
        if (body.get("stream_options") or {}).get("include_usage"):
            await response.write(_sse({
                "id": rid, "object": "text_completion", "created": int(created), "model": model,
                "choices": [], "usage": usage}))
        await response.write(_DONE)
        return response


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
