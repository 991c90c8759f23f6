"""Oversized model replies (issue 15): capped at the transport, bounded memory, no loop
stall, answered as an output-limit reply and never retried. A real HTTP server in a
subprocess on 127.0.0.1 sends the replies, so its work is not on the test's loop."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import tracemalloc
from collections.abc import Iterator

import anyio
import httpx
import pytest

from rsr_async.config import LLMConfig, load_config
from rsr_async.errors import ConfigError
from rsr_async.llm import SGLangClient

BIG = 30 * 1024 * 1024
MID = 3 * 1024 * 1024

_SERVER = textwrap.dedent("""
    import json, sys
    from aiohttp import web

    BIG, MID = int(sys.argv[1]), int(sys.argv[2])
    META = {"prompt_tokens": 1, "completion_tokens": 1, "finish_reason": {"type": "stop"}}
    def body(n):
        return json.dumps({"text": "x" * n, "meta_info": META}).encode()
    def chat(n):
        return json.dumps({"choices": [{"message": {"role": "assistant", "content": "y" * n},
                           "finish_reason": "stop"}], "usage": {}}).encode()
    BODIES = {"big": body(BIG), "mid": body(MID), "chat": chat(BIG)}
    hits = {"n": 0}

    async def generate(request):
        await request.read()
        hits["n"] += 1
        mode = request.match_info["mode"]
        if mode == "chunked":  # no content-length: the client must count as it reads
            response = web.StreamResponse(headers={"content-type": "application/json"})
            await response.prepare(request)
            data = BODIES["big"]
            for i in range(0, len(data), 1 << 20):
                await response.write(data[i:i + (1 << 20)])
            return response
        return web.Response(body=BODIES[mode], content_type="application/json")

    async def count(request):
        return web.json_response(hits)

    async def main():
        app = web.Application(client_max_size=1 << 20)
        app.add_routes([web.post("/{mode}/generate", generate),
                        web.post("/{mode}/v1/chat/completions", generate),
                        web.get("/count", count)])
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(f"http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
        await asyncio.Event().wait()

    import asyncio
    asyncio.run(main())
""")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    process = subprocess.Popen([sys.executable, "-c", _SERVER, str(BIG), str(MID)],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.kill()
        process.wait()


def _hits(url: str) -> int:
    return int(httpx.get(url + "/count", timeout=5).json()["n"])


class _Ticker:
    """The longest gap between wake-ups of a task that asks to sleep 5 ms."""

    def __init__(self) -> None:
        self.worst = 0.0

    async def run(self) -> None:
        last = time.perf_counter()
        while True:
            await anyio.sleep(0.005)
            now = time.perf_counter()
            self.worst = max(self.worst, now - last - 0.005)
            last = now


async def _call(url: str, config: LLMConfig, *, stream: bool = False):  # type: ignore[no-untyped-def]
    ticker = _Ticker()
    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker.run)
        async with SGLangClient(url, config) as client:
            if config.api == "openai":
                result = await client.chat([{"role": "user", "content": "hi"}])
            else:
                result = await client.generate(text="hi", stream=stream)
        tg.cancel_scope.cancel()
    return result, ticker.worst


CAP = LLMConfig(max_reply_bytes=1024 * 1024, backoff_s=0.01)


@pytest.mark.parametrize("mode", ["big", "chunked"])
async def test_oversized_reply_is_an_output_limit_reply_not_retried(server: str, mode: str) -> None:
    before = _hits(server)
    result, worst = await _call(f"{server}/{mode}", CAP)
    assert (result.text, result.finish_reason) == ("", "length")
    assert _hits(server) == before + 1, "an oversized reply must not be retried"
    assert worst < 0.1, f"the loop stalled {worst * 1000:.0f} ms"


async def test_oversized_chat_reply_is_an_output_limit_reply(server: str) -> None:
    config = LLMConfig(max_reply_bytes=1024 * 1024, api="openai", backoff_s=0.01)
    result, worst = await _call(f"{server}/chat", config)
    assert (result.text, result.finish_reason) == ("", "length")
    assert worst < 0.1


async def test_oversized_stream_is_an_output_limit_reply(server: str) -> None:
    before = _hits(server)
    result, worst = await _call(f"{server}/chunked", CAP, stream=True)
    assert (result.text, result.finish_reason) == ("", "length")
    assert _hits(server) == before + 1
    assert worst < 0.1


@pytest.mark.parametrize("mode", ["big", "chunked"])
async def test_oversized_reply_memory_stays_bounded(server: str, mode: str) -> None:
    tracemalloc.start()
    try:
        result, _ = await _call(f"{server}/{mode}", CAP)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.finish_reason == "length"
    # Unbounded, the 30 MiB body alone (then its decoded text) would be read.
    assert peak < 8 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB for a 30 MiB reply"


async def test_large_reply_under_the_cap_is_decoded_off_the_loop(server: str) -> None:
    result, worst = await _call(f"{server}/mid", LLMConfig())  # default cap: 4 MiB
    assert result.text == "x" * MID
    assert result.finish_reason == "stop"
    assert worst < 0.1, f"the loop stalled {worst * 1000:.0f} ms"


def test_max_reply_bytes_is_documented_and_checked() -> None:
    assert LLMConfig().max_reply_bytes == 4 * 1024 * 1024
    with pytest.raises(ConfigError, match="llm.max_reply_bytes: expected an integer >= 1"):
        load_config(overrides=["llm.max_reply_bytes=0"])
