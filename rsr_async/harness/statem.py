"""StateM: Terminus 2 plus a workflow state machine the agent drives from its shell.

A workflow (:class:`Workflow`, data in ``workflows/*.toml``) has states, each with a
prompt, the moves allowed out of it, and blocking checks that must pass before leaving:
checklist items the agent ticks (``statem check ITEM``), commands that must exit 0 in the
sandbox (``run``) and files that must exist (``file``). The commands are ``statem cur``,
``statem next``, ``statem goto STATE``, ``statem check ITEM`` and ``statem history``.

Why intercepted, not installed. A ``statem`` keystroke line is caught by the harness
(:meth:`StatemSession.intercept`) before it reaches the shell, instead of uploading an
executable into the sandbox: it works in every task image (no Python, no libc
assumptions, no architecture to match), the state lives in the harness where it survives a
context handoff and can never be edited by the agent, and its text is harness text by
construction (the command and its output join the next prompt as a ``harness`` note, so
compression and export drop them). Blocking checks that need the sandbox (a command's
exit code, a file) run through its ``run()``. The cost: only a keystroke batch that is one
``statem`` line is caught (:func:`is_statem_command`, the one definition of "a StateM
command" that compression, export and the style analysis use too). ``statem cur && ls``
is caught whole (the machine answers that ``cur`` takes no arguments; ``ls`` does not
run), while ``statem cur\\nls`` (two lines in one batch) or ``statem\\tcur`` reach bash,
which says ``statem: command not found``; the first prompt says to type each on its own.
"""

from __future__ import annotations

import shlex
import tomllib
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from ..errors import ConfigError, HarnessError
from .protocol import render
from .terminus2 import Terminus2, TerminusSession

if TYPE_CHECKING:
    from ..config import HarnessConfig
    from ..sandbox.base import Sandbox
    from ..schema import Command

__all__ = [
    "DEFAULT_WORKFLOW",
    "STATEM_COMMAND",
    "Check",
    "State",
    "StateMachine",
    "Statem",
    "Workflow",
    "is_statem_command",
    "load_workflow",
]

DEFAULT_WORKFLOW = Path(__file__).parent / "workflows" / "default.toml"
STATEM_COMMAND = "statem"
"""The command word the harness catches (see :func:`is_statem_command`)."""
CHECK_TIME_LIMIT_S = 60.0
"""A ``run`` check's limit inside the sandbox."""


