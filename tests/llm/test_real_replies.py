"""SGLangClient parses what real servers sent: replies replayed over real HTTP.

``fixtures/sglang_real_replies.json`` holds replies of real SGLang and vLLM servers,
copied from public captures (SGLang's own executed docs, curl transcripts); each entry
names its source. A loopback aiohttp server answers with them byte for byte (as JSON),
and records what the client sent, which is checked against SGLang's request contract
(``fixtures/sglang_shapes.json``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from rsr_async.config import LLMConfig
from rsr_async.errors import LLMRequestError
from rsr_async.llm.client import SGLangClient
from rsr_async.llm.router import ModelRouter

FIXTURES = Path(__file__).parent / "fixtures"
REAL = json.loads((FIXTURES / "sglang_real_replies.json").read_text())
SHAPES = json.loads((FIXTURES / "sglang_shapes.json").read_text())


class Replay:
    """Loopback server: each route answers one recorded reply; requests are kept."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.routes = routes
        self.requests: list[tuple[str, Any]] = []

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append((request.path, json.loads(body) if body else None))
        entry = self.routes.get(request.path)
        if entry is None:
            return web.Response(status=404, text='{"detail":"Not Found"}')
        if callable(entry):
            return await entry(request)
        if "text" in entry:
            return web.Response(text=entry["text"], content_type="text/plain")
        return web.Response(status=entry.get("status", 200), body=json.dumps(entry["body"]),
                            content_type="application/json")

    @asynccontextmanager
    async def serve(self) -> AsyncIterator[str]:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            yield f"http://127.0.0.1:{runner.addresses[0][1]}"
        finally:
            await runner.cleanup()


def _health() -> dict[str, Any]:
    return {"text": ""}


@pytest.mark.parametrize("name", ["generate_length_2026_05", "generate_length_2026_03",
                                  "generate_stop_token"])
async def test_generate_replies_parse_including_fields_we_do_not_use(name: str) -> None:
    # Real /generate replies of two server generations (num_retractions vs
    # total_retractions, cached_tokens_details dict vs null, reasoning_tokens or not):
    # the client reads text, finish reason and the token counts, and ignores the rest.
    entry = REAL[name]
    meta = entry["body"]["meta_info"]
    replay = Replay({"/generate": entry})
    async with replay.serve() as url, SGLangClient(url, LLMConfig()) as client:
        result = await client.generate(text="The capital of France is", max_new_tokens=32)
    assert result.text == entry["body"]["text"]
    assert result.finish_reason == meta["finish_reason"]["type"]
    assert result.usage.prompt_tokens == meta["prompt_tokens"]
    assert result.usage.completion_tokens == meta["completion_tokens"]
    assert result.usage.cached_tokens == meta["cached_tokens"]


async def test_generate_request_fits_sglangs_contract() -> None:
    # What the client sends to /generate: every top-level key a GenerateRequest field,
    # every sampling parameter one SamplingParams accepts (it rejects unknown ones).
    replay = Replay({"/generate": REAL["generate_stop_token"]})
    async with replay.serve() as url, SGLangClient(url, LLMConfig(temperature=0.7, top_p=0.9)) as client:
        await client.generate(text="x", max_new_tokens=8, stop=["<|im_end|>"], seed=7)
        await client.generate(input_ids=[1, 2, 3], max_new_tokens=8)
    contract = SHAPES["api_types"]
    for path, body in replay.requests:
        assert path == "/generate"
        assert set(body) <= set(contract["GenerateRequest"]["fields"]), body
        assert set(body["sampling_params"]) <= set(contract["SamplingParams"]["fields"]), body
    assert replay.requests[0][1]["sampling_params"]["sampling_seed"] == 7


async def test_generate_stream_ends_with_a_real_reply() -> None:
    # SGLang's stream: cumulative events, the last one shaped as the plain reply; the
    # client keeps the last. The events before it are the real reply's text cut short.
    real = REAL["generate_length_2026_05"]["body"]

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        partial = {**real, "text": real["text"][:10],
                   "meta_info": {**real["meta_info"], "finish_reason": None}}
        for event in (partial, real):
            await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    async with Replay({"/generate": stream}).serve() as url, SGLangClient(url, LLMConfig()) as client:
        result = await client.generate(text="The capital of France is", stream=True)
    assert result.text == real["text"] and result.finish_reason == "length"
    assert result.usage.cached_tokens == 2


