"""terminal-bench's keystroke solutions (``solution.yaml``): read, then typed into tmux.

A legacy terminal-bench task may give its reference solution as a YAML list of
``TerminalCommand`` entries instead of ``solution.sh``; terminal-bench 0.2.18's
``OracleAgent`` (which prefers ``solution.sh`` when both exist) sends each entry to the
task's tmux session with ``TmuxSession.send_command``. This module does the same, by the
rules recorded from terminal-bench itself (``scripts/record_tb_solution_yaml.py`` →
``tests/tasks/fixtures/terminal_bench_solution_yaml.json``):

- An entry is ``command`` (text, required) and optionally ``min_timeout_sec`` (0),
  ``max_timeout_sec`` (180), ``block`` (false), ``append_enter`` (true); other keys are
  ignored; values are coerced as pydantic's lax mode does (``"2.5"`` is 2.5, ``"yes"``
  and 1 are true).
- The keys are ``[command, "Enter"]``, or ``[command]`` without ``append_enter``; tmux
  takes a key name (``C-d``) as that key, other text literally.
- ``block`` applies only when the last key runs something (an Enter key, or text ending
  in a newline): those trailing Enters go, ``"; tmux wait -S done"`` and ``Enter`` are
  typed instead, and the oracle waits up to ``max_timeout_sec`` for the signal; past it
  terminal-bench raises, so no further entry is sent (the tests still run). A blocking
  entry ignores ``min_timeout_sec``; any other entry is followed by a pause until
  ``min_timeout_sec`` has passed since its keys were sent.

A bad file is a :class:`~rsr_async.errors.TaskError` naming the file and the entry: a
fault of the task, never retried.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import msgspec
import yaml

from ..errors import TaskError
from ..sandbox.base import ExecResult, Sandbox, TmuxPane
from ..schema import Task

__all__ = [
    "COMPLETION_COMMAND",
    "DONE_CHANNEL",
    "ENTER_KEYS",
    "TerminalCommand",
    "is_keystroke_solution",
    "parse_solution_yaml",
    "read_solution_yaml",
    "run_keystroke_solution",
    "send_plan",
]

ENTER_KEYS = frozenset({"Enter", "C-m", "KPEnter", "C-j", "^M", "^J"})
"""Keys terminal-bench counts as running the typed line."""
COMPLETION_COMMAND = "; tmux wait -S done"
"""Typed after a blocking command, in place of its Enter."""
DONE_CHANNEL = "done"
_ENDS_WITH_NEWLINE = re.compile(r"[\r\n]$")
_CAPTURE_S = 30.0
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


class TerminalCommand(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of ``solution.yaml`` (terminal-bench's ``TerminalCommand``)."""

    command: str
    """What is typed: text, or one tmux key name (``C-d``, ``Escape``)."""
    min_timeout_sec: float = 0.0
    """A non-blocking entry waits until this long after its keys were sent."""
    max_timeout_sec: float = 180.0
    """A blocking entry waits at most this long for its command to finish."""
    block: bool = False
    """Wait for the command to finish (only when the keys end by running it)."""
    append_enter: bool = True
    """Press Enter after ``command``."""


def is_keystroke_solution(task: Task) -> bool:
    """Whether the task's reference solution is a terminal-bench ``solution.yaml``."""
    return task.format == "terminal-bench" and Path(task.solution_path or "").name == "solution.yaml"


def read_solution_yaml(path: Path, *, task: str | None = None) -> tuple[TerminalCommand, ...]:
    """The entries of ``path``; :class:`TaskError` naming the file and entry when bad."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"cannot read solution.yaml: {exc}", task=task, path=str(path)) from exc
    return parse_solution_yaml(text, task=task, path=str(path))


def parse_solution_yaml(text: str, *, task: str | None = None, path: str | None = None) -> tuple[TerminalCommand, ...]:
    """``solution.yaml``'s text as terminal-bench reads it (``yaml.safe_load``, then each
    entry through ``TerminalCommand``)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TaskError(f"solution.yaml is not valid YAML: {exc}", task=task, path=path) from exc
    if not isinstance(data, list):
        raise TaskError(f"solution.yaml must be a list of commands (- command: ...), got {_kind(data)}",
                        task=task, path=path)
    return tuple(_entry(item, number, task=task, path=path) for number, item in enumerate(data, 1))


