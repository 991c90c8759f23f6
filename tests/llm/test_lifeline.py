"""Nothing we start outlives its starter: real processes, real signals, real flock."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rsr_async.rsr.runtime import run_id_for
from rsr_async.tasks import BUNDLED_SUITE
from tests.conftest import run_cli_env


def _wait_for(what: str, check: Callable[[], object], timeout_s: float) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass
    return out


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


def _fd_targets(pid: int) -> list[str]:
    targets = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            targets.append(os.readlink(fd))
        except OSError:
            pass
    return targets


def _listen_table(root: str = "/proc") -> list[tuple[int, str]]:
    """(port, socket inode) of every TCP socket in LISTEN state, from ``root/net/tcp*``."""
    out = []
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"{root}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":
                out.append((int(fields[1].rsplit(":", 1)[1], 16), fields[9]))
    return out


def _listening_ports(pid: int) -> set[int]:
    """TCP ports that ``pid`` listens on (its socket inodes in LISTEN state)."""
    inodes = {t[8:-1] for t in _fd_targets(pid) if t.startswith("socket:[")}
    return {port for port, inode in _listen_table(f"/proc/{pid}") if inode in inodes}


def _flockable(path: Path) -> bool:
    with path.open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fh, fcntl.LOCK_UN)
        return True


_PARENT = textwrap.dedent("""
    import fcntl, os, sys, anyio
    from rsr_async.lifeline import guarded_argv

    async def main():
        fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
        os.set_inheritable(fd, True)  # the worst case: a caller's inheritable lock
        fcntl.flock(fd, fcntl.LOCK_EX)
        child = await anyio.open_process(guarded_argv(["sleep", "300"]))
        print(child.pid, flush=True)
        await anyio.sleep(300)

    anyio.run(main, backend_options={"use_uvloop": sys.argv[2] == "uvloop"})
