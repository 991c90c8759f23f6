"""The contract between the engine/harnesses/verifier and sandboxes.

The Docker implementation and the fakes in ``rsr_async.testing`` both satisfy these
protocols. A harness sees only :class:`ShellSession`; a verifier sees :class:`Sandbox`;
the episode runner gets its sandboxes from a :class:`SandboxProvider`; the runtime, the
Ray actors and ``tasks validate`` open providers through a :class:`SandboxBackend`, looked
up by the name in ``sandbox.backend`` (:mod:`rsr_async.sandbox.backends`). Nothing above
``sandbox/`` needs more than this module to run episodes, whichever backend runs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import msgspec

from ..errors import SandboxError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from contextlib import AbstractAsyncContextManager

    from ..schema import ImageFiles, Task

__all__ = [
    "CopyUnavailableError",
    "ExecResult",
    "HiddenReport",
    "HiddenRun",
    "Sandbox",
    "SandboxBackend",
    "SandboxProvider",
    "SandboxStats",
    "ShellSession",
    "TmuxPane",
]


class CopyUnavailableError(SandboxError):
    """A sandbox cannot run hidden tests on a throwaway copy of itself here
    (``HiddenRun.discard_changes``); the message says what refused it. ``host_wide``: the
    host cannot make such copies at all (else only this run failed to, e.g. for memory)."""

    host_wide: bool = False


class ExecResult(msgspec.Struct, frozen=True, kw_only=True):
    """Outcome of running one command to completion."""

    exit_code: int
    output: str
    """stdout and stderr, merged, decoded with replacement of invalid UTF-8."""
    timed_out: bool = False


class HiddenRun(msgspec.Struct, frozen=True, kw_only=True):
    """Hidden tests to run in a sandbox out of the agent's reach (:meth:`Sandbox.run_hidden`).

    ``tests_dir`` and ``logs_dir`` are fresh, private to the run: the sandbox's own
    processes, which stay alive, see neither the files put there nor what the run writes.
    """

    files: tuple[tuple[str, str], ...]
    """(local file or directory, its path under ``tests_dir``; "" for the directory itself)."""
    command: str
    """Run as ``bash -c command`` with the sandbox's shell, environment and capabilities."""
    executable: str | None = None
    """A path under ``tests_dir`` made executable (Harbor's ``chmod +x`` of test.sh)."""
    time_limit: float
    """Seconds before SIGTERM to the command's process group (SIGKILL 5 s later)."""
    env: dict[str, str] = msgspec.field(default_factory=dict)
    """Set over the sandbox's own environment."""
    workdir: str | None = None
    """None: the sandbox's working directory (its image's ``WORKDIR``), as ``docker exec``."""
    user: str | None = None
    """A name or uid (``NAME[:GROUP]``) from the sandbox's ``/etc/passwd``; None: root."""
    tests_dir: str = "/tests"
    logs_dir: str = "/logs/verifier"
    max_files: int = 32
    """Files of ``logs_dir`` sent back (in name order, to depth 3); the rest are named."""
    keep_bytes: int = 64_000
    """Each file past this keeps its first and last halves (the reward files: 1 MiB)."""
    discard_changes: bool = False
    """Run on a copy of the sandbox's files as they are now, thrown away afterwards
    (RSRT's claims): nothing the tests write anywhere stays, and their processes go with
    the copy. The sandbox's own processes keep running; the tests share its process and
    network namespaces, as in a plain run."""


