"""A finished run on a read-only mount opens for ``view``, ``analyze`` and ``export``
(issue 30): SQLite's ``mode=ro`` still creates ``run.db-shm`` beside the database, which
a read-only directory refuses, so the intact run read as "unreadable … restore it".

The mount is real: each command runs in its own mount namespace (``unshare -m``) where
the run directory is bind-mounted read-only; as root, a ``chmod`` would not stop a write.
"""

from __future__ import annotations

import shlex
import shutil
import signal
import sqlite3
import subprocess
import urllib.request
from pathlib import Path

import pytest

from ..analysis import scenario
from ..conftest import PYTHON, REPO, run_cli_env


def _mount_works(tmp: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    (tmp / "src").mkdir()
    (tmp / "dst").mkdir()
    proc = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind -o ro {tmp / 'src'} {tmp / 'dst'}"],
                          capture_output=True, timeout=30)
    return proc.returncode == 0


@pytest.fixture
def mounted(tmp_path: Path) -> tuple[Path, Path]:
    """(the run directory, an empty mount point to bind it at read-only)."""
    if not _mount_works(tmp_path):
        pytest.skip("needs unshare -m and mount (root) for a read-only bind mount")
    run_dir = scenario.write_run(tmp_path / "run")
    point = tmp_path / "ro"
    point.mkdir()
    return run_dir, point


def _read_only(run_dir: Path, point: Path, *argv: str) -> list[str]:
    command = " ".join(shlex.quote(a) for a in argv)
    return ["unshare", "-m", "sh", "-c", f"mount --bind -o ro {run_dir} {point} && exec {command}"]


def _cli(run_dir: Path, point: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_read_only(run_dir, point, PYTHON, "-m", "rsr_async", *args), cwd=REPO,
                          env=run_cli_env(), capture_output=True, text=True, timeout=240)


def _leave_a_log(run_dir: Path) -> None:
    """Leave ``run.db-wal`` and ``run.db-shm`` behind, as a run whose last reader could
    not fold the log back (a read-only open on a writable directory does this)."""
    conn = sqlite3.connect(f"file:{run_dir / 'run.db'}?mode=ro", uri=True)
    conn.execute("SELECT count(*) FROM jobs").fetchone()
    conn.close()


@pytest.mark.parametrize("leftovers", [False, True], ids=["clean", "with-wal-and-shm"])
def test_analyze_and_export_read_a_read_only_run(mounted: tuple[Path, Path], tmp_path: Path,
                                                 leftovers: bool) -> None:
    run_dir, point = mounted
    if leftovers:
        _leave_a_log(run_dir)
    before = sorted(p.name for p in run_dir.iterdir())
    analysis = _cli(run_dir, point, "analyze", str(point), "--out", str(tmp_path / "analysis"), "--no-figures")
    assert analysis.returncode == 0, analysis.stderr
    assert (tmp_path / "analysis" / "report.html").is_file()
    export = _cli(run_dir, point, "export", str(point), "--out", str(tmp_path / "export"), "--allow-scripted")
    assert export.returncode == 0, export.stderr
    assert (tmp_path / "export" / "manifest.json").is_file()
    assert sorted(p.name for p in run_dir.iterdir()) == before  # nothing was created there
    # The same rows as read from the writable directory itself.
    writable = _cli(run_dir, point, "export", str(run_dir), "--out", str(tmp_path / "export2"), "--allow-scripted")
    assert writable.returncode == 0, writable.stderr
    assert (tmp_path / "export" / "sft.jsonl").read_bytes() == (tmp_path / "export2" / "sft.jsonl").read_bytes()


def test_view_serves_a_read_only_run(mounted: tuple[Path, Path]) -> None:
    run_dir, point = mounted
    process = subprocess.Popen(_read_only(run_dir, point, PYTHON, "-m", "rsr_async", "view", str(point),
                                          "--port", "0"),
                               cwd=REPO, env=run_cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # printed once it listens: the event to wait for
        assert line.startswith(f"view: serving {point} at http://127.0.0.1:"), line + process.stderr.read()
        url = line.split(" at ", 1)[1].split()[0]
        with urllib.request.urlopen(url, timeout=30) as response:
            assert response.status == 200
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def test_a_pending_log_without_its_index_says_to_copy_the_run(mounted: tuple[Path, Path], tmp_path: Path) -> None:
    run_dir, point = mounted
    crashed = tmp_path / "crashed"  # a writer's files copied while it had not folded its log back
    crashed.mkdir()
    writer = sqlite3.connect(run_dir / "run.db")
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute("CREATE TABLE pending (x)")
        assert (run_dir / "run.db-wal").stat().st_size > 0
        for name in ("run.db", "run.db-wal", "events.jsonl"):
            shutil.copy2(run_dir / name, crashed / name)
    finally:
        writer.close()
    proc = _cli(crashed, point, "analyze", str(point), "--out", str(tmp_path / "analysis"), "--no-figures")
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "read-only" in lines[0] and "copy the run directory somewhere writable" in lines[0], lines[0]
    assert sorted(p.name for p in crashed.iterdir()) == ["events.jsonl", "run.db", "run.db-wal"]
    # Where it can be written, the same files open (SQLite folds the log in).
    assert _cli(crashed, point, "analyze", str(crashed), "--out", str(tmp_path / "a2"),
                "--no-figures").returncode == 0
