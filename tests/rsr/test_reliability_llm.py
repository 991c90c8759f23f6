"""Model-side reliability of a run (issue 15): real subprocesses, real HTTP, real Docker."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from aiohttp import web

from rsr_async.config import Config, LLMConfig, load_config, retry_span_s
from rsr_async.errors import ConfigError, LLMConnectionError
from rsr_async.llm import ModelRouter, SimServer
from rsr_async.rsr.runtime import episode_runtime, run_id_for
from rsr_async.tasks import BUNDLED_SUITE
from tests.conftest import run_cli_env


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _containers(label: str) -> list[str]:
    return subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=rsr_async.run={label}"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()


@pytest.mark.docker
@pytest.mark.timeout(120)
def test_run_with_every_server_down_fails_before_any_container(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    label = run_id_for(run_dir)
    before = _containers(label)
    url = f"http://127.0.0.1:{_closed_port()}"
    listing = tmp_path / "tasks.txt"
    listing.write_text(f"{BUNDLED_SUITE / 'word-frequency'}\n{BUNDLED_SUITE / 'merge-intervals'}\n")
    done = subprocess.run(
        [sys.executable, "-m", "rsr_async", "run", "--dataset", str(listing), "--run-dir",
         str(run_dir), "--progress", "none", "--attempts", "1", "--llm-url", url,
         "--set", "llm.probe_timeout_s=3"],
        env=run_cli_env(), capture_output=True, text=True, timeout=90,
    )
    try:
        assert done.returncode == 1, done.stderr
        assert url in done.stderr
        assert "no sandbox was started" in done.stderr
        assert "Traceback" not in done.stderr
        assert _containers(label) == before == []
    finally:
        leftover = _containers(label)
        if leftover:
            subprocess.run(["docker", "rm", "-f", *leftover], capture_output=True, timeout=120)


@pytest.mark.docker
@pytest.mark.timeout(120)
async def test_some_servers_down_warns_and_goes_on(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}"
    notices: list[str] = []
    async with SimServer() as sim:
        config = Config(llm=LLMConfig(urls=(sim.url, dead), probe_timeout_s=3.0))
        async with episode_runtime(config, run_dir=tmp_path / "run", on_notice=notices.append) as rt:
            servers = {s.url: s.healthy for s in rt.model.statistics().servers}
    assert servers == {sim.url: True, dead: False}
    assert any(dead in n and "1 of 2" in n for n in notices), notices


async def test_probe_has_a_deadline(tmp_path: Path) -> None:
    # A server that accepts connections but never answers: the probe gives up on time.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = Config(llm=LLMConfig(urls=(url,), probe_timeout_s=0.5, connect_timeout_s=0.5))
        start = anyio.current_time()
        with pytest.raises(LLMConnectionError, match="no sandbox was started") as info:
            async with episode_runtime(config, run_dir=tmp_path / "run"):
                pass
        assert url in str(info.value)
        assert anyio.current_time() - start < 5.0


# -- the breaker's reset fits inside the client's retry budget ----------------------------

def test_config_loading_refuses_a_breaker_that_outlasts_the_retries() -> None:
    assert load_config().llm.breaker_reset_s <= retry_span_s(load_config().llm)
    with pytest.raises(ConfigError, match="breaker_reset_s"):
        load_config(overrides=["llm.breaker_reset_s=10"])
    # More retries buy a longer reset.
    assert load_config(overrides=["llm.breaker_reset_s=10", "llm.max_retries=6"])


async def test_one_server_that_blinks_decides_the_calls_not_the_breaker() -> None:
    # The case: one server, several calls fail at once, the breaker opens. With
    # the loaded defaults every call is retried after the breaker half-opens, and all
    # succeed once the server is back.
    failures_left = [LLMConfig().breaker_failures]

    async def generate(request: web.Request) -> web.Response:
        await request.read()
        if failures_left[0] > 0:
            failures_left[0] -= 1
            return web.Response(status=500, text="blink")
        return web.json_response({"text": "ok", "meta_info": {
            "prompt_tokens": 1, "completion_tokens": 1, "finish_reason": {"type": "stop"}}})

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    app = web.Application()
    app.add_routes([web.post("/generate", generate), web.get("/health", health)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        # This stand-in serves /generate and /health only: it reports no context window.
        config = load_config(overrides=[f'llm.urls=["{url}"]', "llm.context_length=32768"])
        replies: list[str] = []
        async with ModelRouter(config.llm) as model:
            async def call(i: int) -> None:
                reply = await model.chat([{"role": "user", "content": "hi"}], affinity=f"e{i}")
                replies.append(reply.text)

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    for i in range(LLMConfig().breaker_failures):
                        tg.start_soon(call, i)
        assert replies == ["ok"] * LLMConfig().breaker_failures
    finally:
        await runner.cleanup()
