"""The client and ModelRouter in front of an sglang-router URL (the stand-in of
``router_standin.py``, over real simulators; ``test_sglang_router.py`` runs the real one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from rsr_async.config import LLMConfig
from rsr_async.errors import LLMConnectionError, LLMRequestError
from rsr_async.llm.client import AbortStats, SGLangClient
from rsr_async.llm.prompt import render_chatml
from rsr_async.llm.router import ModelRouter

from .conftest import wait_until
from .router_standin import RouterStandIn

FIRST = [{"role": "user", "content": "Task Description: list the files."}]


async def _abandon_one_call(client: SGLangClient, sims: list[Any]) -> None:
    """Start a call, cancel it once a simulator is running it, wait for the abort there."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: client.generate(text=render_chatml(FIRST), rid="gone"))
        await wait_until(lambda: any(s._running for s in sims))
        tg.cancel_scope.cancel()
    await wait_until(lambda: any(s.aborted for s in sims) and not any(s._running for s in sims))


async def test_abort_through_a_router_is_by_closing_the_connection(
    sims: Callable[..., Any],
) -> None:
    workers = await sims(2, slow_rate=1.0, slow_s=30.0)
    async with RouterStandIn([w.url for w in workers]) as router, \
            SGLangClient(router.url, LLMConfig()) as client:
        await _abandon_one_call(client, workers)
        # The worker aborted it (the closed connection reached it through the router);
        # the router's /abort_request answered 404 and is not counted as the path.
        assert [s.aborted for s in workers if s.aborted] == [["gone"]]
        assert client.abort_statistics() == AbortStats(by_close=1, by_endpoint=0,
                                                       endpoint="unavailable")
        with pytest.raises(LLMRequestError, match="no abort endpoint.*not aborted"):
            await client.abort("anything")
        await _abandon_one_call(client, workers)  # the endpoint is not posted again
        assert client.abort_statistics().by_close == 2
    assert sum(s.requests_total for s in workers) == 0


async def test_abort_endpoint_is_counted_where_it_exists(sims: Callable[..., Any]) -> None:
    [sim] = await sims(slow_rate=1.0, slow_s=30.0)
    async with SGLangClient(sim.url, LLMConfig()) as client:
        await _abandon_one_call(client, [sim])
        assert client.abort_statistics() == AbortStats(by_close=1, by_endpoint=1,
                                                       endpoint="available")
        await client.abort("not-running")  # SGLang takes an abort for any rid: no raise
    assert sim.aborted == ["gone"]


async def test_context_length_through_a_router_is_the_smallest_of_its_workers(
    sims: Callable[..., Any],
) -> None:
    wide, narrow = await sims(1, context_length=9000) + await sims(1, context_length=7000)
    async with RouterStandIn([wide.url, narrow.url]) as router:
        async with ModelRouter(LLMConfig(routing="router"), urls=[router.url]) as model:
            assert model.context_length == 7000
            [server] = model.statistics().servers
            assert set(server.workers) == {wide.url, narrow.url}
            completion = await model.chat(FIRST, affinity="e1")  # type: ignore[arg-type]
            assert completion.text


async def test_no_context_length_fails_naming_the_router_and_the_setting(
    sims: Callable[..., Any],
) -> None:
    down = "http://127.0.0.1:9"  # a worker the router lists but that does not answer
    async with RouterStandIn([down]) as router:
        config = LLMConfig(routing="router", connect_timeout_s=1.0)
        with pytest.raises(LLMConnectionError) as info:
            async with ModelRouter(config, urls=[router.url]):
                pass
        message = str(info.value)
        assert router.url in message and down in message and "llm.context_length" in message
        # Set, the setting is what it says: the window used when nothing reports one.
        async with ModelRouter(LLMConfig(routing="router", context_length=5000,
                                         connect_timeout_s=1.0), urls=[router.url]) as model:
            assert model.context_length == 5000


async def test_servers_down_at_start_leave_the_window_to_the_probe(
    sims: Callable[..., Any],
) -> None:
    [sim] = await sims(context_length=6000)
    async with ModelRouter(LLMConfig(connect_timeout_s=1.0), urls=[sim.url]) as model:
        assert model.context_length == 6000
    # Down when the router opens: no guess; asking for the window says what to do.
    async with ModelRouter(LLMConfig(connect_timeout_s=1.0, probe_timeout_s=1.0),
                           urls=["http://127.0.0.1:9"]) as model:
        with pytest.raises(LLMConnectionError, match="llm.context_length"):
            _ = model.context_length
        assert await model.probe_servers() == ("http://127.0.0.1:9",)
