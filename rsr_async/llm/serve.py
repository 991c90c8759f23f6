"""``python -m rsr_async serve``: start real SGLang servers on a GPU host.

Builds one ``python -m sglang.launch_server`` command per server (model path, tensor
parallel size, port, ``--enable-metrics --enable-cache-report``; every flag one that
SGLang 0.5.23's ``ServerArgs`` declares, checked against the recorded list by
``tests/llm/test_server_shapes.py``), optionally one
``sglang_router.launch_router`` in front, starts them, waits until every ``/health``
answers, prints the URLs to pass as ``llm.urls``, and stops them cleanly (SIGTERM, then
SIGKILL after a grace period) on Ctrl-C or SIGTERM; if ``serve`` itself is killed, its
children die with it (:mod:`rsr_async.lifeline`). Needs the ``[sglang]`` extra and GPUs.
``--launcher`` replaces ``python -m sglang.launch_server`` (tests use the simulator).

The router's cache_aware defaults do not spread a run's load: every Terminus prompt
starts with the same system prompt, so one worker always matches best, and the balance
rule (``max - min > --balance-abs-threshold`` (64) and ``max > min *
--balance-rel-threshold`` (1.5), over in-flight requests) never fires below 64 in
flight; a 32-concurrent run went to one of two workers (issue 16). ``serve`` sets the
absolute threshold from ``--concurrency`` (:func:`router_settings`) and prints the
settings and why.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import httpx
import msgspec

from ..errors import LLMConnectionError, LLMError
from ..lifeline import guarded_argv
from .http_errors import llm_errors

__all__ = ["RouterSettings", "ServeSpec", "build_commands", "configure", "main",
           "router_settings", "serve_fleet"]


class ServeSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What to launch."""

    model_path: str
    servers: int = 1
    tp: int = 1
    base_port: int = 30000
    host: str = "127.0.0.1"
    extra_args: tuple[str, ...] = ()
    router: bool = False
    router_port: int = 29999
    launcher: tuple[str, ...] = (sys.executable, "-m", "sglang.launch_server")
    router_launcher: tuple[str, ...] = (sys.executable, "-m", "sglang_router.launch_router")
    gpus_per_server: int = 0
    """If > 0, pin server i to GPUs [i*g, (i+1)*g) through CUDA_VISIBLE_DEVICES."""
    concurrency: int = 64
    """Requests the run keeps in flight (``run.concurrency``); sizes the router's balance."""
    router_policy: str = "cache_aware"
    balance_abs_threshold: int | None = None
    """None: from :func:`router_settings`."""
    balance_rel_threshold: float = 1.5
    """sglang-router's default."""
    cache_threshold: float = 0.3
    """sglang-router's default."""
    router_args: tuple[str, ...] = ()
    """More ``launch_router`` arguments."""


class RouterSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What ``serve --router`` passes to sglang-router, and why."""

    policy: str
    balance_abs_threshold: int
    balance_rel_threshold: float
    cache_threshold: float
    reason: str

    def argv(self) -> list[str]:
        """The ``launch_router`` flags (names as in sglang-router 0.3.2's ``--help``)."""
        flags = ["--policy", self.policy]
        if self.policy == "cache_aware":
            flags += ["--cache-threshold", str(self.cache_threshold),
                      "--balance-abs-threshold", str(self.balance_abs_threshold),
                      "--balance-rel-threshold", str(self.balance_rel_threshold)]
        return flags


def router_settings(spec: ServeSpec) -> RouterSettings:
    """The router's settings for ``spec``: the balance threshold a quarter of each
    server's even share of ``spec.concurrency`` (at least 1).

    Below the threshold, cache affinity decides (a conversation stays where its prefix
    is cached); past it, the least loaded server gets the request. At 32 in flight over
    2 servers that is 4: measured through sglang-router 0.3.2 over two simulators, the
    split was 147/173 requests where the default (64) gave 320/0 (``bench llm``)."""
    share = spec.concurrency / max(1, spec.servers)
    derived = max(1, int(share // 4))
    threshold = derived if spec.balance_abs_threshold is None else spec.balance_abs_threshold
    if spec.router_policy != "cache_aware":
        reason = f"policy {spec.router_policy}: the router balances by itself"
    elif spec.balance_abs_threshold is None:
        reason = (f"{spec.concurrency} in flight over {spec.servers} servers ({share:g} each): "
                  f"a server more than {threshold} requests ahead of the least loaded (and "
                  f"{spec.balance_rel_threshold}x it) gets no new request; sglang-router's "
                  "default 64 would leave all of them on the server with the best prefix "
                  "match (they all share the system prompt)")
    else:
        reason = f"--router-balance-abs {threshold} as given"
    return RouterSettings(policy=spec.router_policy, balance_abs_threshold=threshold,
                          balance_rel_threshold=spec.balance_rel_threshold,
                          cache_threshold=spec.cache_threshold, reason=reason)


def server_urls(spec: ServeSpec) -> list[str]:
    """URLs of the model servers."""
    return [f"http://{spec.host}:{spec.base_port + i}" for i in range(spec.servers)]


def build_commands(spec: ServeSpec) -> list[list[str]]:
    """argv of every process to start: the servers, then the router if asked for."""
    commands = [
        [*spec.launcher, "--model-path", spec.model_path, "--tp-size", str(spec.tp),
         "--host", spec.host, "--port", str(spec.base_port + i),
         "--enable-metrics", "--enable-cache-report", *spec.extra_args]
        for i in range(spec.servers)
    ]
    if spec.router:
        commands.append([*spec.router_launcher, "--worker-urls", *server_urls(spec),
                         *router_settings(spec).argv(), "--host", spec.host,
                         "--port", str(spec.router_port), *spec.router_args])
    return commands


async def _wait_healthy(url: str, process: anyio.abc.Process, timeout_s: float) -> None:
    async with httpx.AsyncClient(timeout=5.0, trust_env=False) as client:
        with anyio.move_on_after(timeout_s):
            while True:
                if process.returncode is not None:
                    raise LLMConnectionError(
                        f"serve: the server for {url} exited with code {process.returncode} "
                        "before it was healthy; read its log above"
                    )
                try:
                    with llm_errors(url + "/health"):
                        if (await client.get(url + "/health")).status_code == 200:
                            return
                except LLMError:
                    pass  # not up yet: asked again
                await anyio.sleep(0.5)
    raise LLMConnectionError(f"serve: {url}/health not healthy within {timeout_s} s")


async def _wait_registered(router: str, workers: list[str], timeout_s: float) -> None:
    """Until the router lists every worker as healthy (its ``/health`` answers first)."""
    async with httpx.AsyncClient(timeout=5.0, trust_env=False) as client:
        with anyio.move_on_after(timeout_s):
            while True:
                try:
                    with llm_errors(router + "/workers"):
                        response = await client.get(router + "/workers")
                except LLMError:
                    response = None  # not up yet: asked again
                if response is not None and response.status_code == 404:
                    return  # a router too old to list them: its /health has to do
                if response is not None and response.status_code == 200:
                    listed = response.json().get("workers") or []
                    healthy = {w.get("url") for w in listed if w.get("is_healthy")}
                    if healthy >= set(workers):
                        return
                await anyio.sleep(0.2)
    raise LLMConnectionError(
        f"serve: {router} did not list every worker as healthy within {timeout_s} s "
        f"({', '.join(workers)}); read its log above")


@asynccontextmanager
async def serve_fleet(
    spec: ServeSpec, *, ready_timeout_s: float = 1800.0, grace_s: float = 30.0
) -> AsyncIterator[list[str]]:
    """Start the fleet, wait until healthy, yield the URLs to use, stop it on exit."""
    processes: list[anyio.abc.Process] = []
    commands = build_commands(spec)
    try:
        for i, argv in enumerate(commands):
            env = dict(os.environ)
            if spec.gpus_per_server and i < spec.servers:
                first = i * spec.gpus_per_server
                env["CUDA_VISIBLE_DEVICES"] = ",".join(
                    str(g) for g in range(first, first + spec.gpus_per_server))
            # Behind the lifeline trampoline: a SIGKILLed `serve` takes its servers with
            # it (SGLang's own workers follow their launcher the same way).
            processes.append(await anyio.open_process(
                guarded_argv(argv), env=env, stdout=None, stderr=None))
        urls = server_urls(spec)
        async with anyio.create_task_group() as tg:
            for url, process in zip(urls, processes, strict=False):
                tg.start_soon(_wait_healthy, url, process, ready_timeout_s)
        if spec.router:
            router_url = f"http://{spec.host}:{spec.router_port}"
            await _wait_healthy(router_url, processes[-1], ready_timeout_s)
            await _wait_registered(router_url, urls, ready_timeout_s)
            urls = [router_url]
        yield urls
    finally:
        with anyio.CancelScope(shield=True):
            for process in reversed(processes):
                if process.returncode is None:
                    process.terminate()
            for process in reversed(processes):
                with anyio.move_on_after(grace_s):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    with anyio.move_on_after(5.0):
                        await process.wait()
                await process.aclose()


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``serve``."""
    parser.add_argument("--model-path", required=True, help="HF model id or local path")
    parser.add_argument("--servers", type=int, default=1, help="number of servers")
    parser.add_argument("--tp", type=int, default=1, help="tensor parallel size per server")
    parser.add_argument("--base-port", type=int, default=30000, help="port of server 0")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--router", action="store_true", help="also start sglang-router")
    parser.add_argument("--router-port", type=int, default=29999)
    parser.add_argument("--concurrency", type=int, default=64,
                        help="requests the run keeps in flight (run.concurrency); sets the "
                             "router's --balance-abs-threshold to a quarter of each server's share")
    parser.add_argument("--router-policy", default="cache_aware",
                        choices=("cache_aware", "round_robin", "power_of_two", "random"))
    parser.add_argument("--router-balance-abs", type=int,
                        help="--balance-abs-threshold instead of the one from --concurrency")
    parser.add_argument("--router-balance-rel", type=float, default=1.5,
                        help="--balance-rel-threshold (sglang-router's default 1.5)")
    parser.add_argument("--router-cache-threshold", type=float, default=0.3,
                        help="--cache-threshold (sglang-router's default 0.3)")
    parser.add_argument("--router-extra", default="", help="extra launch_router arguments (one string)")
    parser.add_argument("--gpus-per-server", type=int, default=0,
                        help="pin each server to its own GPUs (CUDA_VISIBLE_DEVICES)")
    parser.add_argument("--launcher", help="command instead of `python -m sglang.launch_server`")
    parser.add_argument("--extra", default="", help="extra launch_server arguments (one string)")
    parser.add_argument("--ready-timeout", type=float, default=1800.0, help="seconds to get healthy")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, start nothing")


def spec_from_args(args: argparse.Namespace) -> ServeSpec:
    """A :class:`ServeSpec` from parsed arguments."""
    kwargs: dict[str, object] = {}
    if args.launcher:
        kwargs["launcher"] = tuple(shlex.split(args.launcher))
    return ServeSpec(
        model_path=args.model_path, servers=args.servers, tp=args.tp, base_port=args.base_port,
        host=args.host, router=args.router, router_port=args.router_port,
        gpus_per_server=args.gpus_per_server, extra_args=tuple(shlex.split(args.extra)),
        concurrency=args.concurrency, router_policy=args.router_policy,
        balance_abs_threshold=args.router_balance_abs,
        balance_rel_threshold=args.router_balance_rel,
        cache_threshold=args.router_cache_threshold,
        router_args=tuple(shlex.split(args.router_extra)),
        **kwargs,  # type: ignore[arg-type]
    )


async def _run(spec: ServeSpec, ready_timeout_s: float) -> None:
    async with serve_fleet(spec, ready_timeout_s=ready_timeout_s) as urls:
        print("ready: " + " ".join(urls), flush=True)
        print(f"use: --set 'llm.urls={msgspec.json.encode(urls).decode()}'", flush=True)
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                break


def main(args: argparse.Namespace) -> int:
    """Start the fleet and keep it up until SIGINT/SIGTERM (or print it with --dry-run)."""
    spec = spec_from_args(args)
    if spec.router:
        settings = router_settings(spec)
        print(f"router: {shlex.join(settings.argv())}: {settings.reason}", flush=True)
    if args.dry_run:
        for argv in build_commands(spec):
            print(shlex.join(argv))
        return 0
    anyio.run(_run, spec, args.ready_timeout)
    return 0


