"""The fake sandbox backend: the whole engine without Docker (tests, ``bench dryrun``).

``sandbox.backend = "fake"`` (:data:`rsr_async.sandbox.backends.BACKENDS`) makes the
runtime open a :class:`FakeSandboxPool` through :class:`FakeBackend` where it would open
the Docker pool, by the same path: the runtime, the Ray actors and ``tasks validate``
cannot tell. :class:`FakeSandboxPool` satisfies
:class:`~rsr_async.sandbox.base.SandboxProvider`. Each episode gets a
:class:`FakeTaskSandbox`: a
:class:`~rsr_async.harness.fakes.FakeShellSandbox` (the harness's shell I/O on
:class:`~rsr_async.harness.fakes.FakeShell`'s virtual clock, so waits cost no time) that
also runs the hidden verifier's tests (:meth:`FakeTaskSandbox.run_hidden`): full marks
when the agent typed (or :meth:`~FakeTaskSandbox.run` ran, as ``tasks validate``'s oracle
does) every command line of the task's reference solution
(``solution/solve.sh``; blank lines, comments and the shebang aside), else 0, as a
``reward.txt`` (Harbor tasks) or a pytest summary (terminal-bench tasks). So pass or fail
follows what the model did: the scripted stand-in passes exactly when it types the
solution.

A task's image files (:meth:`FakeSandboxPool.image_files`, for the leak audit) are an
empty listing.

It is a test double for the *sandbox* layer, used to measure the layers above it (the
engine, the pipeline, the harness, the model client); nothing it grades is a model's
result. It lives in ``harness/`` because it is built on the harness's fake shell and
knows the verifier's commands, which the sandbox room never imports.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType

import anyio
from anyio.lowlevel import checkpoint

from ..config import SandboxConfig
from ..sandbox.base import (
    ExecResult,
    HiddenReport,
    HiddenRun,
    Sandbox,
    SandboxBackend,
    SandboxProvider,
    SandboxStats,
)
from ..schema import ImageFiles, Task
from .fakes import FakeShell, FakeShellSandbox, _read_tree

__all__ = ["FakeBackend", "FakeSandboxPool", "FakeTaskSandbox"]

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