@pytest.mark.parametrize("name", ["chat_completion_sglang", "chat_completion_sglang_2"])
async def test_chat_completion_replies_parse(name: str) -> None:
    # Real SGLang chat replies without --enable-cache-report: prompt_tokens_details null
    # reads as 0 cached; SGLang's extra fields (matched_stop, reasoning_tokens,
    # metadata) are ignored.
    body = REAL[name]["body"]
    async with Replay({"/v1/chat/completions": REAL[name]}).serve() as url, \
            SGLangClient(url, LLMConfig(api="openai")) as client:
        reply = await client.chat([{"role": "user", "content": "hi"}])
    assert reply.text == body["choices"][0]["message"]["content"]
    assert reply.finish_reason == "stop"
    assert reply.usage.prompt_tokens == body["usage"]["prompt_tokens"]
    assert reply.usage.completion_tokens == body["usage"]["completion_tokens"]
    assert reply.usage.cached_tokens == 0


def _sglang_routes(**extra: Any) -> dict[str, Any]:
    return {"/health": _health(), "/get_model_info": REAL["get_model_info"],
            "/get_server_info": REAL["get_server_info_excerpt"], **extra}


async def test_context_length_comes_from_v1_models_not_the_kv_pool() -> None:
    # The real server (qwen2.5-0.5b, a 32k model) reports no context length in
    # /get_model_info, context_length null in /get_server_info and a KV pool of 20480
    # tokens (max_total_num_tokens). The window is /v1/models' max_model_len.
    routes = _sglang_routes(**{"/v1/models": REAL["v1_models_sglang"]})
    async with Replay(routes).serve() as url, SGLangClient(url, LLMConfig()) as client:
        assert await client.context_length() == 163840
    # Without /v1/models the prompt limit the server enforces is the best known bound.
    async with Replay(_sglang_routes()).serve() as url, SGLangClient(url, LLMConfig()) as client:
        assert await client.context_length() == 20474


async def test_older_v1_models_card_still_gives_the_window() -> None:
    routes = _sglang_routes(**{"/v1/models": REAL["v1_models_sglang_older"]})
    async with Replay(routes).serve() as url, SGLangClient(url, LLMConfig()) as client:
        assert await client.context_length() == 40960


async def test_a_vllm_server_is_named_and_refused_for_the_native_api() -> None:
    # vLLM has /v1/models (owned_by vllm) and no /server_info: the client says what it
    # is; a run configured for SGLang's /generate stops at open with one clear line,
    # and the OpenAI API works with it.
    routes = {"/health": _health(), "/v1/models": REAL["v1_models_vllm"],
              "/v1/chat/completions": REAL["chat_completion_sglang"]}
    async with Replay(routes).serve() as url:
        async with SGLangClient(url, LLMConfig()) as client:
            identity = await client.identify()
            assert (identity.kind, identity.owned_by) == ("openai-compatible", "vllm")
            assert await client.context_length() == 65536
            with pytest.raises(LLMRequestError, match=r"no /generate here.*llm.api = \"openai\""):
                await client.generate(text="hi")
        with pytest.raises(LLMRequestError, match=r"OpenAI-compatible server \(owned_by 'vllm'\)"):
            async with ModelRouter(LLMConfig(urls=(url,))):
                pass
        async with ModelRouter(LLMConfig(urls=(url,), api="openai")) as model:
            assert model.context_length == 65536
            assert (await model.chat([{"role": "user", "content": "hi"}], affinity="e")).text == "Hello!"


async def test_sglang_version_is_read_and_a_too_old_one_refused(
        sims: Callable[..., Any]) -> None:
    old = {**REAL["get_server_info_excerpt"], "body": {
        **REAL["get_server_info_excerpt"]["body"], "version": "0.4.6.post5"}}
    current = {**REAL["get_server_info_excerpt"], "body": {
        **REAL["get_server_info_excerpt"]["body"], "version": "0.5.23"}}
    async with Replay(_sglang_routes(**{"/server_info": current})).serve() as url, \
            SGLangClient(url, LLMConfig()) as client:
        identity = await client.identify()
        assert (identity.kind, identity.version) == ("sglang", "0.5.23")
    async with Replay(_sglang_routes(**{"/get_server_info": old})).serve() as url:
        with pytest.raises(LLMRequestError, match=r"SGLang 0.4.6.post5 is too old.*>= 0.5.0"):
            async with ModelRouter(LLMConfig(urls=(url,))):
                pass
    [sim] = await sims()
    async with SGLangClient(sim.url, LLMConfig()) as client:
        assert (await client.identify()).kind == "simulator"


async def test_router_server_info_is_recognised() -> None:
    # sglang-router 0.3.2's own /get_server_info (recorded by test_sglang_router.py).
    routes = {"/get_server_info": {"body": {"router_manager": True, "routers_count": 1,
                                            "workers_count": 2}}}
    async with Replay(routes).serve() as url, SGLangClient(url, LLMConfig()) as client:
        assert (await client.identify()).kind == "sglang-router"
