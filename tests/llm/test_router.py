"""ModelRouter over several simulators on real loopback ports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import msgspec
import pytest

from rsr_async.config import LLMConfig
from rsr_async.errors import LLMConnectionError, NoHealthyServerError
from rsr_async.llm.base import ChatMessage
from rsr_async.llm.router import ModelRouter
from rsr_async.llm.sim import SimServer

from .conftest import FAST, wait_until

SYSTEM = ("You are an AI assistant tasked with solving command-line tasks in a Linux "
          "environment. Reply with JSON: analysis, plan, commands, task_complete. ") * 4


async def run_episodes(model: ModelRouter, episodes: int, turns: int) -> tuple[int, int]:
    """(prompt tokens, cached tokens) over every turn after each episode's first."""
    totals = [0, 0]
    # Not a multiple of the server count: in lockstep, 64 episodes under round-robin
    # would land every turn of an episode on the same server by accident.
    limiter = anyio.CapacityLimiter(61)

    async def episode(i: int) -> None:
        async with limiter:
            messages: list[ChatMessage] = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"Task Description: job {i}. " + "Fix the build. " * 60},
            ]
            server = None
            for turn in range(turns):
                completion = await model.chat(messages, affinity=f"episode-{i}", max_tokens=256)
                if turn:
                    totals[0] += completion.usage.prompt_tokens
                    totals[1] += completion.usage.cached_tokens
                    if model.config.routing == "sticky":
                        assert completion.server == server  # every turn on its first server
                server = completion.server
                messages = [*messages, {"role": "assistant", "content": completion.text},
                            {"role": "user", "content": f"New Terminal Output:\n$ make\nerror {turn}\n"}]

    async with anyio.create_task_group() as tg:
        for i in range(episodes):
            tg.start_soon(episode, i)
    return totals[0], totals[1]


@pytest.mark.slow
async def test_sticky_routing_keeps_the_prefix_cache_round_robin_does_not(
    sims: Callable[..., Any],
) -> None:
    shares = {}
    for routing in ("sticky", "round_robin"):
        servers = await sims(4)
        async with ModelRouter(LLMConfig(routing=routing),  # type: ignore[arg-type]
                               urls=[s.url for s in servers]) as model:
            prompt, cached = await run_episodes(model, episodes=200, turns=5)
            stats = model.statistics()
        shares[routing] = cached / prompt
        assert stats.usage.requests == 1000 and stats.errors == 0
        assert min(s.requests for s in stats.servers) > 150  # load spread over all four
    assert shares["sticky"] >= 0.90
    assert shares["round_robin"] <= shares["sticky"] - 0.2, shares


async def test_group_affinity_puts_a_runbooks_executions_on_one_server(
    sims: Callable[..., Any],
) -> None:
    servers = await sims(4)
    async with ModelRouter(LLMConfig(), urls=[s.url for s in servers]) as model:
        for runbook in range(8):
            used = {
                (await model.chat([{"role": "user", "content": f"runbook {runbook} exec {m}"}],
                                  affinity=f"runbook-{runbook}#exec-{m}")).server
                for m in range(4)
            }
            assert len(used) == 1
        assert len({s.url for s in model.statistics().servers if s.requests}) > 1


async def test_sticky_choice_yields_when_servers_are_imbalanced(sims: Callable[..., Any]) -> None:
    servers = await sims(2, decode_us_per_token=3000.0)
    urls = [s.url for s in servers]
    for threshold, expect_spread in ((64, False), (3, True)):
        config = LLMConfig(balance_abs_threshold=threshold, balance_rel_threshold=1.5)
        async with ModelRouter(config, urls=urls) as model:
            used: list[str] = []

            async def call(i: int, model: ModelRouter = model, used: list[str] = used,
                           group: str = f"group-{threshold}") -> None:
                completion = await model.chat([{"role": "user", "content": f"call {i}"}],
                                              affinity=f"{group}#{i}")
                used.append(completion.server)

            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(call, i)
                    await anyio.sleep(0.005)
            assert (len(set(used)) == 2) is expect_spread, used
            assert (model.statistics().rerouted > 0) is expect_spread


async def test_in_flight_limit_per_server(sims: Callable[..., Any]) -> None:
    [server] = await sims(decode_us_per_token=2000.0)
    peak = 0
    async with ModelRouter(LLMConfig(max_inflight_per_server=2), urls=[server.url]) as model:
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                nonlocal peak
                while True:
                    peak = max(peak, len(server._running))
                    await anyio.sleep(0.005)

            tg.start_soon(watch)
            async with anyio.create_task_group() as calls:
                for i in range(6):
                    calls.start_soon(lambda i=i: model.chat(
                        [{"role": "user", "content": f"c{i}"}], affinity=f"a{i}"))
            tg.cancel_scope.cancel()
    assert peak == 2


