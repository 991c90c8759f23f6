from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from rsr_async.config import LLMConfig, SimConfig
from rsr_async.llm.client import SGLangClient
from rsr_async.llm.scripted import ScriptedModel
from rsr_async.llm.sim import spawn_sim_servers
from rsr_async.llm.sim.radix import RadixCache
from rsr_async.llm.tokenizer import SimTokenizer

from .conftest import INSTRUCTION


def test_radix_matches_prefixes_and_splits_edges() -> None:
    cache = RadixCache(1000)
    assert cache.insert([1, 2, 3, 4, 5]) == 5
    assert cache.match([1, 2, 3, 9]) == 3
    assert cache.insert([1, 2, 3, 9, 9]) == 2  # shares 1,2,3: only the new branch is added
    assert cache.size == 7
    assert cache.match([1, 2, 3, 4, 5, 6]) == 5
    assert cache.match([7]) == 0


def test_radix_evicts_least_recently_used_first() -> None:
    cache = RadixCache(10)
    cache.insert([1, 1, 1, 1])
    cache.insert([2, 2, 2, 2])
    cache.match([1, 1, 1, 1])  # touch: [2...] is now the oldest
    cache.insert([3, 3, 3, 3])
    assert cache.size <= 10
    assert cache.match([2, 2, 2, 2]) == 0
    assert cache.match([1, 1, 1, 1]) == 4
    assert cache.match([3, 3, 3, 3]) == 4
    assert cache.evicted == 4


def test_tokenizer_is_deterministic_and_special_tokens_are_single() -> None:
    a, b = SimTokenizer(), SimTokenizer()
    text = "<|im_start|>user\nHello, world_wide 12345!<|im_end|>\n"
    assert a.encode(text) == b.encode(text)
    assert a.pieces(text)[0] == "<|im_start|>"
    assert a.decode(a.encode(text)) == text
    assert a.count(text) == len(a.encode(text))


async def test_metrics_server_info_flush_and_models(sims: Callable[..., Any]) -> None:
    [sim] = await sims()
    async with SGLangClient(sim.url, LLMConfig()) as client:
        await client.chat([{"role": "user", "content": "hello there"}])
        info = await client.model_info()
        assert info["model_path"] == sim.config.model_name and "context_length" not in info
        assert await client.context_length() == 32768  # from /v1/models' max_model_len
        assert await client.health()
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(sim.url + "/metrics")).text
            for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
                         "sglang:cache_hit_rate", "sglang:prompt_tokens_total",
                         "sglang:cached_tokens_total", "sglang:generation_tokens_total",
                         "sglang:time_to_first_token_seconds_bucket",
                         "sglang:e2e_request_latency_seconds_count"):
                assert name in metrics, name
            assert (await http.get(sim.url + "/v1/models")).json()["data"][0]["id"]
            assert (await http.get(sim.url + "/get_server_info")).json()["max_running_requests"]
        assert sim.cache.size > 0
        await client.flush_cache()
        assert sim.cache.size == 0


async def test_queueing_and_latency_model(sims: Callable[..., Any]) -> None:
    # One slot, ~60 ms of decode per request: 4 concurrent requests take ~4x as long.
    [sim] = await sims(max_running_requests=1, decode_us_per_token=500.0)
    async with SGLangClient(sim.url, LLMConfig()) as client:
        messages = [{"role": "user", "content": "queue me"}]
        start = time.perf_counter()
        one = await client.chat(messages)  # type: ignore[arg-type]
        single = time.perf_counter() - start
        assert single >= one.usage.completion_tokens * 500e-6
        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(client.chat, messages)
        assert time.perf_counter() - start >= 3.5 * one.usage.completion_tokens * 500e-6


@pytest.mark.slow
async def test_spawned_simulators_are_separate_processes_and_go_away(tasks_dir: Any) -> None:
    async with spawn_sim_servers(SimConfig(decode_us_per_token=0.0), count=2,
                                 tasks_dir=tasks_dir) as urls:
        assert len(set(urls)) == 2
        async with httpx.AsyncClient() as http:
            for url in urls:
                assert (await http.get(url + "/health")).status_code == 200
        # Each subprocess learned the tasks and answers as the in-process model does.
        messages = [{"role": "user", "content": f"Task Description:\n{INSTRUCTION}\n$ "}]
        local = ScriptedModel.from_tasks_dir(tasks_dir)
        for url in urls:
            async with SGLangClient(url, LLMConfig()) as client:
                for _ in range(3):
                    reply = (await client.chat(messages)).text  # type: ignore[arg-type]
                    assert reply == local.reply(messages)  # type: ignore[arg-type]
                    messages = [*messages, {"role": "assistant", "content": reply},
                                {"role": "user", "content": "ok"}]
    async with httpx.AsyncClient() as http:
        for url in urls:
            with pytest.raises(httpx.ConnectError):
                await http.get(url + "/health")
