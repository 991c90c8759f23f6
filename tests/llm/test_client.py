"""SGLangClient over real HTTP against in-process simulators."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from rsr_async.config import LLMConfig
from rsr_async.errors import ContextLengthError, LLMRequestError, LLMServerError, LLMTimeoutError
from rsr_async.llm.base import ChatMessage
from rsr_async.llm.client import SGLangClient
from rsr_async.llm.prompt import render_chatml

from .conftest import wait_until

FIRST: list[ChatMessage] = [
    {"role": "system", "content": "You are a careful terminal agent. " * 10},
    {"role": "user", "content": "Task Description: list the files in /app."},
]


def _next_turn(messages: list[ChatMessage], reply: str) -> list[ChatMessage]:
    return [*messages, {"role": "assistant", "content": reply},
            {"role": "user", "content": "New Terminal Output:\n$ ls\nREADME.md\n"}]


@pytest.mark.parametrize("api", ["native", "openai"])
async def test_usage_and_cached_tokens_across_turns(sims: Callable[..., Any], api: str) -> None:
    [sim] = await sims()
    async with SGLangClient(sim.url, LLMConfig(api=api)) as client:  # type: ignore[arg-type]
        first = await client.chat(FIRST)
        assert first.finish_reason == "stop" and '"keystrokes"' in first.text
        assert first.usage.cached_tokens == 0
        assert first.usage.prompt_tokens == sim.tokenizer.count(render_chatml(FIRST))
        assert first.usage.completion_tokens == sim.tokenizer.count(first.text)
        second = await client.chat(_next_turn(FIRST, first.text))
        # Everything up to and including the first reply was cached by the server.
        cached_expected = sim.tokenizer.count(render_chatml(FIRST) + first.text + "<|im_end|>")
        assert second.usage.cached_tokens == cached_expected
        assert second.usage.prompt_tokens > cached_expected
        assert second.usage.latency_s > 0 and second.server == sim.url
    assert sim.cached_tokens_total == cached_expected


async def test_openai_usage_without_cache_details_means_zero(sims: Callable[..., Any]) -> None:
    # A server launched without --enable-cache-report answers prompt_tokens_details: null
    # (SGLang 0.5.23's UsageProcessor; tests/llm/test_server_shapes.py): no cache report
    # reads as 0 cached tokens, even on a turn the server did serve from its cache.
    [sim] = await sims(enable_cache_report=False)
    async with SGLangClient(sim.url, LLMConfig(api="openai")) as client:
        fresh = await client.chat(FIRST)
        again = await client.chat(FIRST)
        assert fresh.usage.cached_tokens == 0 and again.usage.cached_tokens == 0
        assert fresh.usage.prompt_tokens > 0 and sim.cached_tokens_total > 0
    async with httpx.AsyncClient() as http:
        body = (await http.post(sim.url + "/v1/chat/completions", json={
            "messages": FIRST, "max_tokens": 64})).json()
    assert body["usage"]["prompt_tokens_details"] is None


async def test_max_new_tokens_is_always_sent_and_length_is_reported(sims: Callable[..., Any]) -> None:
    [sim] = await sims()
    async with SGLangClient(sim.url, LLMConfig()) as client:
        cut = await client.chat(FIRST, max_tokens=5)
        assert cut.finish_reason == "length" and cut.usage.completion_tokens == 5
        full = await client.chat(FIRST)  # llm.max_new_tokens (4096), not SGLang's 128
        assert full.finish_reason == "stop"
        ids = await client.generate(input_ids=sim.tokenizer.encode(render_chatml(FIRST)),
                                    max_new_tokens=7)
        assert ids.output_ids is not None and len(ids.output_ids) == 7
        streamed = await client.generate(text=render_chatml(FIRST), stream=True)
        assert streamed.text == full.text and streamed.usage.cached_tokens > 0


async def test_context_length_error_is_its_own_exception_and_not_retried(
    sims: Callable[..., Any],
) -> None:
    [sim] = await sims(context_length=50)
    long: list[ChatMessage] = [{"role": "user", "content": "word " * 100}]
    for api in ("native", "openai"):
        async with SGLangClient(sim.url, LLMConfig(api=api, backoff_s=0.01)) as client:  # type: ignore[arg-type]
            with pytest.raises(ContextLengthError, match="context length"):
                await client.chat(long)
    assert sim.requests_total == 0


async def test_other_4xx_is_not_retried(sims: Callable[..., Any]) -> None:
    [sim] = await sims()
    async with SGLangClient(sim.url, LLMConfig(backoff_s=0.01)) as client:
        with pytest.raises(LLMRequestError):
            await client.generate(text=["batched", "prompts"])  # the sim refuses batches: 400
    assert sim.faults.total() == 0 and sim.requests_total == 0


async def test_retries_under_injected_faults_lose_nothing_and_duplicate_nothing(
    sims: Callable[..., Any],
) -> None:
    [sim] = await sims(error_rate=0.25, drop_rate=0.15, seed=3)
    config = LLMConfig(max_retries=8, backoff_s=0.001)
    results: list[str] = []
    async with SGLangClient(sim.url, config) as client:
        async def one(i: int) -> None:
            completion = await client.chat([{"role": "user", "content": f"request {i}"}])
            results.append(completion.text)

        async with anyio.create_task_group() as tg:
            for i in range(60):
                tg.start_soon(one, i)
    assert len(results) == 60
    assert sim.faults["error"] > 0 and sim.faults["drop"] > 0
    assert sim.requests_total == 60  # a fault happens before any work: no duplicate answers
    assert all(count == 1 for count in sim.completed.values())


async def test_error_inside_a_200_stream_is_retried(sims: Callable[..., Any]) -> None:
    [flaky, broken] = await sims(2, error_rate=0.5, seed=1)
    async with SGLangClient(flaky.url, LLMConfig(max_retries=10, backoff_s=0.001)) as client:
        for _ in range(6):
            assert (await client.generate(text=render_chatml(FIRST), stream=True)).text
    assert flaky.faults["error"] > 0 and flaky.requests_total == 6
    broken.config = broken.config.__class__(error_rate=1.0)
    async with SGLangClient(broken.url, LLMConfig(max_retries=2, backoff_s=0.001)) as client:
        with pytest.raises(LLMServerError, match="inside a 200 stream"):
            await client.generate(text=render_chatml(FIRST), stream=True)
    assert broken.faults["error"] == 3


async def test_cancelling_a_call_aborts_it_on_the_server(sims: Callable[..., Any]) -> None:
    [sim] = await sims(slow_rate=1.0, slow_s=30.0)
    for api in ("native", "openai"):
        async with SGLangClient(sim.url, LLMConfig(api=api)) as client:  # type: ignore[arg-type]
            with anyio.move_on_after(0.3):
                await client.chat(FIRST)
            await wait_until(lambda: bool(sim.aborted) and not sim._running)
    assert len(sim.aborted) == 2 and sim.requests_total == 0


async def test_abort_request_ends_a_running_request_with_finish_abort(
    sims: Callable[..., Any],
) -> None:
    [sim] = await sims(slow_rate=1.0, slow_s=30.0)
    results = []
    async with SGLangClient(sim.url, LLMConfig()) as client:
        async with anyio.create_task_group() as tg:
            async def call() -> None:
                results.append(await client.generate(text=render_chatml(FIRST), rid="abort-me"))

            tg.start_soon(call)
            await wait_until(lambda: "abort-me" in sim._running)
            await client.abort("abort-me")
    assert results[0].finish_reason == "abort" and results[0].text == ""
    assert sim.aborted == ["abort-me"]


async def test_total_deadline_is_enforced(sims: Callable[..., Any]) -> None:
    [sim] = await sims(slow_rate=1.0, slow_s=30.0)
    async with SGLangClient(sim.url, LLMConfig(total_timeout_s=0.3, backoff_s=0.01)) as client:
        with anyio.fail_after(5), pytest.raises(LLMTimeoutError, match="total_timeout_s"):
            await client.chat(FIRST)


async def test_connection_refused_is_retried_then_raised() -> None:
    config = LLMConfig(max_retries=2, backoff_s=0.01, connect_timeout_s=1.0)
    async with SGLangClient("http://127.0.0.1:9", config) as client:
        assert not await client.health(timeout_s=1.0)
        with pytest.raises(Exception) as info:
            await client.chat(FIRST)
    from rsr_async.errors import LLMConnectionError

    assert isinstance(info.value, LLMConnectionError)
