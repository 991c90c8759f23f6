"""``python -m rsr_async sandbox``: list and garbage-collect leftover sandbox containers
(and the private networks of compose episodes)."""

from __future__ import annotations

import argparse
import sys

import anyio

from ..config import add_config_arguments, load_config
from .ownership import sweep

__all__ = ["configure", "main"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``sandbox``."""
    add_config_arguments(parser, section="sandbox")
    sub = parser.add_subparsers(dest="action", required=True)
    gc = sub.add_parser(
        "gc",
        help="remove labelled containers whose owner is provably gone (dead pid on this "
        "host, or a run directory whose lock nobody holds); never another live run's",
    )
    gc.add_argument("--run", metavar="RUN_ID",
                    help="also remove this run's containers started by other processes")
    gc.add_argument("--force", action="store_true",
                    help="with --run: remove every container of that run, owner alive or not")
    gc.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    sub.add_parser("ls", help="list labelled containers and whether their owner is gone")


def main(args: argparse.Namespace) -> int:
    """Run the chosen action; prints one line per container."""
    config = load_config(args.config, args.set).sandbox
    if args.action == "ls":
        found = anyio.run(lambda: sweep(config.docker_urls, dry_run=True,
                                        timeout_s=config.api_timeout_s))
    else:
        if args.force and not args.run:
            print("sandbox gc: --force needs --run RUN_ID", file=sys.stderr)
            return 2
        found = anyio.run(lambda: sweep(
            config.docker_urls, run_id=args.run, everything_of_run=args.force,
            dry_run=args.dry_run, timeout_s=config.api_timeout_s,
        ))
    for item in found:
        if args.action == "ls":
            verdict = "owner gone" if item.removable else "owner alive"
        elif args.dry_run:
            verdict = "would remove" if item.removable else "kept"
        else:
            verdict = "removed" if item.removed else "kept"
        warm = f"  prewarmed(slot={item.warm_slot})" if item.warm_slot else ""
        kind = f"  service={item.service}" if item.service else ""
        if item.kind == "network":
            kind = f"  network={item.state}"  # a compose episode's private network
        state = "" if item.kind == "network" else f"  {item.state}"
        print(f"{item.id[:12]}  run={item.run}  episode={item.episode}{warm}{kind}{state}  "
              f"{item.url}  {verdict}")
    removed = sum(item.removed for item in found)
    if args.action == "gc":
        print(f"{removed} removed, {len(found) - removed} kept", file=sys.stderr)
    return 0