""")


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_guarded_child_dies_with_parent_and_keeps_no_lock(
    tmp_path: Path, loop: str, sig: signal.Signals
) -> None:
    lock = tmp_path / "run.lock"
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(lock), loop], stdout=subprocess.PIPE,
        env=run_cli_env(), text=True,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        # The trampoline has exec'd into `sleep`: its descriptors are the final ones.
        _wait_for("child execs", lambda: _cmdline(child)[:1] == ["sleep"], 10)
        assert str(lock) not in _fd_targets(child), "the child inherited the lock file"
        assert not _flockable(lock)  # the parent holds it
        parent.send_signal(sig)
        parent.wait(timeout=10)
        _wait_for("child gone", lambda: not _alive(child), 5)
        assert _flockable(lock)
    finally:
        parent.kill()
        parent.wait()


# -- `run` end to end: the embedded simulator dies with the run ---------------------------

def _dataset(tmp_path: Path) -> Path:
    listing = tmp_path / "tasks.txt"
    names = ["word-frequency", "merge-intervals"]
    listing.write_text("".join(f"{BUNDLED_SUITE / n}\n" for n in names))
    return listing


def _containers(run_dir: Path) -> list[str]:
    return subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=rsr_async.run={run_id_for(run_dir)}"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "run"
    yield path
    leftover = _containers(path)
    if leftover:  # a killed run leaves its containers to the next run's sweep; not ours
        subprocess.run(["docker", "rm", "-f", *leftover], capture_output=True, timeout=120)


def _sim_child(run_pid: int) -> int:
    for pid in _children(run_pid):
        if "sim-server" in _cmdline(pid) and _listening_ports(pid):
            return pid
    return 0


@pytest.mark.docker
@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_run_simulator_dies_with_the_run(tmp_path: Path, run_dir: Path, sig: signal.Signals) -> None:
    run = subprocess.Popen(
        [sys.executable, "-m", "rsr_async", "run", "--dataset", str(_dataset(tmp_path)),
         "--run-dir", str(run_dir), "--progress", "none", "--attempts", "1",
         "--set", "engine.grace_period_s=1"],
        env=run_cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        sim = int(_wait_for("simulator listening", lambda: _sim_child(run.pid), 120))  # type: ignore[call-overload]
        ports = _listening_ports(sim)
        assert not [t for t in _fd_targets(sim) if t.startswith(str(tmp_path))], (
            "the simulator inherited descriptors of the run directory"
        )
        run.send_signal(sig)
        run.wait(timeout=90)  # SIGTERM drains (grace 1 s) and cleans up; SIGKILL at once
        _wait_for("simulator gone", lambda: not _alive(sim), 5)
        lock = run_dir / "run.lock"
        if lock.exists():
            assert _flockable(lock)
        for port in ports:  # the kernel may list a dead process's socket for a moment
            _wait_for(f"port {port} closed", lambda port=port: not _listening(port), 5)
    finally:
        run.kill()
        run.wait()


# -- `serve`: the launched servers die with it ----------------------------------------------

def _listening(port: int) -> bool:
    """Whether any socket listens on ``port``. Connecting instead can succeed with
    nothing listening: a connect to a free port in the ephemeral range may be given that
    same port as its source and connect to itself (TCP self-connect), which connect()'s
    even-port preference makes likely for ``base + 1``."""
    return any(p == port for p, _ in _listen_table())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.timeout(120)
def test_serve_servers_die_when_serve_is_killed() -> None:
    # The simulator stands in for sglang.launch_server and gets no --parent-pid, so only
    # the trampoline (PDEATHSIG, set before exec) can take it down: as for real SGLang.
    base = _free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "rsr_async", "serve", "--model-path", "m", "--servers", "2",
         "--base-port", str(base), "--ready-timeout", "60",
         "--launcher", f"{sys.executable} -m rsr_async sim-server"],
        env=run_cli_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert serve.stdout is not None
        deadline = time.monotonic() + 60
        for line in serve.stdout:  # a line per simulator, then serve's own
            if line.startswith("ready: ") or time.monotonic() > deadline:
                break
        servers = [pid for pid in _children(serve.pid) if "sim-server" in _cmdline(pid)]
        assert len(servers) == 2
        serve.kill()
        serve.wait(timeout=10)
        for pid in servers:
            _wait_for(f"server {pid} gone", lambda pid=pid: not _alive(pid), 5)  # type: ignore[misc]
        for port in (base, base + 1):  # the kernel may list a dead process's socket for a moment
            _wait_for(f"port {port} closed", lambda port=port: not _listening(port), 5)  # type: ignore[misc]
    finally:
        serve.kill()
        serve.wait()


# -- a library's own processes: the Reaper kills what it was told of ------------------------

_REAPED = textwrap.dedent("""
    import subprocess, sys, time
    from rsr_async.lifeline import Reaper, descendants

    reaper = Reaper()
    before = set(descendants(__import__("os").getpid()))
    # As a library would start them: unguarded, one a grandchild (sh starts sleep).
    subprocess.Popen(["sleep", "300"])
    subprocess.Popen(["sh", "-c", "sleep 301; :"])
    deadline = time.monotonic() + 10
    while True:  # until sh has forked its sleep (no event to wait on: /proc)
        started = [p for p in descendants(__import__("os").getpid()) if p not in before]
        if len(started) == 3 or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    reaper.track(started)
    print(" ".join(str(pid) for pid, _ in started), flush=True)
    time.sleep(300)
""")


def test_the_reaper_kills_what_it_tracks_when_its_owner_is_sigkilled() -> None:
    owner = subprocess.Popen([sys.executable, "-c", _REAPED], stdout=subprocess.PIPE,
                             env=run_cli_env(), text=True)
    tracked: list[int] = []
    try:
        assert owner.stdout is not None
        tracked = [int(pid) for pid in owner.stdout.readline().split()]
        assert len(tracked) == 3, tracked  # sleep, sh and sh's sleep
        assert all(_alive(pid) for pid in tracked)
        owner.kill()
        owner.wait(timeout=10)
        _wait_for("tracked processes gone", lambda: not any(_alive(pid) for pid in tracked), 5)
    finally:
        owner.kill()
        owner.wait()
        for pid in tracked:  # a failed check leaves none behind either
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_reaper_leaves_a_pid_that_another_process_took() -> None:
    from rsr_async.lifeline import Reaper

    bystander = subprocess.Popen(["sleep", "300"])
    try:
        reaper = Reaper()
        # The pid, with a start time it never had: a process that ended and was replaced.
        reaper.track([(bystander.pid, "1")])
        reaper.close()
        assert _alive(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()
