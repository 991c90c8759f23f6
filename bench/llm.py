"""LLM client benchmark: requests/s of our client vs raw aiohttp, and cache share by routing.

Throughput: one simulator in its own process (so client and server do not share a loop),
a fixed ~10 ms per request (reply tokens x decode time), then at each concurrency the
client (``SGLangClient``: httpx API over our aiohttp transport, native ``/generate`` with
the client-side chat template) and a raw aiohttp client post the same request for the
same duration, in alternating pairs. ``ratio`` is the median of the pairs'
``client_rps / raw_rps``. Also reported: client-side
CPU time per request (the honest overhead figure when the server is the bottleneck).

Cache: 4 simulators (subprocesses), 200 multi-turn episodes through ``ModelRouter`` with
sticky routing, then round-robin on fresh caches; the share of prompt tokens served from
cache on turns after each episode's first.

Router (with ``--set llm.routing=router``): ``serve --router`` starts sglang-router in
front of 2 simulators (``--router-python`` names a Python that has ``sglang_router``),
once with serve's settings and once with the router's default balance threshold (64);
``--router-episodes`` episodes at ``--router-concurrency`` (32) go through it, and each
worker's ``sglang:num_requests_total`` (its ``/metrics``) before and after gives the
per-server request split. The sticky and round-robin runs report their split too.

The replies come from the scripted stand-in model (a test double): these numbers measure
the engine's plumbing, never a model.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import _common
import aiohttp
import anyio
import httpx
import msgspec
import orjson

from rsr_async.config import LLMConfig, SimConfig, add_config_arguments, load_config
from rsr_async.llm.base import ChatMessage
from rsr_async.llm.client import SGLangClient
from rsr_async.llm.prompt import render_chatml
from rsr_async.llm.router import ModelRouter
from rsr_async.llm.serve import ServeSpec, router_settings, serve_fleet
from rsr_async.llm.sim import spawn_sim_servers

PROMPT: list[ChatMessage] = [
    {"role": "system", "content": "You are a terminal agent."},
    {"role": "user", "content": "Task Description: benchmark request. List the files.\n$ "},
]


SYSTEM = ("You are an AI assistant tasked with solving command-line tasks in a Linux "
          "environment. Reply with JSON: analysis, plan, commands, task_complete. ") * 4


async def _drive(concurrency: int, duration_s: float, call: Any) -> tuple[float, float, int]:
    """(requests/s, client CPU µs per request, errors) for ``concurrency`` workers."""
    done = 0
    errors = 0
    stop_at = 0.0

    async def worker() -> None:
        nonlocal done, errors
        while time.perf_counter() < stop_at:
            try:
                await call()
                done += 1
            except Exception:
                errors += 1

    # Warm the connection pool first so connects are not counted.
    async with anyio.create_task_group() as tg:
        stop_at = time.perf_counter() + 0.3
        for _ in range(concurrency):
            tg.start_soon(worker)
    done = errors = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    stop_at = t0 + duration_s
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    return done / elapsed, cpu / max(done, 1) * 1e6, errors


async def _throughput(url: str, levels: list[int], duration_s: float, rounds: int) -> dict[str, Any]:
    config = LLMConfig(max_new_tokens=512, max_retries=0)
    results: dict[str, Any] = {}
    body_params = {"max_new_tokens": 512}
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=4.0)
    async with SGLangClient(url, config) as client, aiohttp.ClientSession(connector=connector) as raw:
        async def via_client() -> None:
            completion = await client.chat(PROMPT)
            assert completion.text

        async def via_raw() -> None:
            payload = {"text": render_chatml(PROMPT), "sampling_params": body_params}
            async with raw.post(url + "/generate", data=orjson.dumps(payload),
                                headers={"content-type": "application/json"}) as response:
                data = orjson.loads(await response.read())
            assert data["text"]

        for level in levels:
            samples: dict[str, list[tuple[float, float, int]]] = {"client": [], "raw": []}
            ratios = []
            for i in range(rounds):
                # Paired and alternating, so drift in machine load hits both sides alike.
                order = [("client", via_client), ("raw", via_raw)]
                for name, call in order if i % 2 == 0 else reversed(order):
                    samples[name].append(await _drive(level, duration_s, call))
                ratios.append(samples["client"][-1][0] / max(samples["raw"][-1][0], 1e-9))
            results[str(level)] = {
                "client_rps": round(statistics.median(s[0] for s in samples["client"]), 1),
                "raw_rps": round(statistics.median(s[0] for s in samples["raw"]), 1),
                "ratio": round(statistics.median(ratios), 3),
                "client_cpu_us_per_req": round(statistics.median(s[1] for s in samples["client"])),
                "raw_cpu_us_per_req": round(statistics.median(s[1] for s in samples["raw"])),
                "errors": sum(s[2] for v in samples.values() for s in v),
                "pair_ratios": [round(r, 3) for r in ratios],
            }
    return results


async def run_episodes(model: ModelRouter, episodes: int, turns: int, concurrency: int) -> tuple[int, int]:
    """(prompt tokens, cached tokens) over every turn after each episode's first."""
    prompt = cached = 0
    limiter = anyio.CapacityLimiter(concurrency)

    async def episode(i: int) -> None:
        nonlocal prompt, cached
        async with limiter:
            # The same episode shape as tests/llm/test_router.py.
            messages: list[ChatMessage] = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"Task Description: job {i}. " + "Fix the build. " * 60},
            ]
            for turn in range(turns):
                completion = await model.chat(messages, affinity=f"episode-{i}", max_tokens=256)
                if turn > 0:
                    prompt += completion.usage.prompt_tokens
                    cached += completion.usage.cached_tokens
                messages = [*messages, {"role": "assistant", "content": completion.text},
                            {"role": "user", "content": f"New Terminal Output:\n$ make\nerror {turn}\n"}]

    async with anyio.create_task_group() as tg:
        for i in range(episodes):
            tg.start_soon(episode, i)
    return prompt, cached


