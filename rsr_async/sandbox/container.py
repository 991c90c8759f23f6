"""One episode's container: commands to completion, file transfer, and its shell."""

from __future__ import annotations

import io
import json
import logging
import posixpath
import shutil
import tarfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiodocker
import anyio
import msgspec

from .. import phases
from ..errors import ContainerError, SandboxError, ShellClosedError
from .base import CopyUnavailableError, ExecResult, HiddenReport, HiddenRun
from .docker_errors import DockerAnswer, close_quietly, docker_errors
from .shell import DockerShell

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractAsyncContextManager

    from anyio.abc import TaskGroup

    from .hidden import VerifierStation

__all__ = ["ContainerState", "DockerSandbox"]

log = logging.getLogger(__name__)

_RUN_OUTPUT_KEEP = 1 << 20
"""``run`` keeps the first and last MiB of output: verifier logs are never larger."""
_KILL_GRACE_S = 5
"""After its time limit a command gets SIGTERM, then SIGKILL this many seconds later."""
_STAGE_DIR = "/var/tmp/.rsr-upload"
"""Where uploads bound for a tmpfs mount wait for their copy into place (not a tmpfs)."""


class ContainerState(msgspec.Struct, frozen=True, kw_only=True):
    """What Docker says about a container right now."""

    running: bool
    oom_killed: bool
    """Docker's flag, or the cgroup's OOM-kill counter above zero (a process inside)."""
    exit_code: int | None
    status: str


