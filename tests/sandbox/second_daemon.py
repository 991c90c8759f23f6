"""A second, private Docker daemon on this machine, for multi-host tests and benches.

``dockerd`` runs as our child behind :func:`~rsr_async.lifeline.guarded_argv` (it dies
with the test process), with its own socket, data root, exec root, pid file and config
file (the machine's ``/etc/docker/daemon.json`` pins the main daemon's data root), no
bridge and no iptables rules: it shares nothing with the main daemon. Everything in it
is ours, and :meth:`SecondDaemon.stop` removes all of it.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from rsr_async.lifeline import guarded_argv

DRIVERS = ("overlay2", "fuse-overlayfs", "vfs")
"""Tried in order: the first this kernel and filesystem accept."""
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def ping(socket_path: str, timeout_s: float = 2.0) -> bool:
    """Whether the daemon at ``socket_path`` answers ``/_ping`` with OK."""
    try:
        conn = _UnixHTTP(socket_path, timeout_s)
        try:
            conn.request("GET", "/_ping")
            return conn.getresponse().read() == b"OK"
        finally:
            conn.close()
    except OSError:
        return False


def unavailable() -> str | None:
    """Why a second daemon cannot start here (None: it can try)."""
    if shutil.which("dockerd") is None:
        return "dockerd is not installed on this machine"
    if os.geteuid() != 0:
        return "a second dockerd needs root"
    return None


class SecondDaemon:
    """One private ``dockerd``: :meth:`start`, :meth:`kill` (as a crash), :meth:`stop`."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="rsr-d2-", dir="/tmp"))
        self.socket = str(self.root / "docker.sock")
        self.url = f"unix://{self.socket}"
        self.driver = ""
        self._process: subprocess.Popen[bytes] | None = None
        (self.root / "daemon.json").write_text("{}")

    def _argv(self, driver: str) -> list[str]:
        # In its own network namespace: a dockerd with --bridge=none deletes the host's
        # docker0 at start (libnetwork's removeDefaultBridgeInterface), which took the
        # default bridge, and every build's RUN step, from the shared daemon.
        return [
            "unshare", "--net", "--",
            "dockerd",
            "--config-file", str(self.root / "daemon.json"),
            "--host", self.url,
            "--data-root", str(self.root / "data"),
            "--exec-root", str(self.root / "exec"),
            "--pidfile", str(self.root / "docker.pid"),
            "--bridge=none", "--iptables=false", "--ip-masq=false",
            "--storage-driver", driver,
        ]

    def start(self) -> None:
        """Start it (again, after :meth:`kill`, on the same data root); raises with the
        daemon's last log lines when no driver works within the deadline."""
        drivers = (self.driver,) if self.driver else DRIVERS
        errors: list[str] = []
        # After a crash (kill) the managed containerd died with dockerd (PDEATHSIG) but
        # left its pid file and sockets: a restarted dockerd times out waiting on them.
        stale = self.root / "exec" / "containerd"
        for name in ("containerd.pid", "containerd.sock", "containerd.sock.ttrpc",
                     "containerd-debug.sock"):
            (stale / name).unlink(missing_ok=True)
        for driver in drivers:
            log = open(self.root / f"dockerd-{driver}.log", "ab")  # noqa: SIM115 - the child holds it
            # Spawned from the test's main thread: PDEATHSIG follows that thread (lifeline.py).
            self._process = subprocess.Popen(guarded_argv(self._argv(driver)), stdout=log,
                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            log.close()
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline and self._process.poll() is None:
                if ping(self.socket):
                    self.driver = driver
                    return
                time.sleep(0.2)  # polling a socket that does not exist yet: no event to wait on
            self._halt(signal.SIGKILL)
            tail = (self.root / f"dockerd-{driver}.log").read_text(errors="replace")[-300:]
            errors.append(f"{driver}: {tail.strip().splitlines()[-1] if tail.strip() else 'no output'}")
        raise RuntimeError("second dockerd did not start: " + "; ".join(errors))

    def running(self) -> bool:
        """Whether our dockerd process is alive."""
        return self._process is not None and self._process.poll() is None

    def kill(self) -> None:
        """Crash it (SIGKILL): its socket stops answering at once."""
        self._halt(signal.SIGKILL)

    def stop(self) -> None:
        """Remove every container it holds, stop it (SIGTERM, then wait), delete its files."""
        if self._process is not None and self._process.poll() is None:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                subprocess.run(["sh", "-c", f"ids=$(docker -H {self.url} ps -aq); "
                                f"[ -z \"$ids\" ] || docker -H {self.url} rm -f $ids"],
                               timeout=STOP_TIMEOUT_S, capture_output=True, check=False)
        self._halt(signal.SIGTERM)
        # dockerd unmounts its layers on a clean exit; a crash can leave some mounted.
        mounts = Path("/proc/self/mounts").read_text().splitlines()
        for line in reversed(mounts):
            point = line.split()[1]
            if point.startswith(str(self.root)):
                subprocess.run(["umount", "-l", point], check=False, capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def _halt(self, sig: int) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        # The trampoline exec'd dockerd in place: this pid is dockerd's.
        process.send_signal(sig)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)