async def test_a_dead_server_is_routed_around_and_its_breaker_opens() -> None:
    config = LLMConfig(breaker_failures=2, breaker_reset_s=60.0, backoff_s=0.01,
                       health_interval_s=0.05, connect_timeout_s=1.0)
    async with SimServer(FAST) as alive:
        dead = SimServer(FAST)
        await dead.__aenter__()
        async with ModelRouter(config, urls=[dead.url, alive.url]) as model:
            for i in range(8):  # pin some episodes to each server
                await model.chat([{"role": "user", "content": f"ep {i}"}], affinity=f"ep-{i}")
            await dead.__aexit__(None, None, None)
            for turn in range(3):
                for i in range(8):
                    completion = await model.chat([{"role": "user", "content": f"ep {i} t{turn}"}],
                                                  affinity=f"ep-{i}")
                    assert completion.server == alive.url
            await wait_until(lambda: not model.statistics().servers[0].healthy)
            stats = model.statistics()
            assert stats.servers[0].errors >= 1 and not stats.servers[0].healthy
            assert stats.servers[1].requests >= 24
    quick = msgspec.structs.replace(config, max_retries=1)
    async with ModelRouter(quick, urls=[dead.url]) as model:
        assert not model.statistics().servers[0].healthy  # probed on entry
        # The health flag alone never fails a call: it is tried on the server, which
        # decides (here: nobody listens), and the breaker then opens.
        with pytest.raises(LLMConnectionError, match=dead.url.split("//")[1]):
            await model.chat([{"role": "user", "content": "anyone?"}], affinity="x")
        assert model.statistics().servers[0].breaker_open  # its two tries failed
        with pytest.raises(NoHealthyServerError):  # the breaker, not the flag, refuses it
            await model.chat([{"role": "user", "content": "anyone?"}], affinity="x")


async def test_a_server_down_at_the_start_is_used_once_it_answers() -> None:
    config = LLMConfig(backoff_s=0.05, max_retries=2, health_interval_s=30.0, connect_timeout_s=1.0)
    late = SimServer(FAST)
    await late.__aenter__()
    url = late.url
    await late.__aexit__(None, None, None)
    async with ModelRouter(config, urls=[url]) as model:
        assert not model.statistics().servers[0].healthy
        port = int(url.rsplit(":", 1)[1])
        async with SimServer(msgspec.structs.replace(FAST, port=port)):
            completion = await model.chat([{"role": "user", "content": "back?"}], affinity="x")
            assert completion.server == url
            await wait_until(lambda: model.statistics().servers[0].healthy)  # rechecked within ~1 s


async def test_breaker_opens_on_a_server_that_is_up_but_failing(sims: Callable[..., Any]) -> None:
    failing, good = await sims(2)
    failing.config = msgspec.structs.replace(failing.config, error_rate=1.0)
    config = LLMConfig(breaker_failures=3, breaker_reset_s=60.0, backoff_s=0.001, max_retries=6)
    async with ModelRouter(config, urls=[failing.url, good.url]) as model:
        for i in range(12):
            completion = await model.chat([{"role": "user", "content": f"q{i}"}], affinity=f"a{i}")
            assert completion.server == good.url
        stats = model.statistics()
        assert stats.servers[0].breaker_open and stats.servers[0].healthy
        assert stats.servers[0].errors == 3 and failing.faults["error"] == 3  # then skipped
        assert stats.servers[1].requests == 12


async def test_router_mode_usage_accounting_and_context_length(sims: Callable[..., Any]) -> None:
    [server] = await sims(context_length=9000)
    config = LLMConfig(routing="router", api="openai")
    with pytest.raises(LLMConnectionError, match="one sglang-router URL"):
        ModelRouter(config, urls=[server.url, server.url])
    async with ModelRouter(config, urls=[server.url]) as model:
        assert model.context_length == 9000 and model.model_name == "scripted-stand-in"
        messages: list[ChatMessage] = [{"role": "user", "content": "Task Description: count"}]
        total = 0
        for _ in range(3):
            completion = await model.chat(messages, affinity="episode-1")
            total += completion.usage.prompt_tokens
            messages = [*messages, {"role": "assistant", "content": completion.text},
                        {"role": "user", "content": "ok"}]
        episode = model.usage("episode-1")
        assert episode.requests == 3 and episode.prompt_tokens == total
        assert episode.cached_tokens > 0
        assert model.statistics().usage.prompt_tokens == total
        assert model.pop_usage("episode-1") == episode and model.usage("episode-1").requests == 0
