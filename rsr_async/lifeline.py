"""Child processes that die with their parent and inherit no stray descriptors.

Nothing the engine starts may outlive the process that started it, whatever signal ends
that process (SIGKILL runs no ``finally``). Two measures, both applied in the child:

1. ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux): the kernel kills the child when its
   parent dies. It survives ``execve``, so a trampoline can set it and then exec the
   real program (SGLang's launcher, the simulator). PDEATHSIG fires when the parent
   *thread* that forked exits, not the process: spawn from the event loop's thread
   (long-lived), never from a worker thread that a pool may retire. The parent may also
   die between ``fork`` and ``prctl``; the trampoline checks ``os.getppid()`` right
   after setting it and exits if the parent is already gone.
2. Descriptors: uvloop's ``subprocess_exec`` (libuv) does not close inherited
   descriptors (measured: an inheritable flock'd lock file stays open in the child, so
   a dead run's lock outlives it). The trampoline closes every descriptor above 2 that
   the caller did not name in ``keep_fds`` before it execs.

:func:`guarded_argv` wraps an argv in the trampoline (this file, run as a script): the
simulator, SGLang servers, and the base image's ``debootstrap`` and ``tar``. Our own
long-running children (the simulator) also poll ``os.getppid()`` (:func:`watch_parent`)
as a second line where PDEATHSIG is missing. PDEATHSIG reaches the direct child only: a
shell script's own children (debootstrap's ``dpkg``) are not covered; they end when
their pipe to the dead script breaks.

Where a library starts processes of its own (a private Ray instance: its raylet starts
agents that outlive a SIGKILLed driver by minutes), a :class:`Reaper` covers them: a
small watcher told the pids (:func:`descendants`) that SIGKILLs whichever are still
alive once this process is gone, or when it is closed.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable, Sequence

__all__ = ["Reaper", "descendants", "guarded_argv", "set_parent_death_signal", "watch_parent"]

_PR_SET_PDEATHSIG = 1


def set_parent_death_signal(parent_pid: int, sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies.

    Returns False where prctl is unavailable (not Linux). Exits at once (status 1) when
    the parent is already gone (``os.getppid() != parent_pid``): the signal would never
    come, as the process has been re-parented.
    """
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent_pid:
        os._exit(1)
    return armed


def guarded_argv(argv: Sequence[str], *, keep_fds: Sequence[int] = ()) -> list[str]:
    """``argv`` behind the trampoline: dies with this process, inherits only 0-2 and
    ``keep_fds`` (which the caller must also pass to the spawn call)."""
    keep = ",".join(str(fd) for fd in keep_fds)
    # The file itself, in isolated mode: stdlib only, so it works whichever copy of the
    # package the child's environment would import, and no module here shadows stdlib.
    return [sys.executable, "-I", os.path.abspath(__file__), str(os.getpid()), keep, "--",
            *argv]


async def watch_parent(parent_pid: int, on_orphaned: Callable[[], None],
                       *, interval_s: float = 0.5) -> None:
    """Call ``on_orphaned`` (once) when this process's parent is no longer ``parent_pid``.

    The belt to PDEATHSIG's braces: it holds where prctl does not (other kernels, a
    parent thread that exited early, a setuid exec that cleared the signal)."""
    import asyncio  # here, so the trampoline (this file run as a script) starts fast
    while os.getppid() == parent_pid:  # noqa: ASYNC110 - polling the kernel; no event to wait on
        await asyncio.sleep(interval_s)
    on_orphaned()


def _process_table() -> dict[int, tuple[int, str]]:
    """pid → (parent pid, start time in clock ticks), from ``/proc`` (Linux)."""
    table: dict[int, tuple[int, str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue  # gone since the listing
        # The name (field 2) may hold spaces and parentheses: split after the last ")".
        fields = stat[stat.rindex(")") + 2:].split()
        table[int(name)] = (int(fields[1]), fields[19])
    return table


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def descendants(pid: int, *, marks: tuple[str, ...] = ()) -> list[tuple[int, str]]:
    """(pid, start time) of every live descendant of ``pid``; the start time tells a
    process from a later one that got its pid. ``marks``: only those whose command line
    contains one of them (their own descendants are still followed)."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found: list[tuple[int, str]] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), ()):
            if not marks or any(mark in _cmdline(child) for mark in marks):
                found.append((child, table[child][1]))
            stack.append(child)
    return found


def _kill_tracked(tracked: Sequence[tuple[int, str]]) -> None:
    """SIGKILL each tracked process still alive with the start time it was tracked with."""
    table = _process_table()
    for pid, start in tracked:
        if pid in table and table[pid][1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass  # gone in between


class Reaper:
    """A watcher process that SIGKILLs the processes :meth:`track` named, once this
    process dies (its end of the pipe closes, whatever killed it) or :meth:`close` is
    called; those already gone, or whose pid now belongs to another process, are left."""

    def __init__(self) -> None:
        import subprocess  # here, so the trampoline (this file run as a script) starts fast

        self._process = subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__), "--reap", str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, close_fds=True,
        )
        self._tracked: list[tuple[int, str]] = []

    def track(self, processes: Sequence[tuple[int, str]]) -> None:
        """Add (pid, start time) pairs, as :func:`descendants` gives them."""
        stdin = self._process.stdin
        assert stdin is not None
        self._tracked.extend(processes)
        stdin.write("".join(f"{pid} {start}\n" for pid, start in processes).encode())
        stdin.flush()

    def close(self, timeout_s: float = 10.0) -> None:
        """Reap now (what is still alive of the tracked processes) and end the watcher."""
        import subprocess

        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            # Its stdin never saw EOF (a forked copy of our end holds it open): reap
            # here instead, and end the watcher.
            self._process.kill()
            self._process.wait()
            _kill_tracked(self._tracked)


def _reap(parent_pid: int) -> None:
    """The watcher: read ``pid start`` lines until EOF or the parent is gone, then kill."""
    import select

    data = b""
    while True:
        orphaned = os.getppid() != parent_pid
        # Once orphaned, only what the dead parent wrote before it died is left to read.
        ready, _, _ = select.select([0], [], [], 0.0 if orphaned else 0.5)
        if not ready:
            if orphaned:
                break
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            break
        data += chunk
    _kill_tracked([(int(pid), start.decode()) for pid, start in
                   (line.split() for line in data.split(b"\n") if line.strip())])


def _close_fds(keep: set[int]) -> None:
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        names = [str(fd) for fd in range(3, 4096)]
    for name in names:
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, already closed


def main(argv: Sequence[str]) -> None:
    """``python -I lifeline.py PARENT_PID KEEP_FDS -- PROGRAM ARGS...``, or the
    :class:`Reaper`'s watcher: ``python -I lifeline.py --reap PARENT_PID``."""
    if len(argv) == 2 and argv[0] == "--reap":
        _reap(int(argv[1]))
        return
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: python -I lifeline.py PARENT_PID KEEP_FDS -- ARGV\n")
        raise SystemExit(2)
    set_parent_death_signal(int(argv[0]))
    _close_fds({int(fd) for fd in argv[1].split(",") if fd})
    program = list(argv[3:])
    try:
        os.execvp(program[0], program)
    except OSError as exc:
        sys.stderr.write(f"lifeline: cannot run {program[0]!r}: {exc}\n")
        raise SystemExit(127) from exc


if __name__ == "__main__":
    main(sys.argv[1:])
