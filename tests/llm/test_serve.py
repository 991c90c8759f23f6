"""``serve``: the commands it builds, and a real run with the simulator as the launcher."""

from __future__ import annotations

import socket
import subprocess
import sys

import httpx
import pytest

from rsr_async.config import LLMConfig
from rsr_async.llm.client import SGLangClient
from rsr_async.llm.serve import ServeSpec, build_commands, router_settings, serve_fleet
from tests.conftest import run_cli_env


def test_commands_for_servers_and_router() -> None:
    spec = ServeSpec(model_path="Qwen/Qwen3-8B", servers=2, tp=4, base_port=31000, router=True,
                     router_port=30999, extra_args=("--schedule-policy", "lpm"))
    servers, router = build_commands(spec)[:2], build_commands(spec)[2]
    assert servers[0][:3] == [sys.executable, "-m", "sglang.launch_server"]
    for i, argv in enumerate(servers):
        assert argv[argv.index("--model-path") + 1] == "Qwen/Qwen3-8B"
        assert argv[argv.index("--tp-size") + 1] == "4"
        assert argv[argv.index("--port") + 1] == str(31000 + i)
        assert "--enable-metrics" in argv and "--enable-cache-report" in argv
        assert argv[-2:] == ["--schedule-policy", "lpm"]
    assert router[:3] == [sys.executable, "-m", "sglang_router.launch_router"]
    assert router[router.index("--worker-urls") + 1:router.index("--worker-urls") + 3] == [
        "http://127.0.0.1:31000", "http://127.0.0.1:31001"]
    assert router[router.index("--policy") + 1] == "cache_aware"


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_router_balance_threshold_follows_the_run_concurrency() -> None:
    # sglang-router's cache_aware rule (README "Models"): the least loaded worker gets the
    # request once max - min > abs threshold and max > min * rel threshold. Its default
    # abs threshold (64) is never crossed by 32 in flight; serve's is a quarter of each
    # server's share.
    for concurrency, servers, expected in ((32, 2, 4), (512, 8, 16), (3, 2, 1), (64, 1, 16)):
        spec = ServeSpec(model_path="m", servers=servers, router=True, concurrency=concurrency)
        router = build_commands(spec)[-1]
        assert _flag(router, "--balance-abs-threshold") == str(expected)
        assert _flag(router, "--balance-rel-threshold") == "1.5"
        assert _flag(router, "--cache-threshold") == "0.3"
        assert f"{concurrency} in flight over {servers} servers" in router_settings(spec).reason
    given = ServeSpec(model_path="m", servers=2, router=True, balance_abs_threshold=64,
                      router_args=("--log-level", "warn"))
    router = build_commands(given)[-1]
    assert _flag(router, "--balance-abs-threshold") == "64" and router[-2:] == ["--log-level", "warn"]
    other = build_commands(ServeSpec(model_path="m", servers=2, router=True,
                                     router_policy="round_robin"))[-1]
    assert _flag(other, "--policy") == "round_robin" and "--balance-abs-threshold" not in other


def test_dry_run_with_router_says_which_settings_and_why() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rsr_async", "serve", "--model-path", "m", "--servers", "2",
         "--router", "--concurrency", "32", "--dry-run"],
        env=run_cli_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    said, *commands = out.stdout.strip().splitlines()
    assert said.startswith("router: --policy cache_aware") and "--balance-abs-threshold 4" in said
    assert "32 in flight over 2 servers" in said and "default 64" in said
    assert "--balance-abs-threshold 4" in commands[-1] and len(commands) == 3


def test_dry_run_prints_the_commands() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rsr_async", "serve", "--model-path", "m", "--servers", "2",
         "--dry-run"], env=run_cli_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2 and all("sglang.launch_server" in line for line in lines)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.slow
async def test_serve_fleet_starts_waits_and_stops_with_the_simulator_as_launcher() -> None:
    base = _free_port()
    spec = ServeSpec(model_path="sim-model", servers=1, base_port=base,
                     launcher=(sys.executable, "-m", "rsr_async", "sim-server"))
    async with serve_fleet(spec, ready_timeout_s=60, grace_s=10) as urls:
        assert urls == [f"http://127.0.0.1:{base}"]
        async with SGLangClient(urls[0], LLMConfig()) as client:
            info = await client.model_info()
            assert info["model_path"] == "sim-model"  # --model-path reached the server
            assert (await client.chat([{"role": "user", "content": "hi"}])).text
    async with httpx.AsyncClient() as http:
        with pytest.raises(httpx.ConnectError):
            await http.get(urls[0] + "/health")