class DockerSandbox:
    """A fresh container for one episode (implements :class:`~rsr_async.sandbox.base.Sandbox`).

    Made by :meth:`SandboxPool.sandbox`, which removes it when the episode ends.
    """

    def __init__(
        self,
        container: aiodocker.docker.DockerContainer,
        *,
        task_name: str,
        key: str,
        url: str,
        task_group: TaskGroup,
        api_timeout_s: float,
        env: dict[str, str],
        workdir: str | None,
        memory_mb: int = 0,
        quiet_s: float = 0.05,
        tmpfs: tuple[str, ...] = (),
        station: VerifierStation | None = None,
        copier: Callable[[DockerSandbox], AbstractAsyncContextManager[DockerSandbox]] | None = None,
    ) -> None:
        self._container = container
        self._station = station
        self._copier = copier
        self._tmpfs = tmpfs
        self._quiet = quiet_s
        self._memory_mb = memory_mb
        self._oom_seen = 0
        self._task = task_name
        self._key = key
        self._url = url
        self._tg = task_group
        self._api_timeout = api_timeout_s
        self._env = env
        self._workdir = workdir
        self._shell: DockerShell | None = None
        self._shells: list[DockerShell] = []
        self._since = time.time() - 1.0
        """When this episode took the container (events before it are not its own)."""

    @property
    def id(self) -> str:
        """The Docker container id."""
        return str(self._container.id)

    @property
    def name(self) -> str:
        """``task/episode key``, used in every error message."""
        return f"task {self._task!r} (episode {self._key})"

    async def run(
        self,
        command: str,
        *,
        time_limit: float,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run ``bash -c command`` to completion, merged output, exit code (as ``user``:
        a name or uid[:gid] of the container; None: its default user).

        ``time_limit`` is enforced inside the container with coreutils ``timeout`` (Docker
        cannot kill an exec); exit 124/137 after the limit is reported as ``timed_out``.
        """
        limit = max(time_limit, 0.001)
        argv = ["timeout", "-k", str(_KILL_GRACE_S), f"{limit:.3f}", "bash", "-c", command]
        started = time.monotonic()
        # Our own deadline backs up `timeout`: a background child holding stdout open
        # keeps the stream alive after the command itself is gone.
        exit_code, output = await self._exec(
            argv,
            env={**self._env, **(env or {})},
            workdir=workdir or self._workdir,
            deadline_s=limit + _KILL_GRACE_S + 10,
            user=user,
        )
        elapsed = time.monotonic() - started
        phases.note_call(limit, elapsed)  # splits a verification into its parts
        if exit_code is None:
            await self._check_alive()
            return ExecResult(exit_code=124, output=output, timed_out=True)
        timed_out = exit_code in (124, 137) and elapsed >= limit * 0.99
        if exit_code == 137 and not timed_out:
            await self._check_alive()
            kills = await self._oom_kills()
            if kills > self._oom_seen:
                self._oom_seen = kills
                raise ContainerError(
                    f"{self.name}: `{command[:80]}` was OOM-killed (memory limit "
                    f"{self._memory_mb} MiB reached); raise the task's memory_mb"
                )
        return ExecResult(exit_code=exit_code, output=output, timed_out=timed_out)

    async def _exec(
        self, argv: list[str], *, env: dict[str, str], workdir: str | None, deadline_s: float,
        user: str | None = None,
    ) -> tuple[int | None, str]:
        """One exec to its end: (exit code or None when cut off, merged output)."""
        try:
            return await self._exec_once(argv, env=env, workdir=workdir, deadline_s=deadline_s, user=user)
        except ContainerError:
            await self._check_alive()  # say "OOM-killed" rather than "409 not running"
            raise

    async def _exec_once(
        self, argv: list[str], *, env: dict[str, str], workdir: str | None, deadline_s: float,
        user: str | None = None,
    ) -> tuple[int | None, str]:
        with docker_errors(f"{self.name}: exec", url=self._url), anyio.fail_after(
            self._api_timeout
        ):
            execution = await self._container.exec(
                argv, stdin=False, tty=False, environment=env, workdir=workdir, user=user or ""
            )
        head = bytearray()
        tail = bytearray()
        dropped = 0
        ended = False
        stream = execution.start(detach=False)
        try:
            with anyio.move_on_after(deadline_s), docker_errors(
                f"{self.name}: exec stream", url=self._url
            ):
                while True:
                    message = await stream.read_out()
                    if message is None:
                        ended = True
                        break
                    data = message.data
                    if len(head) < _RUN_OUTPUT_KEEP:
                        room = _RUN_OUTPUT_KEEP - len(head)
                        head += data[:room]
                        data = data[room:]
                    if data:
                        tail += data
                        if len(tail) > 2 * _RUN_OUTPUT_KEEP:
                            cut = len(tail) - _RUN_OUTPUT_KEEP
                            dropped += cut
                            del tail[:cut]
        finally:
            await close_quietly(stream, what=f"{self.name}: exec stream close")
        output = head.decode("utf-8", errors="replace")
        if dropped:
            output += f"\n[... {dropped} bytes of output not kept ...]\n"
        output += tail.decode("utf-8", errors="replace")
        exit_code = await self._exit_code(execution) if ended else None
        return exit_code, output

    async def _oom_kills(self) -> int:
        """The container cgroup's OOM-kill counter (cgroup v1 or v2); 0 when unreadable.

        Docker's ``State.OOMKilled`` only covers the container's main process on some
        daemons, so a killed command inside is found here.
        """
        try:
            _, output = await self._exec_once(
                ["cat", "/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"],
                env={},
                workdir=None,
                deadline_s=10,
            )  # one of the two files is missing on any host: the exit code says nothing
        except ContainerError:
            return 0  # stopped meanwhile: Docker's own flag is all there is
        for line in output.splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    async def _exit_code(self, execution: Any) -> int | None:
        # The exit code lands shortly after the stream's end; poll briefly for it.
        with docker_errors(f"{self.name}: exec inspect", url=self._url), anyio.fail_after(
            self._api_timeout
        ):
            for _ in range(100):
                info = await execution.inspect()
                if not info.get("Running") and info.get("ExitCode") is not None:
                    return int(info["ExitCode"])
                await anyio.sleep(0.02)
        return None

    async def state(self) -> ContainerState:
        """Docker's view of the container (running, OOM-killed, exit code)."""
        with docker_errors(f"{self.name}: inspect", url=self._url), anyio.fail_after(
            self._api_timeout
        ):
            info = await self._container.show()
        state = info.get("State", {})
        running = bool(state.get("Running"))
        oom = bool(state.get("OOMKilled")) or (running and await self._oom_kills() > 0)
        return ContainerState(
            running=running,
            oom_killed=oom,
            exit_code=state.get("ExitCode"),
            status=str(state.get("Status", "")),
        )

    async def stopped_through_docker(self) -> bool:
        """Whether Docker itself was asked to stop this container since the episode took
        it (``docker kill``/``stop``/``rm -f``, a daemon shutting down): a ``kill`` or
        ``stop`` event. A process inside that kills the main one (``kill -9 -1``) leaves
        only ``die``, so this tells the infrastructure's doing from the agent's.
        """
        params = {
            "since": f"{self._since:.3f}",
            "until": f"{time.time():.3f}",  # a finite answer: the events so far
            "filters": json.dumps({"container": [self.id], "type": ["container"],
                                   "event": ["kill", "stop"]}),
        }
        with docker_errors(f"{self.name}: events", url=self._url), anyio.fail_after(
            self._api_timeout
        ):
            async with self._container.docker._query("events", params=params) as response:
                body = await response.text()
        return any(line.strip() for line in body.splitlines())

    async def stopped_by_agent(self) -> str | None:
        """Why the container is gone when the agent stopped it: it stopped while the daemon
        still answers, not OOM-killed, with no ``kill``/``stop`` event from Docker (the
        agent typed ``kill -9 -1``, which takes the container's main process with it).
        None while it runs, after an OOM kill, or when Docker was asked to stop it
        (``docker kill``/``stop``/``rm -f``, a daemon shutting down); raises
        :class:`~rsr_async.errors.SandboxError` when Docker does not answer."""
        state = await self.state()
        if state.running or state.oom_killed:
            return None
        if await self.stopped_through_docker():
            return None  # docker kill/stop/rm, a daemon shutting down: not the agent
        return (
            f"the sandbox's container stopped during the episode ({state.status}, exit code "
            f"{state.exit_code}): the agent killed the container's main process (e.g. with "
            "`kill -9 -1`), so nothing was left to grade"
        )

    async def _check_alive(self) -> None:
        """Raise :class:`ContainerError` if the container itself died (OOM or otherwise)."""
        state = await self.state()
        if state.running:
            return
        if state.oom_killed:
            raise ContainerError(
                f"{self.name}: container was OOM-killed (memory limit reached); "
                "raise the task's memory_mb or sandbox.default_memory_mb"
            )
        raise ContainerError(
            f"{self.name}: container stopped ({state.status}, exit code {state.exit_code})"
        )

    async def run_hidden(self, run: HiddenRun) -> HiddenReport:
        """Run hidden tests here through this host's verifier station
        (:mod:`rsr_async.sandbox.hidden`): the container's processes stay alive, and none
        of them can reach the tests or what they write."""
        if self._station is None:
            raise SandboxError(f"{self.name}: this sandbox has no verifier station to run hidden tests")
        if run.discard_changes and self._station.copy_refused is not None:
            return await self._run_on_commit(run)
        with docker_errors(f"{self.name}: inspect", url=self._url), anyio.fail_after(
            self._api_timeout
        ):
            info = await self._container.show()
        pid = int((info.get("State") or {}).get("Pid") or 0)
        if pid <= 1:
            await self._check_alive()
            raise ContainerError(f"{self.name}: Docker reports no process for the container")
        if run.workdir is None:
            # Where `docker exec` starts, which is where Harbor and terminal-bench run the
            # tests: the container's working directory (terminal-bench's run-tests.sh
            # template refuses to run from /).
            workdir = (info.get("Config") or {}).get("WorkingDir") or None
            run = msgspec.structs.replace(run, workdir=workdir)
        started = time.monotonic()
        try:
            report = await self._station.run(pid, run, name=self.name)
        except CopyUnavailableError as exc:
            if not exc.host_wide:  # this run only (memory, a mount that moved): commit once
                log.info("%s: %s; this claim is graded on a committed copy", self.name, exc)
            elif self._station.refuse_copy(str(exc)):
                log.warning("Docker host %s: %s; RSRT's hidden tests run on a committed copy "
                            "of the sandbox there instead (seconds per claim, not milliseconds)",
                            self._url, exc)
            return await self._run_on_commit(run)
        except SandboxError:
            await self._check_alive()  # a container that died meanwhile says so
            raise
        # One exec does all three parts of a verification: its own split, the exec's
        # overhead counted as preparation.
        before, tests, after = report.split_s
        overhead = max(0.0, time.monotonic() - started - before - tests - after)
        phases.note_call(0.0, overhead + before)
        phases.note_call(run.time_limit, tests, tests=True)
        phases.note_call(0.0, after)
        return report

    async def _run_on_commit(self, run: HiddenRun) -> HiddenReport:
        """``run`` in a sibling container started from a commit of this one (the copy
        where the host cannot make rsr-verify's own), removed afterwards."""
        if self._copier is None:
            raise CopyUnavailableError(
                f"{self.name}: {self._station.copy_refused if self._station else 'no station'}; "
                "and this sandbox has no pool to commit a copy through"
            ).as_permanent()
        async with self._copier(self) as copy:
            return await copy.run_hidden(msgspec.structs.replace(run, discard_changes=False))

    async def upload(self, local: Path, remote: str) -> None:
        """Copy a local file or directory to ``remote`` (a directory is copied whole)."""
        local = Path(local)
        if not local.exists():
            raise SandboxError(f"{self.name}: upload source {local} does not exist")
        remote = posixpath.normpath(remote if remote.startswith("/") else "/" + remote)
        stage = self._stage_for(remote)
        target = remote if stage is None else f"{stage}/{posixpath.basename(remote)}"
        started = time.monotonic()
        data = await anyio.to_thread.run_sync(_tar_of, local, target.lstrip("/"))
        with docker_errors(f"{self.name}: upload to {remote}", url=self._url), anyio.fail_after(
            self._api_timeout
        ):
            # Docker creates missing parent directories while extracting at "/".
            await self._container.put_archive("/", data)  # type: ignore[no-untyped-call]
        if stage is not None:
            await self._unstage(stage, target, remote)
        phases.note_call(0.0, time.monotonic() - started)

    async def write_file(self, remote: str, data: bytes | str, *, mode: int = 0o644) -> None:
        """Create ``remote`` (and its parent directories) holding ``data``."""
        started = time.monotonic()
        payload = data.encode() if isinstance(data, str) else data
        remote = posixpath.normpath(remote if remote.startswith("/") else "/" + remote)
        stage = self._stage_for(remote)
        target = remote if stage is None else f"{stage}/{posixpath.basename(remote)}"
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            info = tarfile.TarInfo(target.lstrip("/"))
            info.size = len(payload)
            info.mode = mode
            info.mtime = int(time.time())
            archive.addfile(info, io.BytesIO(payload))
        with docker_errors(f"{self.name}: write {remote}", url=self._url), anyio.fail_after(
            self._api_timeout
        ):
            await self._container.put_archive("/", buffer.getvalue())  # type: ignore[no-untyped-call]
        if stage is not None:
            await self._unstage(stage, target, remote)
        phases.note_call(0.0, time.monotonic() - started)

    def _stage_for(self, remote: str) -> str | None:
        """A staging directory when ``remote`` lies on a tmpfs mount, else None.

        Docker's archive API writes under a container's tmpfs mounts into the layer
        beneath them, where no process inside sees the files; they are put in a staging
        directory instead and copied into place from inside (:meth:`_unstage`)."""
        if not any(remote == m or remote.startswith(m.rstrip("/") + "/") for m in self._tmpfs):
            return None
        return f"{_STAGE_DIR}/{uuid.uuid4().hex[:12]}"

    async def _unstage(self, stage: str, staged: str, remote: str) -> None:
        script = (  # the staged copy goes whatever happens: it must not fill the disk
            '{ mkdir -p "$(dirname "$2")" && if [ -d "$1" ]; then mkdir -p "$2" && '
            'cp -a "$1/." "$2/"; else cp -a "$1" "$2"; fi; }; rc=$?; rm -rf "$3"; '
            'rmdir "$(dirname "$3")" 2>/dev/null; exit $rc'
        )
        code, output = await self._exec_once(
            ["sh", "-c", script, "sh", staged, remote, stage], env={}, workdir=None, deadline_s=120
        )
        if code != 0:
            raise SandboxError(
                f"{self.name}: copying an upload into tmpfs {remote} failed (exit {code}): "
                f"{output[-500:]}; is the tmpfs full (the task's storage_mb)?"
            )

    async def download(self, remote: str, local: Path) -> None:
        """Copy ``remote`` (file or directory) to ``local``; FileNotFoundError if absent."""
        try:
            with docker_errors(f"{self.name}: download of {remote}", url=self._url,
                               expected={404}), anyio.fail_after(self._api_timeout):
                archive = await self._container.get_archive(remote)
        except DockerAnswer as absent:
            raise FileNotFoundError(f"{self.name}: no {remote} in the sandbox") from absent
        refused = await anyio.to_thread.run_sync(_extract_to, archive, Path(local))
        if refused:
            log.warning("%s: download of %s skipped %d unsafe entries, e.g. %s",
                        self.name, remote, len(refused), refused[0])

    @property
    def url(self) -> str:
        """The Docker host this container runs on."""
        return self._url

    async def commit(self, *, repository: str, tag: str, labels: dict[str, str]) -> str:
        """Snapshot the container's filesystem as image ``repository:tag`` (running
        processes are not part of it); returns the image id. The container is paused for
        the commit, so the agent's files are caught in one consistent state."""
        with docker_errors(f"{self.name}: commit", url=self._url), anyio.fail_after(
            self._api_timeout
        ):
            info = await self._container.commit(
                repository=repository, tag=tag, config={"Labels": labels}, pause=True
            )
        return str(info.get("Id", f"{repository}:{tag}"))

    async def shell(self) -> DockerShell:
        """The episode's persistent shell; a new one if the last one exited."""
        if self._shell is None or not self._shell.alive:
            if self._shell is not None:
                await self._shell.close()
            self._shell = await self.open_shell()
        return self._shell

    async def open_shell(self) -> DockerShell:
        """Another independent bash session in the same container (closed with it)."""
        shell = DockerShell(
            self._container, name=self.name, api_timeout_s=self._api_timeout, quiet_s=self._quiet
        )
        self._shells.append(shell)
        try:
            await shell.start(self._tg, env=self._env, workdir=self._workdir)
        except ShellClosedError:
            await self._check_alive()  # a dead container is a ContainerError, not a shell's
            raise
        return shell

    async def aclose(self) -> None:
        """Close every shell (the pool removes the container afterwards)."""
        for shell in self._shells:
            await shell.close()
        self._shells.clear()
        self._shell = None


def _tar_of(local: Path, arcname: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(str(local), arcname=arcname)
    return buffer.getvalue()


def _extract_to(archive: tarfile.TarFile, local: Path) -> list[str]:
    """Extract so that the archive's top entry becomes ``local`` itself, through tarfile's
    ``data`` filter. As Harbor 0.26's ``extract_dir`` does, a member the filter refuses (a
    link that leaves the copy, an absolute link, a device) is skipped alone, not the whole
    archive; returns why each was refused."""
    refused: list[str] = []
    with archive:
        members = archive.getmembers()
        if not members:
            return refused
        root = members[0].name.split("/")[0]
        if members[0].isdir() or len(members) > 1:
            if local.exists() and not local.is_dir():
                local.unlink()
            local.mkdir(parents=True, exist_ok=True)
        else:
            local.parent.mkdir(parents=True, exist_ok=True)
        for member in members:
            rel = member.name[len(root) :].lstrip("/")
            if member.isdir() and not rel:
                continue
            if not rel and member.isfile():  # the single file itself
                source = archive.extractfile(member)
                if source is None:
                    continue
                with source, open(local, "wb") as out:
                    shutil.copyfileobj(source, out)
                local.chmod(member.mode & 0o777)
                continue
            # A single link or special file lands beside where the file would, as Harbor
            # extracts it into its staging directory; anything else inside the copy.
            member.name = local.name if not rel else rel
            try:
                archive.extract(member, local.parent if not rel else local, filter="data")
            except tarfile.FilterError as exc:
                refused.append(str(exc))
    return refused