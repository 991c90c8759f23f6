from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from rsr_async import cli
from rsr_async.cli import COMMANDS
from tests.conftest import run_cli_env

PRODUCT_COMMANDS = [
    "run", "tasks", "images", "sandbox", "sim-server", "serve",
    "rewrite", "verify", "export", "analyze", "view", "eval", "bench",
]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rsr_async", *args], env=run_cli_env(), capture_output=True, text=True,
        timeout=120,
    )


def test_help_lists_every_product_command() -> None:
    out = _cli("--help")
    assert out.returncode == 0
    for name in PRODUCT_COMMANDS:
        assert f"\n  {name} " in out.stdout, name
    assert list(COMMANDS) == PRODUCT_COMMANDS


def test_unbuilt_commands_say_so_and_fail(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every shipped command is built; the mechanism stays for the next one.
    monkeypatch.setitem(cli.COMMANDS, "later", cli.Subcommand("a later capability", None, 99))
    assert cli.main(["later"]) == 3
    captured = capsys.readouterr()
    assert "not implemented yet (tracked in issue 99)" in captured.err
    assert captured.out == ""


def test_unknown_command() -> None:
    out = _cli("frobnicate")
    assert out.returncode == 2
    assert "unknown command 'frobnicate'" in out.stderr


def test_unknown_benchmark_is_named() -> None:
    out = _cli("bench", "nope")
    assert out.returncode == 1
    assert "no benchmark 'nope'" in out.stderr


# -- one grammar, examples that parse, and a README that agrees with the code ----------------

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _parse(line: str) -> argparse.Namespace:
    name, *rest = shlex.split(line)
    parser = cli.build_parser(name)
    if name != "bench":
        rest = cli._hoist_config_flags(parser, rest)
    return parser.parse_args(rest)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every long option ``--help`` shows, of ``parser`` and of its sub-commands (the
    simulator's hidden SGLang-compatible flags, accepted and ignored, are not shown)."""
    out = {o for a in parser._actions if a.help != argparse.SUPPRESS
           for o in a.option_strings if o.startswith("--")}
    for sub in _subparsers(parser).values():
        out |= _flags(sub)
    return out - {"--help"}


@pytest.mark.parametrize("name", PRODUCT_COMMANDS)
def test_every_example_in_help_parses_with_the_real_parser(name: str) -> None:
    examples = COMMANDS[name].examples
    assert examples, f"{name} --help shows no example"
    for example in examples:
        assert example.split()[0] == name
        _parse(example)  # argparse exits (SystemExit) on one that does not parse
    help_text = cli.build_parser(name).format_help()
    assert f"python -m rsr_async {examples[0]}" in help_text


@pytest.mark.parametrize(
    "before, after",
    [
        ("images --set sandbox.api_timeout_s=5 --config paper build",
         "images build --set sandbox.api_timeout_s=5 --config paper"),
        ("sandbox --set sandbox.api_timeout_s=5 ls", "sandbox ls --set sandbox.api_timeout_s=5"),
        ("tasks --config paper validate --task x", "tasks validate --task x --config paper"),
        ("run --set run.attempts=2 --concurrency 8", "run --concurrency 8 --set=run.attempts=2"),
    ],
)
def test_config_and_set_mean_the_same_before_and_after_a_subcommand(before: str, after: str) -> None:
    first, second = _parse(before), _parse(after)
    assert first == second
    assert first.set or first.config


def test_config_flags_after_a_double_dash_are_left_alone() -> None:
    parser = cli.build_parser("images")
    assert cli._hoist_config_flags(parser, ["build", "--", "--set", "x"]) == ["build", "--", "--set", "x"]


def test_a_command_that_reads_no_settings_refuses_them_by_name() -> None:
    out = _cli("view", "runs/x", "--set", "a.b=1")
    assert out.returncode == 2
    assert "unrecognized arguments: --set a.b=1" in out.stderr


def test_version_is_the_installed_distributions() -> None:
    for flag in ("--version", "-V"):
        out = _cli(flag)
        assert out.returncode == 0
        assert out.stdout.strip() == f"rsr_async {metadata.version('rsr_async')}"


def test_every_flag_in_help_is_in_the_readme() -> None:
    missing = {
        name: sorted(f for f in _flags(cli.build_parser(name)) if not re.search(re.escape(f) + r"(?![\w-])", README))
        for name in PRODUCT_COMMANDS
    }
    assert not {k: v for k, v in missing.items() if v}, missing


def _readme_command_lines() -> list[tuple[str, str]]:
    """(command, rest of line) for every ``python -m rsr_async CMD …`` / ``rsr-async CMD …``
    in the README, a synopsis's continuation lines joined to it."""
    lines = README.splitlines()
    out = []
    for i, line in enumerate(lines):
        for match in re.finditer(r"(?:python -m rsr_async|rsr-async) ([a-z][a-z-]*)([^`\n]*)", line):
            rest = match.group(2)
            j = i + 1
            while line.rstrip().endswith("\\") or (j < len(lines) and re.match(r"^\s{8,}\[", lines[j])):
                if j >= len(lines):
                    break
                rest += " " + lines[j]
                line = lines[j]
                j += 1
            out.append((match.group(1), rest))
    return out


def _all_flags(parser: argparse.ArgumentParser) -> set[str]:
    out = {o for a in parser._actions for o in a.option_strings}
    for sub in _subparsers(parser).values():
        out |= _all_flags(sub)
    return out


def test_every_flag_the_readme_gives_a_command_exists() -> None:
    wrong = []
    for name, rest in _readme_command_lines():
        if name not in COMMANDS:
            wrong.append(f"unknown command {name!r}")
            continue
        if name == "bench":  # what follows the benchmark's name is the benchmark's
            continue
        known = _all_flags(cli.build_parser(name))
        wrong += [f"{name} {f}" for f in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", rest) if f not in known]
    assert _readme_command_lines(), "found no command lines in the README"
    assert not wrong, wrong


def test_the_readme_lists_every_exit_code_the_code_uses() -> None:
    import signal

    from rsr_async.engine.signals import (
        EXIT_INTERRUPTED,
        EXIT_JOB_ERRORS,
        EXIT_OK,
        EXIT_PERMANENT_ONLY,
    )

    table = re.search(r"\| code \| meaning \|\n((?:.*\|.*\n)+)", README)
    assert table is not None, "no exit-code table in the README"
    rows = table.group(1)
    codes = {int(c) for c in re.findall(r"^\s*\| ([0-9 /]+) \|", rows, re.M) for c in c.split("/")}
    assert codes == {EXIT_OK, 1, 2, 3, EXIT_JOB_ERRORS, EXIT_PERMANENT_ONLY, EXIT_INTERRUPTED, 128 + signal.SIGTERM}
    assert re.search(r"^\s*\| 3 \|.*not implemented yet", rows, re.M)


def test_the_readmes_quoted_error_is_what_the_code_prints() -> None:
    assert "`python -m rsr_async COMMAND: error: MESSAGE`" in README
    quoted = re.search(r"`(python -m rsr_async sandbox: error: [^`]+)`", README)
    assert quoted is not None, "the README quotes no example error line"
    out = _cli("sandbox", "ls", "--set", "sandbox.api_timeout_s=-1")
    assert out.returncode == 1
    assert out.stderr.strip() == " ".join(quoted.group(1).split())


def test_the_readmes_default_run_directory_is_the_codes() -> None:
    from rsr_async.config import Config
    from rsr_async.rsr.commands import default_run_dir

    documented = re.search(r"The default is `(runs/[a-z]+-)<hash of the settings>`", README)
    assert documented is not None, "the README does not give run's default directory"
    made = default_run_dir(Config(), [])
    assert str(made).startswith(documented.group(1))
    assert re.fullmatch(r"[0-9a-f]{10}", str(made)[len(documented.group(1)):])