class Check(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A blocking check: ``run`` (a command that must exit 0) or ``file`` (must exist)."""

    run: str | None = None
    file: str | None = None
    description: str = ""


class State(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One workflow state: its prompt, allowed moves, and what blocks leaving it."""

    prompt: str
    next: list[str] = msgspec.field(default_factory=list)
    checklist: list[str] = msgspec.field(default_factory=list)
    checks: list[Check] = msgspec.field(default_factory=list)


class Workflow(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A StateM workflow: the start state and every state by name."""

    start: str
    states: dict[str, State]

    def __post_init__(self) -> None:
        if self.start not in self.states:
            raise ConfigError(f"workflow: start state {self.start!r} is not among its states")
        for name, state in self.states.items():
            for target in state.next:
                if target not in self.states:
                    raise ConfigError(f"workflow: state {name!r} moves to unknown state {target!r}")
            for check in state.checks:
                if (check.run is None) == (check.file is None):
                    raise ConfigError(f"workflow: a check of {name!r} needs exactly one of run, file")


def load_workflow(path: str | Path = DEFAULT_WORKFLOW) -> Workflow:
    """Read a workflow TOML file (see ``workflows/default.toml`` for the shape)."""
    try:
        data = tomllib.loads(Path(path).read_text("utf-8"))
        return msgspec.convert(data, Workflow)
    except (OSError, tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise ConfigError(f"workflow {path}: {exc}") from exc


class StateMachine:
    """One episode's workflow state: current state, ticked items, history of moves."""

    def __init__(self, workflow: Workflow) -> None:
        self.workflow = workflow
        self.state = workflow.start
        self.ticked: set[str] = set()
        self.history: list[str] = [workflow.start]

    def describe(self) -> str:
        state = self.workflow.states[self.state]
        lines = [f"Current state: {self.state}", state.prompt]
        if state.checklist:
            lines.append("Checklist: " + ", ".join(
                f"[{'x' if item in self.ticked else ' '}] {item}" for item in state.checklist))
        return "\n".join(lines)

    def moves(self) -> str:
        state = self.workflow.states[self.state]
        if not state.next:
            return f"No moves from {self.state}: it is the final state."
        lines = [f"Allowed moves from {self.state}: {', '.join(state.next)}"]
        open_items = [i for i in state.checklist if i not in self.ticked]
        if open_items:
            lines.append("Unticked checklist items (statem check ITEM): " + ", ".join(open_items))
        lines.extend(f"Must pass before leaving: {_describe(c)}" for c in state.checks)
        return "\n".join(lines)

    async def goto(self, target: str, sandbox: Sandbox | None) -> str:
        state = self.workflow.states[self.state]
        if target not in self.workflow.states:
            return f"statem: unknown state {target!r}; states: {', '.join(self.workflow.states)}"
        if target not in state.next:
            allowed = ", ".join(state.next) or "none"
            return f"statem: cannot move from {self.state} to {target}; allowed moves: {allowed}"
        failed = [f"checklist item {i!r} is not ticked" for i in state.checklist if i not in self.ticked]
        failed.extend(
            [f"check failed: {_describe(c)}" for c in state.checks if not await _passes(c, sandbox)]
        )
        if failed:
            return f"statem: cannot leave {self.state} yet:\n" + "\n".join(f"- {f}" for f in failed)
        self.state = target
        self.ticked = set()
        self.history.append(target)
        return f"Moved to {target}.\n{self.describe()}"

    def check(self, item: str) -> str:
        state = self.workflow.states[self.state]
        if item not in state.checklist:
            listed = ", ".join(state.checklist) or "none"
            return f"statem: {item!r} is not on the checklist of {self.state}; its items: {listed}"
        self.ticked.add(item)
        return f"Ticked {item!r} in {self.state}."

    def render_history(self) -> str:
        return "\n".join(f"{i}. {name}" for i, name in enumerate(self.history, 1))

    async def command(self, line: str, sandbox: Sandbox | None) -> str:
        """The output of one ``statem ...`` command line."""
        try:
            words = shlex.split(line)
        except ValueError:
            words = line.split()
        args = words[1:]
        usage = "usage: statem cur | next | goto STATE | check ITEM | history"
        match args:
            case ["cur"]:
                return self.describe()
            case ["next"]:
                return self.moves()
            case ["goto", target]:
                return await self.goto(target, sandbox)
            case ["check", item]:
                return self.check(item)
            case ["history"]:
                return self.render_history()
            case []:
                return usage
            case [verb, *_] if verb in ("cur", "next", "goto", "check", "history"):
                return f"statem {verb}: wrong number of arguments; {usage}"
            case [verb, *_]:
                return f"statem: unknown command {verb!r}; {usage}"
        return usage


def _describe(check: Check) -> str:
    what = f"`{check.run}` exits 0" if check.run is not None else f"file {check.file} exists"
    return f"{check.description} ({what})" if check.description else what


async def _passes(check: Check, sandbox: Sandbox | None) -> bool:
    if sandbox is None:
        raise HarnessError("StateM checks need the episode's sandbox")
    command = check.run if check.run is not None else f"test -e {shlex.quote(check.file or '')}"
    result = await sandbox.run(command, time_limit=CHECK_TIME_LIMIT_S)
    return result.exit_code == 0 and not result.timed_out


def is_statem_command(keystrokes: str) -> bool:
    """A keystroke batch the harness runs as a StateM command, not in the shell: after one
    trailing ``\\n`` and the whitespace around it (``str.strip``) are removed, one line
    that is ``statem`` or starts with ``statem `` (a space).

    The one definition: compression (``rsr_async._native``, whose compiled and pure twins
    are pinned to this function by ``tests/native/test_compress.py``), export and the
    style analysis all mean this. It is narrower than "the first word is ``statem``":
    ``statem cur\\nls`` and ``statem\\tcur`` went to bash, so they are shell commands.
    """
    line = keystrokes.removesuffix("\n").strip()
    return "\n" not in line and (
        line == STATEM_COMMAND or line.startswith(STATEM_COMMAND + " ")
    )


class StatemSession(TerminusSession):
    """A Terminus session with a workflow state machine behind ``statem`` commands."""

    harness: Statem

    @cached_property
    def machine(self) -> StateMachine:
        """This episode's state machine, on the harness's workflow."""
        return StateMachine(self.harness.workflow)

    def first_prompt_notes(self) -> list[str]:
        state = self.machine.workflow.states[self.machine.state]
        return [render("statem_intro", state=self.machine.state, prompt=state.prompt)]

    def handoff_notes(self) -> list[str]:
        moves = " -> ".join(self.machine.history)
        return [render("statem_intro", state=self.machine.state,
                       prompt=self.machine.workflow.states[self.machine.state].prompt),
                render("statem_resume", state=self.machine.state, moves=moves)]

    async def intercept(self, command: Command) -> str | None:
        if not is_statem_command(command.keystrokes):
            return None
        line = command.keystrokes.strip()
        return f"$ {line}\n{await self.machine.command(line, self.sandbox)}"


class Statem(Terminus2):
    """The StateM harness, driving ``workflow`` (the default software workflow if None)."""

    name = "statem"
    session_class = StatemSession

    def __init__(self, config: HarnessConfig, *, workflow: Workflow | None = None) -> None:
        super().__init__(config)
        self.workflow = workflow if workflow is not None else load_workflow()