async def _cache_share(episodes: int, turns: int) -> dict[str, Any]:
    sim = SimConfig(prefill_us_per_token=0.0, decode_us_per_token=0.0)
    out: dict[str, Any] = {}
    for routing in ("sticky", "round_robin"):
        async with spawn_sim_servers(sim, count=4) as urls:
            async with ModelRouter(LLMConfig(routing=routing), urls=urls) as model:
                prompt, cached = await run_episodes(model, episodes, turns, 61)
                split = [s.requests for s in model.statistics().servers]
        out[f"{routing}_cached_share"] = round(cached / prompt, 4) if prompt else 0.0
        out[f"{routing}_requests_by_server"] = split
    return out


def _free_ports(count: int) -> int:
    """A base port with ``count`` consecutive free loopback ports."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base: int = probe.getsockname()[1]
        held = []
        try:
            for port in range(base, base + count):
                held.append(sock := socket.socket())
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise RuntimeError("no run of free loopback ports")


async def requests_served(urls: list[str]) -> list[int]:
    """Each server's ``sglang:num_requests_total`` (SGLang's and the simulator's /metrics)."""
    counts = []
    async with httpx.AsyncClient(trust_env=False, timeout=10.0) as http:
        for url in urls:
            text = (await http.get(url + "/metrics")).text
            found = re.search(r"^sglang:num_requests_total\{[^}]*\} (\S+)$", text, re.M)
            if found is None:
                raise RuntimeError(f"{url}/metrics has no sglang:num_requests_total "
                                   "(start SGLang with --enable-metrics)")
            counts.append(int(float(found.group(1))))
    return counts


def _router_missing(python: str) -> str:
    if python == sys.executable:
        found = importlib.util.find_spec("sglang_router") is not None
    else:
        found = subprocess.run([python, "-c", "import sglang_router"], capture_output=True,
                               timeout=60).returncode == 0
    return "" if found else (f"sglang-router is not importable by {python}: pip install "
                             "sglang-router, or pass --router-python")


