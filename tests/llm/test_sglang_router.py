"""The real sglang-router (``pip install sglang-router``; 0.3.2 recorded) started by
``serve --router`` in front of two simulator workers, on loopback.

What it records about the router, and the code that depends on it:
- ``/abort_request`` answers 404, and closing a request's connection aborts it at the
  worker (the client's abort accounting);
- ``/get_server_info`` is the router's own, ``/workers`` lists the workers (context
  length discovery; ``router_standin.py`` mirrors this surface for the other tests);
- cache_aware with its default balance threshold (64) sends a 32-concurrent run with a
  shared system prompt to one worker, and ``serve``'s threshold spreads it;
- the ``smg_*`` metric families it exports are the names recorded from its library
  (``fixtures/sglang_shapes.json``).

Skipped, saying why, where the router is not installed. ``RSR_SGLANG_ROUTER_PYTHON``
names a Python that has it (default: this one).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from rsr_async.config import LLMConfig
from rsr_async.errors import LLMRequestError
from rsr_async.llm.base import ChatMessage
from rsr_async.llm.client import AbortStats, SGLangClient
from rsr_async.llm.prompt import render_chatml
from rsr_async.llm.router import ModelRouter
from rsr_async.llm.serve import ServeSpec, build_commands, router_settings, serve_fleet

ROUTER_PYTHON = os.environ.get("RSR_SGLANG_ROUTER_PYTHON", sys.executable)
RECORDED_ROUTER = json.loads(
    (Path(__file__).parent / "fixtures" / "sglang_shapes.json").read_text())["router"]


def _router_installed() -> bool:
    if ROUTER_PYTHON == sys.executable:
        return importlib.util.find_spec("sglang_router") is not None
    try:
        return subprocess.run([ROUTER_PYTHON, "-c", "import sglang_router"], timeout=60,
                              capture_output=True).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = pytest.mark.skipif(
    not _router_installed(),
    reason=f"sglang-router is not importable by {ROUTER_PYTHON} (pip install sglang-router, "
           "in the dev extra; or set RSR_SGLANG_ROUTER_PYTHON to a Python that has it)",
)

SYSTEM = ("You are an AI assistant tasked with solving command-line tasks in a Linux "
          "environment. Reply with JSON: analysis, plan, commands, task_complete. ") * 8


def _free_ports(count: int) -> int:
    """A base port with ``count`` consecutive free loopback ports."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count >= 65535:
            continue
        try:
            sockets = []
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise AssertionError("no run of free loopback ports")


@asynccontextmanager
async def fleet(tmp_path: Path, *, sim_args: tuple[str, ...] = (),
                **spec: Any) -> AsyncIterator[tuple[str, list[str]]]:
    """``serve --router`` over two simulators: (router URL, worker URLs)."""
    base = _free_ports(4)
    # A local model directory: the router loads the tokenizer named by the workers'
    # model_path, and a hub id would send it off the machine to look.
    model_dir = tmp_path / "model"
    model_dir.mkdir(exist_ok=True)
    serve = ServeSpec(
        model_path=str(model_dir), servers=2, base_port=base, router=True,
        router_port=base + 2, launcher=(sys.executable, "-m", "rsr_async", "sim-server"),
        router_launcher=(ROUTER_PYTHON, "-m", "sglang_router.launch_router"),
        extra_args=sim_args,
        router_args=("--prometheus-port", str(base + 3), "--prometheus-host", "127.0.0.1",
                     "--log-level", "warn"),
        **spec,
    )
    workers = [f"http://127.0.0.1:{base}", f"http://127.0.0.1:{base + 1}"]
    async with serve_fleet(serve, ready_timeout_s=60.0, grace_s=5.0) as [router]:
        # serve_fleet has waited until the router lists both workers as healthy.
        yield router, workers


async def _requests_served(workers: list[str]) -> list[int]:
    """``sglang:num_requests_total`` of each worker (the name SGLang's /metrics uses)."""
    counts = []
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
        for url in workers:
            text = (await http.get(url + "/metrics")).text
            found = re.search(r"^sglang:num_requests_total\{[^}]*\} (\S+)$", text, re.M)
            assert found, f"{url}/metrics has no sglang:num_requests_total"
            counts.append(int(float(found.group(1))))
    return counts


