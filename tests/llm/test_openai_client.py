"""The official ``openai`` client (dev extra, 3.60.0) against the simulator's ``/v1``.

What a new user does first: point a standard client at the URL. These tests prove the
simulator answers that client as an SGLang server does: ``models.list``, chat and text
completions, plain and ``stream=True``, and the cache report in
``usage.prompt_tokens_details.cached_tokens``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

openai = pytest.importorskip("openai", reason="the openai client is in the dev extra")

from rsr_async.llm.prompt import render_chatml  # noqa: E402

FIRST = [{"role": "system", "content": "You are a terminal agent."},
         {"role": "user", "content": "Task Description:\nCreate notes.txt\n$ "}]


def _client(url: str) -> Any:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30)


async def test_models_list_and_retrieve(sims: Callable[..., Any]) -> None:
    [sim] = await sims()
    async with _client(sim.url) as client:
        models = [m async for m in client.models.list()]
        assert [m.id for m in models] == [sim.config.model_name]
        assert models[0].owned_by == "sglang" and models[0].object == "model"
        assert (await client.models.retrieve(sim.config.model_name)).id == sim.config.model_name
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("no-such-model")


async def test_chat_plain_reports_cached_tokens_on_the_next_turn(sims: Callable[..., Any]) -> None:
    # The second turn repeats the first turn and its reply: the server's prefix cache
    # serves them, and the client reads it in usage.prompt_tokens_details.cached_tokens.
    [sim] = await sims()
    async with _client(sim.url) as client:
        first = await client.chat.completions.create(model="m", messages=FIRST, max_tokens=512)
        reply = first.choices[0].message.content
        assert reply and first.choices[0].finish_reason == "stop"
        assert first.usage.prompt_tokens_details.cached_tokens == 0
        second_turn = [*FIRST, {"role": "assistant", "content": reply},
                       {"role": "user", "content": "ok"}]
        second = await client.chat.completions.create(model="m", messages=second_turn, max_tokens=512)
    expected = sim.tokenizer.count(render_chatml(FIRST) + reply + "<|im_end|>")  # type: ignore[arg-type]
    assert second.usage.prompt_tokens_details.cached_tokens == expected
    assert second.usage.prompt_tokens > expected  # prompt_tokens includes the cached ones


async def test_chat_stream_yields_the_plain_reply_in_chunks(sims: Callable[..., Any]) -> None:
    [sim] = await sims()
    async with _client(sim.url) as client:
        plain = await client.chat.completions.create(model="m", messages=FIRST, max_tokens=512)
        stream = await client.chat.completions.create(
            model="m", messages=FIRST, max_tokens=512, stream=True,
            stream_options={"include_usage": True})
        chunks = [chunk async for chunk in stream]
    text_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(text_chunks) > 1
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content for c in text_chunks) == plain.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    assert usage.completion_tokens == plain.usage.completion_tokens
    assert usage.prompt_tokens_details.cached_tokens > 0  # the plain call cached the prompt


async def test_chat_stream_cut_at_max_tokens_says_length(sims: Callable[..., Any]) -> None:
    [sim] = await sims()
    async with _client(sim.url) as client:
        stream = await client.chat.completions.create(model="m", messages=FIRST, max_tokens=3,
                                                      stream=True)
        chunks = [chunk async for chunk in stream]
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["length"]


async def test_text_completions_plain_and_stream(sims: Callable[..., Any]) -> None:
    [sim] = await sims()
    prompt = render_chatml(FIRST)  # type: ignore[arg-type]
    async with _client(sim.url) as client:
        plain = await client.completions.create(model="m", prompt=prompt, max_tokens=40)
        assert plain.object == "text_completion" and plain.choices[0].text
        assert plain.usage.completion_tokens <= 40
        stream = await client.completions.create(model="m", prompt=prompt, max_tokens=40,
                                                 stream=True)
        pieces = [chunk.choices[0].text async for chunk in stream]
    assert len(pieces) > 1 and "".join(pieces) == plain.choices[0].text


async def test_server_error_reaches_the_client_as_an_api_error(sims: Callable[..., Any]) -> None:
    [sim] = await sims(error_rate=1.0)
    async with _client(sim.url) as client:
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(model="m", messages=FIRST)
