"""Test doubles for harness tests: an in-process shell and a model that replays replies.

- :class:`FakeShell` satisfies :class:`~rsr_async.sandbox.base.ShellSession` with a tiny
  line interpreter (``echo``, ``cat``, ``ls``, ``pwd``, ``sleep``, ``exit``, ``>``/``>>``
  redirection, ``bash <<'EOF'`` and ``cat > FILE <<'EOF'`` heredocs, exact-match scripted
  outputs; anything else is "command not found") on a virtual clock: ``sleep 90`` makes the
  shell busy for 90 virtual seconds, and ``wait`` advances the clock without sleeping,
  returning early (True) once the command is done. It records every keystroke batch
  (``sent``) and every wait asked for (``waits``). Lines typed while a command runs run
  at once (a real terminal would queue them): keep scripts simple.
- :class:`FakeShellSandbox` hands out a FakeShell (a new one after ``exit``), with
  ``run``/``upload``/``download`` on the same in-memory files.
- :class:`ReplayModel` satisfies :class:`~rsr_async.llm.base.ChatModel` by replaying a
  list of replies (text, :class:`~rsr_async.llm.base.Completion`, or an exception to
  raise) and records every call.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import anyio
import msgspec
from anyio.lowlevel import checkpoint

from ..errors import HarnessError, ShellClosedError
from ..llm.base import ChatMessage, Completion
from ..sandbox.base import ExecResult, HiddenReport, HiddenRun
from ..sandbox.terminal import new_content
from ..schema import Usage
from .protocol import truncate_output

__all__ = ["FakeShell", "FakeShellSandbox", "ModelCall", "ReplayModel"]

SPECIAL_KEY = re.compile(r"^(C-[a-z\\\]]|M-.|Enter|Escape|Tab|BSpace|Up|Down|Left|Right)$")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")


class FakeShell:
    """An in-process :class:`~rsr_async.sandbox.base.ShellSession` on a virtual clock."""

    def __init__(
        self,
        *,
        files: dict[str, str] | None = None,
        outputs: Mapping[str, str] | None = None,
        prompt: str = "root@sandbox:/app# ",
        rows: int = 24,
        banner: str = "",
    ) -> None:
        self.files = files if files is not None else {}
        """Path -> content; shared with the sandbox that made this shell."""
        self.outputs = dict(outputs or {})
        """Command line -> output, checked before the interpreter."""
        self.prompt = prompt
        self.rows = rows
        self.sent: list[str] = []
        self.waits: list[float] = []
        self.clock = 0.0
        self._busy_until = 0.0
        self._line = ""
        self._heredoc: tuple[str, str, list[str]] | None = None
        """(end tag, command, body so far) while a heredoc is being typed."""
        self._transcript = banner + prompt
        self._previous: str | None = None
        self._alive = True

    @property
    def alive(self) -> bool:
        """False after ``exit``, C-d on an empty line, or :meth:`close`."""
        return self._alive

    @property
    def error(self) -> BaseException | None:
        """Set by tests to play a broken stream (an infrastructure failure)."""
        return self.broken

    broken: BaseException | None = None

    async def send(self, keys: str) -> None:
        """Type ``keys``: one special key (``C-c``, ``C-d`` ...) or literal text."""
        if not self._alive:
            raise ShellClosedError("the fake shell has exited")
        self.sent.append(keys)
        await checkpoint()
        if SPECIAL_KEY.match(keys):
            self._special(keys)
            return
        *lines, rest = keys.split("\n")
        for line in lines:
            self._transcript += line + "\n"
            self._enter(self._line + line)
            self._line = ""
            if not self.alive:
                return
        self._transcript += rest
        self._line += rest

    async def wait(self, max_s: float) -> bool:
        """Advance the virtual clock up to ``max_s``; True if the running command finished."""
        self.waits.append(max_s)
        await checkpoint()
        remaining = max(0.0, self._busy_until - self.clock)
        self.clock += min(remaining, max_s)
        return remaining <= max_s

    def observe(self, max_bytes: int | None = None) -> str:
        """New content by Harbor's rule (from the last line seen before: the prompt
        line with the echoed command, then the output), cut to ``max_bytes`` when
        given; "" when there is none."""
        found = new_content(self._previous, self._transcript)
        self._previous = self._transcript
        if found is None or not found.strip():
            return ""
        return found if max_bytes is None else truncate_output(found, max_bytes)

    def screen(self) -> str:
        """The last ``rows`` lines of the transcript."""
        return "\n".join(self._transcript.split("\n")[-self.rows :])

    async def close(self) -> None:
        """End the shell."""
        self._alive = False

    # ------------------------------------------------------------ the interpreter

    def _special(self, key: str) -> None:
        if key == "C-c":
            self._busy_until = self.clock
            self._line = ""
            self._transcript += "^C\n" + self.prompt
        elif key == "C-d" and not self._line:
            self._transcript += "exit\n"
            self._alive = False
        elif key == "Enter":
            self._transcript += "\n"
            self._enter(self._line)
            self._line = ""

    def _enter(self, line: str) -> None:
        """A line typed and Enter pressed: run it, or collect it into a heredoc."""
        if self._heredoc is not None:
            tag, command, body = self._heredoc
            if line.strip() != tag:
                body.append(line)
                self._transcript += "> "
                return
            self._heredoc = None
            output = self._run_heredoc(command, body)
        elif match := HEREDOC.search(line):
            command = line[: match.start()] + line[match.end() :]
            self._heredoc = (match.group(2), command.strip(), [])
            self._transcript += "> "
            return
        else:
            output = self.execute(line)
        if self._alive:
            self._transcript += output + self.prompt

    def _run_heredoc(self, command: str, body: list[str]) -> str:
        """``bash <<EOF`` runs the body line by line; ``cat > FILE <<EOF`` writes it."""
        words = command.split()
        if words and words[0] in ("bash", "sh"):
            return "".join(self.execute(line) for line in body)
        if words[:2] == ["cat", ">"] and len(words) == 3:
            self.files[words[2]] = "".join(line + "\n" for line in body)
            return ""
        return self.execute(command)

    def execute(self, line: str) -> str:
        """Run one command line; return its output (also used by ``Sandbox.run``)."""
        line = line.strip()
        if not line or line.startswith("#"):
            return ""
        if line in self.outputs:
            return self.outputs[line]
        try:
            words = shlex.split(line)
        except ValueError as exc:
            return f"bash: syntax error: {exc}\n"
        target, append = None, False
        for op in (">>", ">"):
            if op in words[:-1]:
                at = words.index(op)
                target, append, words = words[at + 1], op == ">>", words[:at]
                break
        output = self._command(words)
        if target is None:
            return output
        self.files[target] = (self.files.get(target, "") if append else "") + output
        return ""

    def _command(self, words: list[str]) -> str:
        if not words:  # a bare redirection (`> file`) truncates the file and prints nothing
            return ""
        name, args = words[0], words[1:]
        if name == "echo":
            newline = not (args and args[0] == "-n")
            return " ".join(args[1:] if not newline else args) + ("\n" if newline else "")
        if name == "cat":
            return "".join(
                self.files.get(path, f"cat: {path}: No such file or directory\n") for path in args
            )
        if name == "ls":
            return "".join(f"{path}\n" for path in sorted(self.files))
        if name == "pwd":
            return "/app\n"
        if name == "sleep":
            self._busy_until = self.clock + float(args[0]) if args else self.clock
            return ""
        if name == "exit":
            self._alive = False
            return ""
        if name in ("true", "cd", ":"):
            return ""
        return f"bash: {name}: command not found\n"


class FakeShellSandbox:
    """A :class:`~rsr_async.sandbox.base.Sandbox` whose shell is a :class:`FakeShell`."""

    def __init__(self, shell: FakeShell | None = None, *, id: str = "fake-sandbox") -> None:
        self._id = id
        self.current = shell if shell is not None else FakeShell()
        self.shells: list[FakeShell] = [self.current]

    @property
    def id(self) -> str:
        return self._id

    @property
    def url(self) -> None:
        """A fake runs on no host."""
        return None

    async def stopped_by_agent(self) -> None:
        """A fake has no main process for the agent to kill: it never stops."""
        await checkpoint()

    async def shell(self) -> FakeShell:
        """The current shell, or a new one on the same files if it exited."""
        if not self.current.alive:
            self.current = FakeShell(files=self.current.files, outputs=self.current.outputs)
            self.shells.append(self.current)
        return self.current

    async def run(
        self,
        command: str,
        *,
        time_limit: float,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run each line of ``command`` through the interpreter (``time_limit`` and
        ``user`` unused: the fake has one user)."""
        await checkpoint()
        probe = FakeShell(files=self.current.files, outputs=self.current.outputs)
        output = "".join(probe.execute(line) for line in command.split("\n"))
        return ExecResult(exit_code=1 if "command not found" in output else 0, output=output)

    async def run_hidden(self, run: HiddenRun) -> HiddenReport:
        """Hidden tests in the fake's world: ``run.command`` through the interpreter, the
        files left in ``run.logs_dir`` reported; ``run.tests_dir`` and ``run.logs_dir``
        are private to the run, and what it writes elsewhere stays in the fake's files
        unless ``run.discard_changes``."""
        await checkpoint()
        files = dict(self.current.files)
        for local, path in run.files:
            target = f"{run.tests_dir}/{path}".rstrip("/")
            files.update(await anyio.to_thread.run_sync(_read_tree, Path(local), target))
        probe = FakeShell(files=files, outputs=self.current.outputs)
        output = "".join(probe.execute(line) for line in run.command.split("\n"))
        prefix = run.logs_dir.rstrip("/") + "/"
        logs = {p[len(prefix):]: text for p, text in files.items() if p.startswith(prefix)}
        if not run.discard_changes:
            private = (prefix, run.tests_dir.rstrip("/") + "/")
            kept = {p: t for p, t in self.current.files.items() if p.startswith(private)}
            written = {p: t for p, t in files.items() if not p.startswith(private)}
            self.current.files.clear()
            self.current.files.update(written | kept)
        return HiddenReport(exit_code=1 if "command not found" in output else 0, output=output, files=logs)

    async def upload(self, local: Path, remote: str) -> None:
        """Copy a local file (or a directory's files) into the in-memory files."""
        self.current.files.update(await anyio.to_thread.run_sync(_read_tree, local, remote))

    async def download(self, remote: str, local: Path) -> None:
        """Write an in-memory file to ``local``."""
        if remote not in self.current.files:
            raise FileNotFoundError(f"{self._id}: no file {remote!r} in the fake sandbox")
        await anyio.Path(local).write_text(self.current.files[remote])


