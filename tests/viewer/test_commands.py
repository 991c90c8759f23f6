"""``python -m rsr_async view`` as a real subprocess: it prints its address, serves, and
stops on SIGINT; bad input is one line on stderr and exit status 1."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.conftest import run_cli_env

from .runs import SOURCE


def _view(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rsr_async", "view", *args], env=run_cli_env(),
                          capture_output=True, text=True, timeout=120)


def test_serves_on_a_free_port_until_interrupted(run_dir: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "rsr_async", "view", str(run_dir), "--port", "0"],
        env=run_cli_env(), stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # printed once it listens: the event to wait for
        assert line.startswith(f"view: serving {run_dir} at http://127.0.0.1:"), line
        url = line.split(" at ", 1)[1].split()[0]
        with urllib.request.urlopen(url + "job/" + SOURCE, timeout=30) as response:
            assert response.status == 200
            assert b"csv-report" in response.read()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def test_a_directory_without_a_run_is_one_line_naming_it(tmp_path: Path) -> None:
    out = _view(str(tmp_path / "missing"), "--port", "0")
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1
    assert f"error: {tmp_path / 'missing'}: not a run directory (no run.db)" in out.stderr


def test_a_bad_or_used_port_is_one_line(run_dir: Path) -> None:
    for port in ("70000", "-1", "http"):
        out = _view(str(run_dir), "--port", port)
        assert out.returncode == 1, port
        assert out.stderr.count("\n") == 1 and f"--port {port}: expected a number from 0" in out.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = _view(str(run_dir), "--port", str(port))
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "is already in use" in out.stderr
