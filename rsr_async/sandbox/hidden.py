"""Hidden tests, run where the agent cannot reach them: the verifier station.

A task's tests run in the agent's own sandbox while the agent's processes stay alive
(Harbor's shared verifier mode: a task may test the server the agent left running). What
the engine runs there to prepare, run and read the verification must not be something the
agent could have replaced, and what the tests write must be out of its processes' reach.
So nothing of it goes through the sandbox's own tools:

- **The station.** One container per Docker host and pool (:class:`VerifierStation`),
  from an image holding only ``rsr-verify``, a static program built here from
  ``verifier_helper.c`` (:func:`helper_binary`). It runs with ``--pid host`` and
  ``CAP_SYS_ADMIN``, unconfined by AppArmor and seccomp (the tests get a seccomp filter
  of rsr-verify's instead), and has no network.
- **One exec per verification** into the station runs ``rsr-verify run PID``: it joins
  the sandbox's cgroups and namespaces, leaves its mount namespace for a private copy,
  mounts a fresh tmpfs on ``/tests`` and on ``/logs/verifier`` that only this run sees,
  unpacks the tests from the exec's stdin, runs the command with the sandbox's
  environment and capabilities plus one the sandbox lacks (so no process of the agent
  may reach the run's files through ``/proc/PID/root``), kills what the tests left, and
  sends back the files of ``/logs/verifier`` read through the descriptor it kept.
  The C file's header says each step and why.
- **A copy, for RSRT** (``HiddenRun.discard_changes``): ``--copy`` makes the run's private
  mount namespace a copy-on-write copy of the sandbox (kernel overlays over its writable
  mounts, their upper layers on a tmpfs of the run) before the tests' tmpfs mounts, so
  nothing the tests write reaches the sandbox; the copy goes with the run's last process.
  Where the kernel refuses it (:class:`CopyUnavailableError`), the sandbox falls back to a
  committed copy, said once per host (:meth:`VerifierStation.refuse_copy`).

The wire formats (the tests bundle in, the result records out) are encoded and decoded
here; :meth:`~rsr_async.sandbox.container.DockerSandbox.run_hidden` is the caller.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import shutil
import struct
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import aiodocker
import anyio

from ..errors import ContainerError, SandboxError
from .base import CopyUnavailableError, HiddenReport, HiddenRun
from .docker_errors import DockerAnswer, close_quietly, docker_errors
from .ownership import remove_container

__all__ = [
    "HELPER_SOURCE",
    "STATION_CAPABILITIES",
    "STATION_EPISODE",
    "VerifierStation",
    "decode_records",
    "encode_bundle",
    "helper_binary",
    "report_from_records",
]

HELPER_SOURCE = Path(__file__).with_name("verifier_helper.c")
"""The static program's source; its hash names the binary and the station's image."""
STATION_EPISODE = "verifier-station"
"""The station's episode label (it is no episode's): how listings of sandboxes skip it."""
STATION_REPOSITORY = "rsr-async-verifier"
"""The station image's repository (tag: the helper's hash); kept like task images."""
STATION_CAPABILITIES = [
    # What the tests may hold: Docker's default set (a sandbox holds a subset) ...
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
    # ... the capabilities rsr-verify may add for them (no sandbox of ours holds one) ...
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "SYSLOG",
    # ... and what rsr-verify itself needs: namespaces and mounts, other processes' /proc.
    "SYS_ADMIN", "SYS_PTRACE",
]
"""The station's capabilities (listed, not ``ALL``: a host whose daemon lacks one, such as
CAP_SYS_RESOURCE in some VMs, refuses a container that asks for every capability)."""
CGROUP_ROOT = "/host-cgroup"
"""Where the station sees the host's cgroup tree, to put the tests in the sandbox's."""
_HELPER_IN_IMAGE = "/rsr-verify"
_RECORD = struct.Struct(">cI")


# -- the program -------------------------------------------------------------------------


def _cache_dir() -> Path:
    root = os.environ.get("RSR_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rsr_async"
    )
    return Path(root)


def helper_digest() -> str:
    """The first 16 hex digits of the helper source's sha256."""
    return hashlib.sha256(HELPER_SOURCE.read_bytes()).hexdigest()[:16]


