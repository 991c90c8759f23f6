"""``python -m rsr_async sim-server``: run the SGLang-compatible simulator.

It also accepts the ``sglang.launch_server`` flags that ``serve`` passes (``--model-path``,
``--tp-size``, ``--enable-metrics`` ...), so ``serve --launcher`` can start simulators in place
of real servers.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any

import msgspec

from ..config import SimConfig, add_config_arguments, load_config

__all__ = ["configure", "main"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``sim-server``."""
    add_config_arguments(parser, section="sim")
    parser.add_argument("--host", help="listen address (default sim.host)")
    parser.add_argument("--port", type=int, help="listen port; 0 picks a free one")
    parser.add_argument("--tasks", metavar="DIR",
                        help="Harbor task dirs below DIR: the scripted model learns their solutions")
    parser.add_argument("--sim-json", help=argparse.SUPPRESS)
    parser.add_argument("--seed-offset", type=int, default=0, help=argparse.SUPPRESS)
    # Set by spawn_sim_servers: exit when this pid is no longer our parent.
    parser.add_argument("--parent-pid", type=int, default=0, help=argparse.SUPPRESS)
    # Accepted for drop-in use in place of sglang.launch_server; mostly ignored.
    parser.add_argument("--model-path", "--model", dest="model_path", help="reported model name")
    parser.add_argument("--context-length", type=int, help="context window (tokens)")
    parser.add_argument("--max-running-requests", type=int, help="requests decoded at once")
    parser.add_argument("--tp", "--tp-size", dest="tp", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--dp", "--dp-size", dest="dp", type=int, help=argparse.SUPPRESS)
    for flag in ("--enable-metrics", "--enable-cache-report", "--trust-remote-code"):
        parser.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    for flag in ("--load-format", "--schedule-policy", "--mem-fraction-static", "--dtype",
                 "--log-level"):
        parser.add_argument(flag, help=argparse.SUPPRESS)


def _config(args: argparse.Namespace) -> SimConfig:
    if args.sim_json:
        sim = msgspec.json.decode(args.sim_json, type=SimConfig)
    else:
        sim = load_config(args.config, args.set).sim
    given = {
        "host": args.host, "port": args.port, "model_name": args.model_path,
        "context_length": args.context_length, "max_running_requests": args.max_running_requests,
    }
    changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    return msgspec.structs.replace(sim, **changes)


async def _serve(config: SimConfig, tasks: str | None, fault_seed: int, parent_pid: int) -> None:
    from ..lifeline import set_parent_death_signal, watch_parent
    from .sim.server import READY_LINE, SimServer

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    watchdog: asyncio.Task[None] | None = None
    if parent_pid:
        set_parent_death_signal(parent_pid)  # again: harmless if the trampoline did it
        watchdog = asyncio.create_task(watch_parent(parent_pid, stop.set))
    try:
        async with SimServer(config, tasks_dir=tasks, fault_seed=fault_seed) as server:
            sys.stdout.write(f"{READY_LINE}{server.url}\n")
            sys.stdout.flush()
            await stop.wait()
    finally:
        if watchdog is not None:
            watchdog.cancel()


def main(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM."""
    config = _config(args)
    try:
        import uvloop

        uvloop.run(_serve(config, args.tasks, config.seed + args.seed_offset, args.parent_pid))
    except ImportError:
        asyncio.run(_serve(config, args.tasks, config.seed + args.seed_offset, args.parent_pid))
    return 0