class HiddenReport(msgspec.Struct, frozen=True, kw_only=True):
    """How a :class:`HiddenRun` went."""

    exit_code: int | None
    """The command's exit status (128 + N for signal N); None after its time limit."""
    signal: int | None = None
    timed_out: bool = False
    output: str = ""
    """What the command printed (stdout and stderr), head-cut past 2 MiB."""
    files: dict[str, str] = msgspec.field(default_factory=dict)
    """``logs_dir``'s files as the run left them: relative path → text (cut to
    ``keep_bytes`` with a marker saying how many bytes were omitted)."""
    files_not_sent: tuple[str, ...] = ()
    tampered: tuple[str, ...] = ()
    """What the sandbox's processes did to the run (its directories moved or replaced
    while the tests ran); anything here voids the run's results."""
    notes: tuple[str, ...] = ()
    """Best-effort steps that failed (e.g. joining one of the sandbox's cgroups)."""
    split_s: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Seconds before the command (setting up, unpacking the tests), running it, and
    after it (cleaning up, reading the logs and reward), as the run measured them."""


class SandboxStats(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of a :class:`SandboxProvider`'s counters (:meth:`~SandboxProvider.statistics`)."""

    live: int
    peak_live: int
    started: int
    removed: int
    start_failures: int
    remove_failures: int
    images_built: int
    warm: int
    images_shipped: int = 0
    """Images copied from one host to another that lacked them."""
    hosts_down: tuple[str, ...] = ()
    """Hosts out of placement now (they stopped answering)."""
    per_host: dict[str, int]
    """Live sandboxes per host URL (empty for a backend without hosts)."""


class ShellSession(Protocol):
    """One persistent interactive bash on a pty: what the agent types into."""

    @property
    def alive(self) -> bool:
        """False once the shell has exited (e.g. the model typed ``exit``)."""
        ...

    @property
    def error(self) -> BaseException | None:
        """Why the shell ended when bash did not exit by itself (a broken stream, a
        Docker timeout): an infrastructure failure, not the model's doing. None else."""
        ...

    async def send(self, keys: str) -> None:
        """Type Terminus keystrokes: literal text, or one special key such as ``C-c``."""
        ...

    async def wait(self, max_s: float) -> bool:
        """Wait up to ``min(max_s, 60)`` seconds, as Terminus 2 does; return early (True)
        only when waiting longer could not show anything more: every Enter typed got its
        prompt back, no background job runs, nothing was printed since. An empty poll, a
        command that leaves a job running, keys typed into a program: the full wait."""
        ...

    def observe(self, max_bytes: int | None = None) -> str:
        """New terminal content since the last observation by Harbor's rule (from the
        previous capture's last line: the prompt line with the echoed command, then the
        output, 160-column rows); ``""`` when nothing is new or the previous capture can
        no longer be found (the caller shows :meth:`screen`). Head/tail-cut to
        ``max_bytes`` when given; the harness cuts the whole observation instead."""
        ...

    def screen(self) -> str:
        """The terminal's visible rows now (``tmux capture-pane -p``: a newline after
        each row, blank rows kept)."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class TmuxPane(Protocol):
    """A :class:`ShellSession` that may be a real tmux pane, driven the way terminal-bench's
    ``TmuxSession`` drives its own (its keystroke solutions, ``solution.yaml``, need it)."""

    @property
    def uses_tmux(self) -> bool:
        """Whether the shell is a tmux pane (False: an emulation; the methods below refuse)."""
        ...

    async def send_keys(self, keys: Sequence[str]) -> None:
        """One ``tmux send-keys`` with ``keys`` as its arguments: tmux takes an argument that
        is a key name (``Enter``, ``C-d``) as that key and any other as literal text."""
        ...

    async def wait_for(self, channel: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for ``tmux wait -S channel`` on the pane's tmux server
        (typed into the pane after a command, it says that command finished); False when
        the time ran out."""
        ...

    async def capture_history(self) -> str:
        """The pane's whole scrollback and screen now (``tmux capture-pane -p -S -``)."""
        ...