def _read_tree(local: Path, remote: str) -> dict[str, str]:
    if local.is_file():
        return {remote: local.read_text()}
    return {
        f"{remote}/{path.relative_to(local)}": path.read_text()
        for path in sorted(local.rglob("*"))
        if path.is_file()
    }


class ModelCall(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded call to a :class:`ReplayModel`."""

    messages: tuple[ChatMessage, ...]
    affinity: str
    max_tokens: int | None
    temperature: float | None
    seed: int | None


Scripted = str | Completion | BaseException


class ReplayModel:
    """A :class:`~rsr_async.llm.base.ChatModel` that replays ``replies`` in order.

    A text reply gets usage estimated at 4 characters a token; give a
    :class:`~rsr_async.llm.base.Completion` to control usage or ``finish_reason``, or an
    exception instance to raise it from that call.
    """

    def __init__(
        self,
        replies: Iterable[Scripted],
        *,
        model_name: str = "replay",
        context_length: int = 32768,
    ) -> None:
        self._replies = list(replies)
        self._model_name = model_name
        self._context_length = context_length
        self.calls: list[ModelCall] = []

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def context_length(self) -> int:
        return self._context_length

    @property
    def remaining(self) -> int:
        """Replies not used yet."""
        return len(self._replies) - len(self.calls)

    async def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        affinity: str,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> Completion:
        """The next scripted reply (raising it if it is an exception)."""
        await checkpoint()
        index = len(self.calls)
        self.calls.append(
            ModelCall(
                messages=tuple(dict(m) for m in messages),  # type: ignore[misc]
                affinity=affinity,
                max_tokens=max_tokens,
                temperature=temperature,
                seed=seed,
            )
        )
        if index >= len(self._replies):
            raise HarnessError(f"ReplayModel: no scripted reply left for call {index + 1}")
        reply = self._replies[index]
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, Completion):
            return reply
        prompt = sum(len(m["content"]) for m in messages) // 4
        usage = Usage(prompt_tokens=prompt, completion_tokens=len(reply) // 4, requests=1)
        return Completion(text=reply, finish_reason="stop", usage=usage)
