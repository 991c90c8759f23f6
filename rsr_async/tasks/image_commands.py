"""``python -m rsr_async images``: bootstrap the offline base image, build task images.

Both go through the ``sandbox.backend`` (:mod:`rsr_async.sandbox.backends`): ``bootstrap``
is the backend's :meth:`~rsr_async.sandbox.base.SandboxBackend.prepare` (Docker: the
offline base image), ``build`` asks a provider for each task's image. It lives with the
tasks, not in ``sandbox/``, because ``build`` loads task datasets: the sandbox room
imports nothing above it."""

from __future__ import annotations

import argparse
import sys
import time
import uuid

import anyio
import msgspec

from ..config import add_config_arguments, load_config
from ..errors import RsrError
from ..sandbox.backends import sandbox_backend

__all__ = ["configure", "main"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``images``."""
    add_config_arguments(parser, section="sandbox")
    sub = parser.add_subparsers(dest="action", required=True)
    boot = sub.add_parser(
        "bootstrap",
        help="build the offline base image (debootstrap + docker import) where it is missing",
    )
    boot.add_argument("--tag", help="image name (default sandbox.base_image)")
    boot.add_argument("--force", action="store_true", help="rebuild even when present")
    build = sub.add_parser("build", help="build (or find cached) task images")
    build.add_argument("sources", nargs="*",
                       help="task directories or list files (default: the bundled suite)")


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def _build(args: argparse.Namespace) -> int:
    from .dataset import load_dataset

    config = load_config(args.config, args.set).sandbox
    dataset = await anyio.to_thread.run_sync(load_dataset, args.sources)
    for error in dataset.errors:
        _say(f"skipped: {error}")
    failures = 0
    async with sandbox_backend(config).open(run_id=f"images-{uuid.uuid4().hex[:8]}") as pool:
        for task in dataset.tasks:
            started = time.monotonic()
            try:
                tag = await pool.ensure_image(task)
            except RsrError as exc:
                failures += 1
                _say(f"{task.name}: FAILED: {str(exc).splitlines()[0]}")
                continue
            print(f"{task.name}\t{tag}\t{time.monotonic() - started:.1f}s", flush=True)
    return 1 if failures else 0


def main(args: argparse.Namespace) -> int:
    """Run the chosen action."""
    if args.action == "bootstrap":
        config = load_config(args.config, args.set).sandbox
        if args.tag:
            config = msgspec.structs.replace(config, base_image=args.tag)
        started = time.monotonic()
        backend = sandbox_backend(config)
        anyio.run(lambda: backend.prepare(force=args.force, log=_say))
        print(f"{config.base_image}\t{time.monotonic() - started:.1f}s")
        return 0
    return anyio.run(_build, args)
