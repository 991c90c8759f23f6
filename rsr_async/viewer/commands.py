"""``python -m rsr_async view RUN_DIR [--port N]``: browse a run in a local web page.

Serves on 127.0.0.1 only, prints the address on stderr and runs until SIGINT or SIGTERM
(exit 0). A directory without a run database, or a port that cannot be used, is a one-line
error (exit 1).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from ..errors import ConfigError
from .server import ViewerServer

__all__ = ["DEFAULT_PORT", "configure", "main"]

DEFAULT_PORT = 8765


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``view``."""
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (holds run.db)")
    parser.add_argument("--port", default=str(DEFAULT_PORT),
                        help=f"port on 127.0.0.1 (default {DEFAULT_PORT}); 0 picks a free one")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {text}: expected a number from 0 (any free port) to 65535")
    return port


async def _serve(run_dir: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with ViewerServer(run_dir, port=port) as server:
            print(f"view: serving {run_dir} at {server.url} (read-only; Ctrl-C stops)",
                  file=sys.stderr, flush=True)
            await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def main(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM."""
    asyncio.run(_serve(args.run_dir, _port(args.port)))
    return 0
