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

__all__ = ["COMMANDS", "build_parser", "main"]


class Subcommand(NamedTuple):
    help: str
    module: str | None
    """``rsr_async.<room>.commands``-style module, or None while not built yet."""
    issue: int
    examples: tuple[str, ...] = ()
    """Shown under ``--help``; a test parses each with the real parser."""


COMMANDS: dict[str, Subcommand] = {
    "run": Subcommand(
        "run the pipeline (discover, rewrite, verify, export) on a dataset", "rsr_async.rsr.commands", 7,
        ("run --concurrency 512 --attempts 15",
         "run --stages discover,rewrite,verify,export --allow-scripted",
         "run --config paper --llm-url http://10.0.0.5:30000 --set llm.temperature=0.7",
         "run --dataset ~/suites/tb2 --sim-servers 2 --progress plain")),
    "tasks": Subcommand(
        "list and validate task datasets", "rsr_async.tasks.commands", 6,
        ("tasks list", "tasks list ~/suites/tb2 --task fix-c-build",
         "tasks validate --concurrency 4 --json validate.json",
         "tasks validate ~/suites/tb2 --set sandbox.memory_mb=4096 -v")),
    "images": Subcommand(
        "bootstrap the offline base image, build task images", "rsr_async.tasks.image_commands", 3,
        ("images bootstrap", "images bootstrap --tag rsr-base:test --force",
         "images build --set sandbox.docker_urls=[\"unix:///var/run/docker.sock\"]")),
    "sandbox": Subcommand(
        "manage sandboxes (gc of leftover containers)", "rsr_async.sandbox.commands", 3,
        ("sandbox ls", "sandbox gc --dry-run", "sandbox gc --run discover-1a2b3c --force")),
    "sim-server": Subcommand(
        "run the SGLang-compatible simulator server", "rsr_async.llm.commands", 4,
        ("sim-server --port 30000 --tasks rsr_async/tasks/bundled",
         "sim-server --port 30001 --context-length 32768 --set sim.error_rate=0.15")),
    "serve": Subcommand(
        "start real SGLang servers (GPU hosts)", "rsr_async.llm.serve", 4,
        ("serve --model-path Qwen/Qwen3-8B --servers 4 --tp 2",
         "serve --model-path Qwen/Qwen3-8B --servers 2 --router --dry-run")),
    "rewrite": Subcommand(
        "plan, critique and execute runbooks from a run's successes", "rsr_async.rsr.stage_commands", 13,
        ("rewrite runs/discover-1a2b3c --allow-scripted",
         "rewrite runs/discover-1a2b3c --llm-url http://10.0.0.5:30000 --config paper")),
    "verify": Subcommand(
        "leak-audit a run's verified rewrites", "rsr_async.rsr.stage_commands", 13,
        ("verify runs/discover-1a2b3c --allow-scripted",)),
    "export": Subcommand(
        "export a run's SFT data, direct-SFT baseline and ATIF", "rsr_async.rsr.stage_commands", 13,
        ("export runs/discover-1a2b3c --allow-scripted --out sft/",
         "export runs/discover-1a2b3c --allow-scripted --rejected drop",
         "export runs/discover-1a2b3c --allow-scripted --format harbor-jobs --out jobs/")),
    "analyze": Subcommand(
        "the paper's tables and figures from a run (or other results)", "rsr_async.analysis.commands", 14,
        ("analyze runs/discover-1a2b3c --subset-key metadata.source",
         "analyze --results results.jsonl --out out/ --k 5 --no-figures",
         "analyze --harbor-jobs jobs/ --out out/")),
    "view": Subcommand(
        "browse a run's trajectories in a local web page", "rsr_async.viewer.commands", 14,
        ("view runs/discover-1a2b3c --port 8765",)),
    "eval": Subcommand(
        "evaluate served checkpoints with plain Terminus 2 (the paper's Table 5)", "rsr_async.rsr.eval_commands", 14,
        ("eval --model base=http://10.0.0.5:30000 --model rsr=http://10.0.0.6:30000 --dataset ~/suites/tb2 --runs 5",)),
    "bench": Subcommand(
        "run a benchmark from bench/ and print JSON", "rsr_async.benchmarks", 2,
        ("bench native --json native.json", "bench faults --only sigterm --json faults.json")),
}


def _top_parser() -> argparse.ArgumentParser:
    width = max(len(name) for name in COMMANDS)
    lines = [f"  {name:<{width}}  {cmd.help}" for name, cmd in COMMANDS.items()]
    return argparse.ArgumentParser(
        prog="python -m rsr_async",
        description="Recursive Self-Rewrite data engine for terminal agents.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n" + "\n".join(lines) + "\n\nrun `python -m rsr_async COMMAND --help`",
        usage="python -m rsr_async [-h] [--version] COMMAND [ARGS ...]",
    )


_CONFIG_FLAGS = ("--config", "--set")


def _hoist_config_flags(parser: argparse.ArgumentParser, rest: list[str]) -> list[str]:
    """``--config``/``--set`` anywhere in a subcommand's arguments, moved to the front.

    One grammar for every subcommand: ``images build --set K=V`` and ``images --set K=V
    build`` mean the same, though ``build`` is a sub-subcommand whose own parser does not
    know the flags (argparse would refuse them after it). Stops at ``--``; a command
    whose parser has no ``--config`` is left as it is, so argparse names the stray flag.
    """
    if "--config" not in parser._option_string_actions:
        return rest
    front: list[str] = []
    back: list[str] = []
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg == "--":
            back += rest[i:]
            break
        flag = arg.split("=", 1)[0]
        if flag in _CONFIG_FLAGS and "=" in arg:
            front.append(arg)
        elif arg in _CONFIG_FLAGS and i + 1 < len(rest):
            front += rest[i : i + 2]
            i += 1
        else:
            back.append(arg)
        i += 1
    return front + back


def build_parser(name: str) -> argparse.ArgumentParser:
    """The parser of one built subcommand, its examples in the epilog."""
    command = COMMANDS[name]
    assert command.module is not None, name
    module = importlib.import_module(command.module)
    parser = argparse.ArgumentParser(
        prog=f"python -m rsr_async {name}", description=command.help,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(command=name)  # one module may serve several commands
    module.configure(parser)
    if command.examples:
        parser.epilog = "examples:\n" + "\n".join(f"  python -m rsr_async {e}" for e in command.examples)
        if "--config" in parser._option_string_actions:  # the flags _hoist_config_flags moves
            parser.epilog += "\n\n--config and --set may come anywhere, before or after a sub-command."
    return parser



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
    if argv[0] in ("-V", "--version"):
        from ._version import __version__

        print(f"rsr_async {__version__}")
        return 0
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
    parser = build_parser(name)
    if name != "bench":  # a benchmark's own arguments pass through untouched
        rest = _hoist_config_flags(parser, rest)
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
