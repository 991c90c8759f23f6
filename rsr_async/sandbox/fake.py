"""The fake sandbox backend: the whole engine without Docker (tests, ``bench dryrun``).

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
- ``sandbox.backend = "fake"`` (:data:`rsr_async.sandbox.backends.BACKENDS`) makes the
  runtime open a :class:`FakeSandboxPool` through :class:`FakeBackend` where it would open
  the Docker pool, by the same path: the runtime, the Ray actors and ``tasks validate``
  cannot tell. Each episode gets a :class:`FakeTaskSandbox`, a :class:`FakeShellSandbox`
  that also runs the hidden verifier's tests (:meth:`FakeTaskSandbox.run_hidden`): full
  marks when the agent typed (or :meth:`~FakeTaskSandbox.run` ran, as ``tasks
  validate``'s oracle does) every command line of the task's reference solution
  (``solution/solve.sh``; blank lines, comments and the shebang aside), else 0, as a
  ``reward.txt`` (Harbor tasks) or a pytest summary (terminal-bench tasks). So pass or
  fail follows what the model did: the scripted stand-in passes exactly when it types
  the solution. A task's image files (:meth:`FakeSandboxPool.image_files`, for the leak
  audit) are an empty listing.

It is a test double for the *sandbox* layer, used to measure the layers above it (the
engine, the pipeline, the harness, the model client); nothing it grades is a model's
result. It lives in ``sandbox/`` beside the protocols it implements, so the backend table
names no room above it; ``rsr_async.testing`` re-exports it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType

import anyio
from anyio.lowlevel import checkpoint

from ..config import SandboxConfig
from ..errors import ShellClosedError
from ..schema import ImageFiles, Task
from .base import (
    ExecResult,
    HiddenReport,
    HiddenRun,
    Sandbox,
    SandboxBackend,
    SandboxProvider,
    SandboxStats,
)
from .terminal import new_content, truncate_output

__all__ = ["FakeBackend", "FakeSandboxPool", "FakeShell", "FakeShellSandbox", "FakeTaskSandbox"]

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


class FakeTaskSandbox(FakeShellSandbox):
    """One episode's fake sandbox: the agent's fake shell plus the verifier's answers."""

    def __init__(self, pool: FakeSandboxPool, task: Task, *, id: str) -> None:
        super().__init__(FakeShell(), id=id)
        self._pool = pool
        self._task = task
        self.ran: list[str] = []
        """What :meth:`run` ran: each command, and the text of each script it named."""

    def typed(self) -> str:
        """Every keystroke batch the agent sent, over all its shells, in order, then what
        :meth:`run` ran."""
        return "\n".join([*(keys for shell in self.shells for keys in shell.sent), *self.ran])

    async def run(
        self,
        command: str,
        *,
        time_limit: float,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Through the fake interpreter (:meth:`FakeShellSandbox.run`); what it runs counts
        toward the grade as if typed: the command, and any of the sandbox's files it names
        (``bash FILE``: how ``tasks validate`` runs the reference solution)."""
        files = self.current.files
        self.ran += [command, *(files[word] for word in command.split() if word in files)]
        return await super().run(command, time_limit=time_limit, env=env, workdir=workdir, user=user)

    async def upload(self, local: Path, remote: str) -> None:
        """Copy a local file or directory into the in-memory files (read once per pool)."""
        self.current.files.update(await self._pool.read_tree(local, remote))

    async def run_hidden(self, run: HiddenRun) -> HiddenReport:
        """The grade (see the module's docstring); the agent's files are left alone."""
        passed = await self._pool.grade(self._task, self.typed())
        self._pool.graded += 1
        if self._task.format == "terminal-bench":
            status = "PASSED" if passed else "FAILED"
            summary = f"=== short test summary info ===\n{status} tests/test_outputs.py::test_solution\n"
            return HiddenReport(exit_code=0 if passed else 1, output=summary)
        said = "solution matched\n" if passed else "solution missing\n"
        return HiddenReport(exit_code=0, files={"reward.txt": "1\n" if passed else "0\n", "test-stdout.txt": said})


class FakeSandboxPool:
    """A :class:`~rsr_async.sandbox.base.SandboxProvider` of :class:`FakeTaskSandbox`.

    ``sandbox.backend = "fake"`` opens one for a run (:class:`FakeBackend`)::

        config = load_config(values={"sandbox": {"backend": "fake"}})
        async with open_pipeline(config, run_dir=d) as p:
            async for result in p.run(tasks, stages=("discover", "rewrite", "verify")):
                ...
            p.runtime.pool  # this FakeSandboxPool

    Counts sandboxes like the Docker pool does (:meth:`statistics`) and episodes graded
    (``graded``). Tasks' reference solutions and test files are read once, in a worker
    thread, and kept.
    """

    def __init__(self) -> None:
        self.graded = 0
        """Verifier runs answered (one per graded episode)."""
        self._live = 0
        self._peak = 0
        self._started = 0
        self._solutions: dict[str, tuple[str, ...]] = {}
        self._trees: dict[tuple[Path, str], dict[str, str]] = {}

    async def __aenter__(self) -> FakeSandboxPool:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    @asynccontextmanager
    async def sandbox(self, task: Task, *, key: str) -> AsyncIterator[FakeTaskSandbox]:
        """A fresh fake sandbox for one episode."""
        await checkpoint()
        self._started += 1
        self._live += 1
        self._peak = max(self._peak, self._live)
        try:
            yield FakeTaskSandbox(self, task, id=f"fake-{self._started}")
        finally:
            self._live -= 1

    async def ensure_image(self, task: Task) -> str:
        """Nothing to build: a fake sandbox has no image. Its name, for the record."""
        await checkpoint()
        return f"fake:{task.name}"

    async def prewarm(self, task: Task, count: int | None = None) -> int:
        """Nothing to start ahead: a fake sandbox costs nothing."""
        await checkpoint()
        return 0

    def statistics(self) -> SandboxStats:
        """The counters, in the Docker pool's record."""
        return SandboxStats(
            live=self._live,
            peak_live=self._peak,
            started=self._started,
            removed=self._started - self._live,
            start_failures=0,
            remove_failures=0,
            images_built=0,
            warm=0,
            per_host={},
        )

    async def image_files(self, task: Task, *, url: str | None = None) -> ImageFiles:
        """An empty listing: a fake sandbox has no image, so the leak audit knows only the
        base image's paths (as after a failed listing: stricter, never laxer)."""
        await checkpoint()
        return ImageFiles(image=f"fake:{task.name}")

    async def grade(self, task: Task, typed: str) -> bool:
        """Whether ``typed`` holds every command line of ``task``'s reference solution."""
        lines = self._solutions.get(task.path)
        if lines is None:
            lines = self._solutions[task.path] = await anyio.to_thread.run_sync(_solution_lines, task)
        return bool(lines) and all(line in typed for line in lines)

    async def read_tree(self, local: Path, remote: str) -> dict[str, str]:
        """``local``'s files as they would land under ``remote`` (cached)."""
        tree = self._trees.get((local, remote))
        if tree is None:
            tree = self._trees[(local, remote)] = await anyio.to_thread.run_sync(_read_tree, local, remote)
        return tree


class FakeBackend:
    """``sandbox.backend = "fake"``: a :class:`FakeSandboxPool` per run, and no host to
    prepare, check or sweep (nothing a fake starts outlives its pool)."""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config

    async def prepare(self, *, force: bool = False, log: Callable[[str], None] | None = None) -> None:
        """No base image: nothing to prepare."""
        await checkpoint()

    def open(self, *, run_id: str, run_dir: Path | None = None) -> FakeSandboxPool:
        """A fresh :class:`FakeSandboxPool` (``run_id`` and ``run_dir`` label nothing)."""
        return FakeSandboxPool()

    async def check_tasks(self, tasks: Sequence[Task]) -> None:
        """Every task runs as it asks: a fake has no disk, memory or CPUs to cap."""
        await checkpoint()

    async def sweep(self, run_ids: Sequence[str]) -> int:
        """Nothing to remove: a fake sandbox lives in its pool's process only."""
        await checkpoint()
        return 0


def _implements_the_contract(
    backend: FakeBackend, pool: FakeSandboxPool, sandbox: FakeTaskSandbox, plain: FakeShellSandbox
) -> tuple[SandboxBackend, SandboxProvider, Sandbox, Sandbox]:
    """Never called: mypy checks here that the fakes satisfy the base protocols."""
    return backend, pool, sandbox, plain


def _solution_lines(task: Task) -> tuple[str, ...]:
    """The command lines of ``solution/solve.sh`` (none when the task has no solution)."""
    path = Path(task.path) / "solution" / "solve.sh"
    if not path.is_file():
        return ()
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return tuple(line for line in lines if line and not line.startswith("#"))