def _entry(item: Any, number: int, *, task: str | None, path: str | None) -> TerminalCommand:
    def bad(field: str, expected: str, value: Any) -> TaskError:
        return TaskError(f"solution.yaml entry {number}: {field} must be {expected}, got {value!r}",
                         task=task, path=path)

    if not isinstance(item, Mapping):
        raise TaskError(f"solution.yaml entry {number} must be a mapping with a command, got {item!r}",
                        task=task, path=path)
    if "command" not in item:
        raise TaskError(f"solution.yaml entry {number} has no command", task=task, path=path)
    command = item["command"]
    if not isinstance(command, str):
        raise bad("command", "text", command)
    values: dict[str, Any] = {"command": command}
    for field, coerce, expected in _OPTIONAL_FIELDS:
        if field in item:
            value = coerce(item[field])
            if value is None:
                raise bad(field, expected, item[field])
            values[field] = value
    return TerminalCommand(**values)


def _number(value: Any) -> float | None:
    if isinstance(value, bool | int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        return True if word in _TRUE else False if word in _FALSE else None
    return None


_OPTIONAL_FIELDS: tuple[tuple[str, Callable[[Any], float | bool | None], str], ...] = (
    ("min_timeout_sec", _number, "a number of seconds"),
    ("max_timeout_sec", _number, "a number of seconds"),
    ("block", _flag, "true or false"),
    ("append_enter", _flag, "true or false"),
)
"""TerminalCommand's optional fields: how each value is coerced, and what it must be."""


def _kind(value: Any) -> str:
    return "an empty file" if value is None else type(value).__name__


def _runs_line(key: str) -> bool:
    return key in ENTER_KEYS or _ENDS_WITH_NEWLINE.search(key) is not None


def send_plan(command: TerminalCommand) -> tuple[list[str], bool]:
    """The ``send-keys`` arguments for ``command``, and whether the oracle then waits for
    the done signal (``send_command`` and ``_prepare_keys`` of terminal-bench)."""
    keys = [command.command, "Enter"] if command.append_enter else [command.command]
    if not command.block or not _runs_line(keys[-1]):
        return keys, False
    while keys and _runs_line(keys[-1]):
        if keys[-1] in ENTER_KEYS:
            keys.pop()
        else:
            stripped = keys[-1].rstrip("\r\n")
            if stripped:
                keys[-1] = stripped
            else:
                keys.pop()
    return [*keys, COMPLETION_COMMAND, "Enter"], True


async def run_keystroke_solution(sandbox: Sandbox, task: Task, *, time_limit: float | None = None) -> ExecResult:
    """Type the task's ``solution.yaml`` into the sandbox's tmux shell as terminal-bench's
    oracle does, within ``time_limit`` (default the agent timeout) in all.

    The result's output is what the pane showed (its whole history), after a line per
    entry that was cut short; ``timed_out`` when a blocking entry outran its
    ``max_timeout_sec`` or the whole run outran the limit; ``exit_code`` is 0, or 124
    when timed out (keystrokes have no exit status of their own).
    """
    path = Path(task.solution_path or "")
    commands = await anyio.to_thread.run_sync(lambda: read_solution_yaml(path, task=task.name))
    limit = task.agent_timeout_s if time_limit is None else time_limit
    shell = await sandbox.shell()
    if not isinstance(shell, TmuxPane) or not shell.uses_tmux:
        raise TaskError("solution.yaml is typed into a tmux session (terminal-bench's oracle), "
                        "and the image has no tmux: install tmux in it or give a solution.sh",
                        task=task.name, path=str(path))
    problems: list[str] = []
    with anyio.move_on_after(limit) as scope:
        for number, command in enumerate(commands, 1):
            keys, blocking = send_plan(command)
            sent_at = time.monotonic()
            await shell.send_keys(keys)
            if blocking:
                if not await shell.wait_for(DONE_CHANNEL, command.max_timeout_sec):
                    problems.append(f"solution.yaml entry {number}: not finished within max_timeout_sec "
                                    f"{command.max_timeout_sec:g}s; entries after it were not sent "
                                    "(terminal-bench's oracle stops there too)")
                    break
            elif not math.isnan(pause := command.min_timeout_sec - (time.monotonic() - sent_at)) and pause > 0:
                await anyio.sleep(pause)
    if scope.cancelled_caught:
        problems.append(f"solution.yaml: not finished within the agent timeout {limit:g}s")
    with anyio.fail_after(_CAPTURE_S):
        pane = await shell.capture_history()
    output = "".join(f"[{line}]\n" for line in problems) + pane
    return ExecResult(exit_code=124 if problems else 0, output=output, timed_out=bool(problems))