def helper_binary() -> Path:
    """The static ``rsr-verify`` for this source, compiled once into the cache
    (``$RSR_CACHE_DIR``, else ``~/.cache/rsr_async``). Blocking: call it in a thread.

    Raises :class:`~rsr_async.errors.SandboxError` (permanent: retrying cannot help)
    when no C compiler with a static C library is installed.
    """
    target = _cache_dir() / f"rsr-verify-{helper_digest()}"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SandboxError(
            "the verifier needs a C compiler to build its static helper "
            f"({HELPER_SOURCE.name}): install gcc and libc6-dev (apt-get install gcc libc6-dev)"
        ).as_permanent()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / "rsr-verify"
        result = subprocess.run(
            [compiler, "-static", "-O2", "-o", str(built), str(HELPER_SOURCE)],
            capture_output=True, text=True, timeout=300, check=False,
        )
        if result.returncode != 0:
            raise SandboxError(
                f"building the verifier's static helper with {compiler} failed: "
                f"{result.stderr.strip()[-800:]}; a static C library is needed "
                "(apt-get install libc6-dev)"
            ).as_permanent()
        os.replace(built, target)  # atomic: a concurrent build leaves one whole binary
    return target


def _station_context(binary: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        dockerfile = f'FROM scratch\nCOPY rsr-verify {_HELPER_IN_IMAGE}\nENTRYPOINT ["{_HELPER_IN_IMAGE}"]\n'.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        archive.addfile(info, io.BytesIO(dockerfile))
        archive.add(str(binary), arcname="rsr-verify")
    return buffer.getvalue()


# -- wire formats ---------------------------------------------------------------------------


def encode_bundle(entries: list[tuple[Path, str]], *, executable: str | None = None) -> bytes:
    """The tests bundle for rsr-verify's stdin: each (local file or directory, its path
    under the tests directory; "" for the directory itself) in order, files with their
    mode (``executable``'s made 0755), symlinks as links. Blocking (reads files): call it
    in a thread."""
    out = bytearray()
    executable = executable.strip("/") if executable else None

    def add(kind: bytes, mode: int, path: str, data: bytes = b"") -> None:
        name = path.encode()
        out.extend(kind + struct.pack(">II", mode & 0o7777, len(name)) + name)
        out.extend(struct.pack(">Q", len(data)) + data)

    def walk(local: Path, path: str) -> None:
        if local.is_symlink():
            add(b"l", 0o777, path, os.readlink(local).encode())
        elif local.is_dir():
            if path:
                add(b"d", local.stat().st_mode or 0o755, path)
            for child in sorted(local.iterdir()):
                walk(child, f"{path}/{child.name}" if path else child.name)
        elif local.is_file():
            mode = local.stat().st_mode | (0o755 if path == executable else 0)
            add(b"f", mode, path, local.read_bytes())

    for local, path in entries:
        walk(Path(local), path.strip("/"))
    out.extend(b"e")
    return bytes(out)


def decode_records(data: bytes) -> list[tuple[str, bytes]]:
    """rsr-verify's result records (tag, payload); a record cut short is dropped (the run
    was cut off, which the missing ``D`` record says)."""
    records: list[tuple[str, bytes]] = []
    at = 0
    while at + _RECORD.size <= len(data):
        tag, length = _RECORD.unpack_from(data, at)
        start = at + _RECORD.size
        if start + length > len(data):
            break
        records.append((tag.decode("latin-1"), data[start : start + length]))
        at = start + length
    return records


def _file_record(payload: bytes) -> tuple[str, str]:
    size, name_len = struct.unpack_from(">QI", payload, 0)
    at = 12
    name = payload[at : at + name_len].decode("utf-8", errors="replace")
    at += name_len
    (head_len,) = struct.unpack_from(">I", payload, at)
    head = payload[at + 4 : at + 4 + head_len]
    at += 4 + head_len
    (tail_len,) = struct.unpack_from(">I", payload, at)
    tail = payload[at + 4 : at + 4 + tail_len]
    text = head.decode("utf-8", errors="replace")
    if tail_len:
        omitted = size - head_len - tail_len
        text += f"\n[... {omitted} bytes omitted ...]\n" + tail.decode("utf-8", errors="replace")
    return name, text


def report_from_records(records: list[tuple[str, bytes]], output: str) -> HiddenReport:
    """A :class:`HiddenReport` from rsr-verify's records and the command's output.

    Raises :class:`~rsr_async.errors.SandboxError` when the run could not be set up or
    was cut off before its end (no ``D`` record): infrastructure, retried."""
    files: dict[str, str] = {}
    not_sent: list[str] = []
    tampered: list[str] = []
    notes: list[str] = []
    ended = ""
    done = False
    split = (0.0, 0.0, 0.0)
    for tag, payload in records:
        text = payload.decode("utf-8", errors="replace") if tag != "F" else ""
        if tag == "E":
            raise SandboxError(f"the hidden tests could not be set up: {text}")
        if tag == "C":
            host_wide = text.startswith("host: ")
            error = CopyUnavailableError(f"no copy-on-write copy of the sandbox: {text.removeprefix('host: ')}")
            error.host_wide = host_wide
            raise error
        if tag == "F":
            name, content = _file_record(payload)
            files[name] = content
        elif tag == "M":
            not_sent.append(text)
        elif tag == "T":
            tampered.append(text)
        elif tag == "N":
            notes.append(text)
        elif tag == "X":
            ended = text
        elif tag == "Q":
            parts = [float(x) for x in text.split()]
            if len(parts) == 3:
                split = (parts[0], parts[1], parts[2])
        elif tag == "D":
            done = True
    if done and not ended and tampered:  # void before the command could even start
        return HiddenReport(exit_code=None, output=output, tampered=tuple(tampered), notes=tuple(notes))
    if not done or not ended:
        raise SandboxError(
            "the hidden tests' run was cut off before it reported (killed, or its "
            f"container went away); output: {output[-300:]!r}"
        )
    kind, _, number = ended.partition(" ")
    return HiddenReport(
        exit_code=int(number) if kind == "exit" else (128 + int(number) if kind == "signal" else None),
        signal=int(number) if kind == "signal" else None,
        timed_out=kind == "timeout",
        output=output,
        files=files,
        files_not_sent=tuple(not_sent),
        tampered=tuple(tampered),
        notes=tuple(notes),
        split_s=split,
    )


# -- the station -------------------------------------------------------------------------------


class VerifierStation:
    """The verifier container of one Docker host for one pool (see the module doc).

    Started on first use (once, whatever the concurrency) and removed by :meth:`aclose`;
    labelled like the pool's sandboxes, so a sweep takes it when its owner is gone.
    """

    def __init__(self, docker: aiodocker.Docker, *, url: str, labels: dict[str, str],
                 api_timeout_s: float) -> None:
        self._docker = docker
        self._url = url
        self._labels = labels
        self._timeout = api_timeout_s
        self._lock = anyio.Lock()
        self._container: Any = None
        self.copy_refused: str | None = None
        """Why this host cannot make rsr-verify's copy (None: it can, or was not asked)."""

    def refuse_copy(self, reason: str) -> bool:
        """Remember that this host refused the copy-on-write copy; True the first time
        (when the caller says so in the log)."""
        first = self.copy_refused is None
        self.copy_refused = self.copy_refused or reason
        return first

    async def _image(self) -> str:
        binary = await anyio.to_thread.run_sync(helper_binary)
        tag = f"{STATION_REPOSITORY}:{helper_digest()}"
        try:
            with docker_errors(f"verifier image {tag}", url=self._url, expected={404}), \
                    anyio.fail_after(self._timeout):
                await self._docker.images.inspect(tag)
            return tag
        except DockerAnswer:
            pass  # 404: not built on this host yet
        context = await anyio.to_thread.run_sync(_station_context, binary)
        with docker_errors(f"building verifier image {tag}", url=self._url), anyio.fail_after(
            self._timeout * 4
        ):
            await self._docker.images.build(
                fileobj=io.BytesIO(context), encoding="application/x-tar", tag=tag, rm=True,
                forcerm=True,
            )
        return tag

    async def container(self) -> Any:
        """The running station container (started on first call)."""
        async with self._lock:
            if self._container is not None:
                return self._container
            image = await self._image()
            config: dict[str, Any] = {
                "Image": image,
                "Cmd": ["idle"],
                "Labels": self._labels,
                "NetworkDisabled": True,
                "HostConfig": {
                    "PidMode": "host",
                    "NetworkMode": "none",
                    "CapDrop": ["ALL"],
                    "CapAdd": STATION_CAPABILITIES,
                    # mount(2) inside: AppArmor's docker-default profile would refuse it;
                    # pivot_root (RSRT's copy): Docker's seccomp profile would. rsr-verify
                    # puts the tests under a filter of its own (verifier_helper.c).
                    "SecurityOpt": ["apparmor=unconfined", "seccomp=unconfined"],
                    "Binds": [f"/sys/fs/cgroup:{CGROUP_ROOT}:rw"],
                    "PidsLimit": 4096,
                    "AutoRemove": False,
                },
            }
            with docker_errors("starting the verifier station", url=self._url, permanent_4xx=True), \
                    anyio.fail_after(self._timeout):
                container = await self._docker.containers.create(config=config)
            try:
                with docker_errors("starting the verifier station", url=self._url,
                                   permanent_4xx=True), anyio.fail_after(self._timeout):
                    await container.start()
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await remove_container(self._docker, container.id, timeout_s=self._timeout)
                raise
            self._container = container
            return container

    async def run(self, sandbox_pid: int, run: HiddenRun, *, name: str) -> HiddenReport:
        """Run ``run`` in the sandbox whose init is host pid ``sandbox_pid``."""
        station = await self.container()
        bundle = await anyio.to_thread.run_sync(
            functools.partial(encode_bundle, [(Path(p), d) for p, d in run.files], executable=run.executable)
        )
        argv = [_HELPER_IN_IMAGE, "run", str(sandbox_pid), "--cgroup-root", CGROUP_ROOT,
                "--tmpfs", run.tests_dir, "--tmpfs", run.logs_dir,
                "--timeout", f"{max(run.time_limit, 0.001):.3f}", "--kill-after", "5",
                "--workdir", run.workdir or "/",
                "--max-files", str(run.max_files), "--keep-bytes", str(run.keep_bytes)]
        if run.discard_changes:
            argv.append("--copy")
        if run.user:
            argv += ["--user", run.user]
        for key, value in run.env.items():
            argv += ["--env", f"{key}={value}"]
        argv += ["--", run.command]
        try:
            with docker_errors(f"{name}: hidden tests exec", url=self._url), anyio.fail_after(self._timeout):
                execution = await station.exec(argv, stdin=True, tty=False)
        except ContainerError:
            await self._forget(station)  # gone or stopped: the next run starts a new one
            raise
        results = bytearray()
        output = bytearray()
        stream = execution.start(detach=False)
        try:
            with anyio.fail_after(run.time_limit + self._timeout + 30), docker_errors(
                f"{name}: hidden tests stream", url=self._url
            ):
                await stream.write_in(bundle)
                while True:
                    message = await stream.read_out()
                    if message is None:
                        break
                    if message.stream == 1:
                        results += message.data
                    elif len(output) < 2 * _OUTPUT_KEEP:
                        output += message.data
        except TimeoutError:
            raise ContainerError(f"{name}: the hidden tests' exec did not end in time") from None
        finally:
            await close_quietly(stream, what=f"{name}: hidden tests stream close")
        text = output.decode("utf-8", errors="replace")
        return report_from_records(decode_records(bytes(results)), text)

    async def _forget(self, station: Any) -> None:
        """Drop ``station`` (removed, best effort) if it is still the one in use."""
        async with self._lock:
            if self._container is station:
                self._container = None
                with anyio.CancelScope(shield=True):
                    await remove_container(self._docker, station.id, timeout_s=self._timeout)

    async def aclose(self) -> None:
        """Remove the station container (shielded: it must go even on cancellation)."""
        with anyio.CancelScope(shield=True):
            if self._container is not None:
                await remove_container(self._docker, self._container.id, timeout_s=self._timeout)
                self._container = None


_OUTPUT_KEEP = 1 << 20
"""The command's own stream output kept (the tests' stdout file is read separately)."""
