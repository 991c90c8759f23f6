"""``python -m rsr_async``: one subcommand per capability.

Each subcommand lives in the room that implements it, as a module with two functions:
``configure(parser)`` adds its arguments and ``main(args) -> int`` runs it. The module is
imported only when its subcommand runs, so ``--help`` and start-up stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NamedTuple

from .errors import NotImplementedYetError, RsrError

__all__ = ["COMMANDS", "main"]


class Subcommand(NamedTuple):
    help: str
    module: str | None
    """``rsr_async.<room>.commands``-style module, or None while not built yet."""
    issue: int


COMMANDS: dict[str, Subcommand] = {
    "run": Subcommand("run the pipeline (discover, rewrite, verify, export) on a dataset", "rsr_async.rsr.commands", 7),
    "tasks": Subcommand("list and validate task datasets", "rsr_async.tasks.commands", 6),
    "images": Subcommand("bootstrap the offline base image, build task images", "rsr_async.sandbox.image_commands", 3),
    "sandbox": Subcommand("manage sandboxes (gc of leftover containers)", "rsr_async.sandbox.commands", 3),
    "sim-server": Subcommand("run the SGLang-compatible simulator server", "rsr_async.llm.commands", 4),
    "serve": Subcommand("start real SGLang servers (GPU hosts)", "rsr_async.llm.serve", 4),
    "rewrite": Subcommand("plan, critique and execute runbooks from a run's successes", "rsr_async.rsr.stage_commands", 13),
    "verify": Subcommand("leak-audit a run's verified rewrites", "rsr_async.rsr.stage_commands", 13),
    "export": Subcommand("export a run's SFT data, direct-SFT baseline and ATIF", "rsr_async.rsr.stage_commands", 13),
    "analyze": Subcommand("the paper's tables and figures from a run (or other results)", "rsr_async.analysis.commands", 14),
    "view": Subcommand("browse a run's trajectories in a local web page", "rsr_async.viewer.commands", 14),
    "eval": Subcommand("evaluate served checkpoints with plain Terminus 2 (the paper's Table 5)", "rsr_async.rsr.eval_commands", 14),
    "bench": Subcommand("run a benchmark from bench/ and print JSON", "rsr_async.benchmarks", 2),
}


def _top_parser() -> argparse.ArgumentParser:
    width = max(len(name) for name in COMMANDS)
    lines = [f"  {name:<{width}}  {cmd.help}" for name, cmd in COMMANDS.items()]
    return argparse.ArgumentParser(
        prog="python -m rsr_async",
        description="Recursive Self-Rewrite data engine for terminal agents.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n" + "\n".join(lines) + "\n\nrun `python -m rsr_async COMMAND --help`",
        usage="python -m rsr_async [-h] COMMAND [ARGS ...]",
    )


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    top = _top_parser()
    if not argv or argv[0] in ("-h", "--help"):
        top.print_help()
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    command = COMMANDS.get(name)
    if command is None:
        top.print_usage(sys.stderr)
        print(f"python -m rsr_async: unknown command {name!r}", file=sys.stderr)
        return 2
    if command.module is None:
        print(
            f"python -m rsr_async {name}: not implemented yet (tracked in issue {command.issue})",
            file=sys.stderr,
        )
        return 3
    module = importlib.import_module(command.module)
    parser = argparse.ArgumentParser(prog=f"python -m rsr_async {name}", description=command.help)
    parser.set_defaults(command=name)  # one module may serve several commands
    module.configure(parser)
    args = parser.parse_args(rest)
    try:
        code: int = module.main(args)
    except NotImplementedYetError as exc:
        print(f"python -m rsr_async {name}: not implemented yet: {exc}", file=sys.stderr)
        return 3
    except RsrError as exc:
        print(f"python -m rsr_async {name}: error: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:
        # Task groups wrap what their tasks raised; our own errors still get one line each.
        leaves = _leaves(group)
        if not all(isinstance(e, RsrError) for e in leaves):
            raise
        for leaf in leaves:
            print(f"python -m rsr_async {name}: error: {leaf}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code