class Sandbox(Protocol):
    """One fresh, isolated container for one episode."""

    @property
    def id(self) -> str: ...

    @property
    def url(self) -> str | None:
        """The host the sandbox runs on (Docker: its daemon's URL), where the episode lists
        the task's image for the leak audit; None for a backend without hosts."""
        ...

    async def run(
        self,
        command: str,
        *,
        time_limit: float,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run ``bash -c command`` to completion (as ``user``, default the container's);
        ``time_limit`` (seconds) is enforced inside the container, since Docker cannot
        kill an exec."""
        ...

    async def upload(self, local: Path, remote: str) -> None:
        """Copy a local file or directory to ``remote`` (a directory is copied whole)."""
        ...

    async def download(self, remote: str, local: Path) -> None:
        """Copy ``remote`` (file or directory) to ``local``."""
        ...

    async def shell(self) -> ShellSession:
        """The episode's persistent shell; a new one if the last one exited."""
        ...

    async def run_hidden(self, run: HiddenRun) -> HiddenReport:
        """Run hidden tests in this sandbox, its processes left running, with nothing
        the agent could have changed or can reach (see :class:`HiddenRun`). Raises
        :class:`~rsr_async.errors.SandboxError` when the run cannot be set up or is cut off."""
        ...

    async def stopped_by_agent(self) -> str | None:
        """Why the sandbox is gone, when the agent's own doing stopped it (it killed the
        sandbox's main process, e.g. with ``kill -9 -1``): then the episode is graded
        ``failed`` with this text instead of being retried as infrastructure. None when
        it still runs, when the infrastructure stopped it (out of memory, the backend
        told to stop it, a host shutting down) or when the backend cannot tell; raises
        :class:`~rsr_async.errors.SandboxError` when asking fails (also: cannot tell)."""
        ...


class SandboxProvider(Protocol):
    """Where episodes get their sandboxes, for one run: what :meth:`SandboxBackend.open`
    yields (the Docker :class:`~rsr_async.sandbox.SandboxPool`, the fake
    :class:`rsr_async.testing.FakeSandboxPool`)."""

    def sandbox(self, task: Task, *, key: str) -> AbstractAsyncContextManager[Sandbox]:
        """A fresh sandbox for the episode ``key`` of ``task``, removed on exit."""
        ...

    async def ensure_image(self, task: Task) -> str:
        """Make ``task``'s environment ready to start (build or find its image); its name.
        Raises :class:`~rsr_async.errors.InfraError` naming the task when it cannot."""
        ...

    async def prewarm(self, task: Task, count: int | None = None) -> int:
        """Start up to ``count`` sandboxes of ``task`` ahead of demand; how many started."""
        ...

    def statistics(self) -> SandboxStats:
        """A snapshot of the provider's counters (``live``, ``peak_live`` ...)."""
        ...

    async def image_files(self, task: Task, *, url: str | None = None) -> ImageFiles:
        """What ``task``'s image holds beyond the base image (for the leak audit), listed
        on the sandbox host ``url`` (None: any); raises ``SandboxError`` when it fails."""
        ...


class SandboxBackend(Protocol):
    """One kind of sandbox (Docker today; the fake for tests; Kubernetes or a cloud
    sandbox later), bound to the ``sandbox`` settings it was made with.

    :func:`rsr_async.sandbox.backends.sandbox_backend` makes one from the name in
    ``sandbox.backend``; the runtime, the Ray actors and ``tasks validate`` use nothing
    else of a backend, so a new one is this protocol, :class:`SandboxProvider` and
    :class:`Sandbox`, plus one line in :data:`~rsr_async.sandbox.backends.BACKENDS`.
    """

    async def prepare(self, *, force: bool = False, log: Callable[[str], None] | None = None) -> None:
        """Make the hosts ready for runs (Docker: bootstrap the base image when it is
        missing). Idempotent and quick when there is nothing to do; called by the runtime
        before :meth:`open`, and by ``images bootstrap`` (``force``: redo it even when
        ready; ``log``: progress lines for a person watching)."""
        ...

    def open(self, *, run_id: str, run_dir: Path | None = None) -> AbstractAsyncContextManager[SandboxProvider]:
        """The provider of one run: its sandboxes are labelled ``run_id`` (stable per
        run directory, so a rerun recognises its predecessor's leftovers, which it
        removes); ``run_dir`` holds what proves the owner alive. Every sandbox it started
        is gone when the context exits, however it exits."""
        ...

    async def check_tasks(self, tasks: Sequence[Task]) -> None:
        """Refuse, before anything starts, tasks the hosts cannot run as they ask (e.g. a
        disk cap the storage driver cannot hold): a :class:`~rsr_async.errors.ConfigError`
        naming the tasks, the hosts and the setting that opts in. A host that does not
        answer is left to :meth:`open`, which reports it."""
        ...

    async def sweep(self, run_ids: Sequence[str]) -> int:
        """Remove every sandbox of ``run_ids`` (the pools of lost Ray actors), whatever
        their owner's state; how many were removed."""
        ...