async def _router_split(args: Any, llm: LLMConfig) -> dict[str, Any]:
    """The per-server request split through sglang-router: serve's settings vs its defaults."""
    missing = _router_missing(args.router_python)
    if missing:
        return {"skipped": missing}
    out: dict[str, Any] = {"concurrency": args.router_concurrency,
                           "episodes": args.router_episodes, "turns": args.turns}
    with tempfile.TemporaryDirectory() as model_dir:  # local: the router never asks a hub
        for label, threshold in (("serve_settings", None), ("router_defaults", 64)):
            base = _free_ports(4)
            spec = ServeSpec(
                model_path=model_dir, servers=2, base_port=base, router=True,
                router_port=base + 2, launcher=(sys.executable, "-m", "rsr_async", "sim-server"),
                router_launcher=(args.router_python, "-m", "sglang_router.launch_router"),
                concurrency=args.router_concurrency, balance_abs_threshold=threshold,
                router_args=("--prometheus-port", str(base + 3), "--prometheus-host",
                             "127.0.0.1", "--log-level", "warn"),
            )
            workers = [f"http://127.0.0.1:{base + i}" for i in range(2)]
            async with serve_fleet(spec, ready_timeout_s=120.0, grace_s=5.0) as urls:
                before = await requests_served(workers)
                config = msgspec.structs.replace(llm, urls=tuple(urls), routing="router")
                async with ModelRouter(config) as model:
                    prompt, cached = await run_episodes(
                        model, args.router_episodes, args.turns, args.router_concurrency)
                after = await requests_served(workers)
            split = [a - b for a, b in zip(after, before, strict=True)]
            out[label] = {
                "balance_abs_threshold": router_settings(spec).balance_abs_threshold,
                "requests_by_server": dict(zip(workers, split, strict=True)),
                "max_share": round(max(split) / max(1, sum(split)), 3),
                "cached_share": round(cached / prompt, 4) if prompt else 0.0,
            }
    return out


async def _main(args: Any) -> dict[str, Any]:
    # ~10 ms per request: the explore reply is ~134 tokens at 75 µs each.
    sim = SimConfig(prefill_us_per_token=0.0, decode_us_per_token=75.0, max_running_requests=4096)
    levels = [int(x) for x in args.levels.split(",")]
    async with spawn_sim_servers(sim, count=1) as urls:
        throughput = await _throughput(urls[0], levels, args.duration, args.rounds)
    cache = await _cache_share(args.episodes, args.turns)
    llm = load_config(args.config, args.set).llm
    if llm.routing == "router":
        cache["router"] = await _router_split(args, llm)
    top = throughput[str(max(levels))]
    return {
        "benchmark": "llm",
        "note": "scripted stand-in model (test double) behind the simulator; plumbing only",
        "client": "httpx.AsyncClient over rsr_async.llm.transport.AiohttpTransport",
        "client_rps": top["client_rps"],
        "raw_rps": top["raw_rps"],
        "ratio": top["ratio"],
        "floor_ratio_at_512": 0.8,
        "by_concurrency": throughput,
        **cache,
        "episodes": args.episodes,
        "turns": args.turns,
    }


def main(argv: list[str]) -> int:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--levels", default="64,512", help="concurrency levels")
    p.add_argument("--duration", type=float, default=3.0, help="seconds per sample")
    p.add_argument("--rounds", type=int, default=5, help="paired samples per level")
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--turns", type=int, default=5)
    add_config_arguments(p, section="llm")
    p.add_argument("--router-python", default=sys.executable,
                   help="a Python with sglang_router (for --set llm.routing=router)")
    p.add_argument("--router-concurrency", type=int, default=32)
    p.add_argument("--router-episodes", type=int, default=64)
    args = p.parse_args(argv)
    try:
        import uvloop

        result = uvloop.run(_main(args))
    except ImportError:
        result = asyncio.run(_main(args))
    _common.emit(result, args.json)
    return 0


