"""``python -m rsr_async tasks``: list a dataset, validate it against its reference solutions."""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import anyio

from ..config import add_config_arguments, load_config
from ..schema import Task, encode
from .dataset import BUNDLED_SUITE, Dataset, load_dataset
from .oracle import ValidationRow, validate

__all__ = ["configure", "format_table", "main"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``tasks``."""
    add_config_arguments(parser, section="sandbox")  # read by validate
    sub = parser.add_subparsers(dest="action", required=True)

    def dataset_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "dataset",
            nargs="*",
            metavar="DATASET",
            help=f"task directories (searched recursively) or list files; default: the bundled suite ({BUNDLED_SUITE})",
        )
        p.add_argument("--task", action="append", default=[], metavar="NAME",
                       help="only this task (repeatable)")

    listing = sub.add_parser("list", help="print a table of the dataset's tasks")
    dataset_args(listing)
    check = sub.add_parser(
        "validate",
        help="build every image; check that the oracle passes and the untouched environment fails",
    )
    dataset_args(check)
    check.add_argument("--concurrency", type=int, default=2, metavar="N", help="tasks in flight at once")
    check.add_argument("--json", metavar="FILE", help="also write every row (with outputs) as JSON")
    check.add_argument("-v", "--verbose", action="store_true",
                       help="print the oracle's and verifier's output for every failing task")


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Plain aligned columns (stable for scripts and tests; no terminal codes)."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _load(args: argparse.Namespace) -> Dataset:
    dataset = load_dataset(args.dataset)
    if args.task:
        wanted = set(args.task)
        missing = wanted - {t.name for t in dataset.tasks}
        for name in sorted(missing):
            print(f"tasks: no task named {name!r} in the dataset", file=sys.stderr)
        dataset.tasks = [t for t in dataset.tasks if t.name in wanted]
    for error in dataset.errors:
        print(f"error: {error}", file=sys.stderr)
    return dataset


def _domain(task: Task) -> str:
    return task.category or "-"


def _seconds(values: Sequence[float]) -> str:
    """One timeout as ``300s``; a multi-step task's, one per step in order: ``3x300s`` when
    they agree, else ``300s+600s+300s``."""
    if len(values) > 1 and len(set(values)) == 1:
        return f"{len(values)}x{values[0]:g}s"
    return "+".join(f"{v:g}s" for v in values)


def _list(dataset: Dataset) -> None:
    rows = [
        (t.name, _domain(t), t.difficulty or "-",
         f"{t.format}/{len(t.steps)}-steps" if t.steps else t.format,
         _seconds([s.agent_timeout_s for s in t.steps] or [t.agent_timeout_s]),
         _seconds([s.verifier_timeout_s for s in t.steps] or [t.verifier_timeout_s]),
         f"{t.build_timeout_s:g}s")
        for t in dataset.tasks
    ]
    print(format_table(("name", "domain", "difficulty", "format", "agent", "verifier", "build"), rows))
    domains = sorted({_domain(t) for t in dataset.tasks})
    print(f"\n{len(dataset.tasks)} tasks, {len(domains)} domains, {len(dataset.errors)} errors")


def _reward(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _status(row: ValidationRow) -> str:
    head = "ok" if row.ok else "BAD: " + "; ".join(row.problems)
    return "; ".join([head, *row.notes])


def _validate(args: argparse.Namespace, dataset: Dataset) -> list[ValidationRow]:
    from ..sandbox.backends import sandbox_backend  # the sandbox side only when validating

    backend = sandbox_backend(load_config(args.config, args.set).sandbox)
    run_id = f"tasks-validate-{uuid.uuid4().hex[:8]}"

    async def go() -> list[ValidationRow]:
        async with backend.open(run_id=run_id) as pool:
            return await validate(dataset.tasks, pool, concurrency=args.concurrency)

    return anyio.run(go)


def main(args: argparse.Namespace) -> int:
    """``list``: 0, or 1 when some task failed to load. ``validate``: 1 on any bad task."""
    dataset = _load(args)
    if args.action == "list":
        _list(dataset)
        return 1 if dataset.errors else 0
    started = time.monotonic()
    rows = _validate(args, dataset)
    table = [
        (r.name, r.category or "-", f"{r.build_s:.1f}s", "skipped" if r.oracle_skipped else _reward(r.oracle_reward),
         _reward(r.nop_reward),
         f"{r.duration_s:.1f}s", _status(r))
        for r in rows
    ]
    print(format_table(("name", "domain", "build", "oracle", "untouched", "time", "status"), table))
    bad = [r for r in rows if not r.ok]
    skipped = sum(r.oracle_skipped for r in rows)
    unchecked = f", {skipped} without a solution check" if skipped else ""
    print(f"\n{len(rows) - len(bad)}/{len(rows)} tasks valid{unchecked}, {len(dataset.errors)} failed to load, "
          f"{time.monotonic() - started:.0f}s")
    if args.verbose:
        for r in bad:
            print(f"\n=== {r.name}: oracle\n{r.oracle_output}\n=== {r.name}: untouched\n{r.nop_output}")
    if args.json:
        Path(args.json).write_bytes(encode(rows))
    return 1 if bad or dataset.errors or not rows else 0