async def _episodes(router: str, concurrency: int, episodes: int, turns: int) -> ModelRouter:
    limiter = anyio.CapacityLimiter(concurrency)
    async with ModelRouter(LLMConfig(routing="router"), urls=[router]) as model:
        async def episode(i: int) -> None:
            async with limiter:
                messages: list[ChatMessage] = [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"Task Description: job {i}. " + "Fix it. " * 40},
                ]
                for turn in range(turns):
                    completion = await model.chat(messages, affinity=f"e{i}", max_tokens=64)
                    messages = [*messages, {"role": "assistant", "content": completion.text},
                                {"role": "user", "content": f"New Terminal Output:\n$ make\n{turn}\n"}]

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for i in range(episodes):
                    tg.start_soon(episode, i)
    return model


def test_serve_passes_flags_the_router_has() -> None:
    help_text = subprocess.run(
        [ROUTER_PYTHON, "-m", "sglang_router.launch_router", "--help"],
        capture_output=True, text=True, timeout=60, check=True).stdout
    spec = ServeSpec(model_path="m", servers=2, router=True, concurrency=32)
    router = build_commands(spec)[-1]
    flags = [a for a in router[3:] if a.startswith("--")]
    assert flags and all(re.search(rf"\[{flag}[ \]]", help_text) for flag in flags), flags
    assert router_settings(spec).balance_abs_threshold == 4
    assert "(default: 64)" in help_text.split("--balance-abs-threshold BALANCE")[-1][:400]


async def test_serve_router_spreads_a_32_concurrent_run_over_both_workers(
    tmp_path: Path,
) -> None:
    async with fleet(tmp_path, concurrency=32, sim_args=("--context-length", "12000")) as (
            router, workers):
        model = await _episodes(router, 32, 64, 4)
        counts = await _requests_served(workers)
        # The router's metrics (on --prometheus-port, serve's router port + 1 here) are
        # the names recorded from its library (scripts/record_sglang_shapes.py).
        async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
            port = int(router.rsplit(":", 1)[1]) + 1
            text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
        families = set(re.findall(r"^# TYPE (smg_\S+) ", text, re.MULTILINE))
        assert "smg_router_requests_total" in families, sorted(families)
        assert families <= set(RECORDED_ROUTER["metrics"]), families - set(RECORDED_ROUTER["metrics"])
        # The window came from the workers (12000), not a default.
        assert model.context_length == 12000
        assert set(model.statistics().servers[0].workers) == set(workers)
    assert sum(counts) == 64 * 4
    assert min(counts) >= 0.25 * sum(counts), counts


async def test_router_defaults_put_a_32_concurrent_run_on_one_worker(tmp_path: Path) -> None:
    # Why serve sets the threshold: sglang-router's own default (64) is never crossed.
    async with fleet(tmp_path, concurrency=32, balance_abs_threshold=64) as (router, workers):
        await _episodes(router, 32, 64, 4)
        counts = await _requests_served(workers)
    assert sum(counts) == 64 * 4
    assert max(counts) >= 0.9 * sum(counts), counts


async def test_abort_through_the_router_is_by_closing_the_connection(tmp_path: Path) -> None:
    slow = ("--set", "sim.slow_rate=1.0", "--set", "sim.slow_s=30")
    async with fleet(tmp_path, sim_args=slow) as (router, workers), \
            SGLangClient(router, LLMConfig()) as client, \
            httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
        async def stats() -> list[dict[str, Any]]:
            return [(await http.get(u + "/rsr/stats")).json() for u in workers]

        async def until(running: bool) -> None:
            # Another process's state, over HTTP: polled, within a deadline.
            for _ in range(600):
                if any(s["running"] for s in await stats()) == running:
                    return
                await anyio.sleep(0.05)
            raise AssertionError(f"a worker running the call never became {running}")

        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: client.generate(text=render_chatml(
                [{"role": "user", "content": "Task Description: wait."}]), rid="gone"))
            await until(True)
            tg.cancel_scope.cancel()
        await until(False)
        after = await stats()
        assert [s["aborted"] for s in after if s["aborted"]] == [["gone"]]
        assert sum(s["requests_total"] for s in after) == 0
        assert client.abort_statistics() == AbortStats(by_close=1, by_endpoint=0,
                                                       endpoint="unavailable")
        with pytest.raises(LLMRequestError, match="HTTP 404"):
            await client.abort("gone")
