"""The run-directory lock on its own, between real processes: a second process is
refused (told who holds it) while the first holds it, a SIGKILLed owner's lock is free
at once (also when its children live on) and the next process takes it over, and the
store's writer refuses a run directory another process writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsr_async.engine import Store
from rsr_async.errors import StoreError
from rsr_async.run_lock import RunLock, lock_free
from tests.conftest import run_cli_env

# Takes the lock, starts a child that would keep an inherited descriptor open for a
# minute (close_fds=False: only O_CLOEXEC keeps the lock out of it), says so, then
# waits for its stdin to close.
_HOLDER = textwrap.dedent("""
    import subprocess, sys
    from rsr_async.run_lock import RunLock
    lock = RunLock(sys.argv[1])
    if not lock.try_acquire(sys.argv[2]):
        print("refused", lock.holder, flush=True)
        sys.exit(3)
    child = subprocess.Popen(["sleep", "60"], close_fds=False)
    print("held", child.pid, flush=True)
    sys.stdin.read()
    lock.release()
    print("released", flush=True)
    child.kill()
""")

# Tries once; prints what it found.
_TRIER = textwrap.dedent("""
    import sys
    from rsr_async.run_lock import RunLock
    lock = RunLock(sys.argv[1])
    print("taken" if lock.try_acquire(sys.argv[2]) else "refused " + lock.holder, flush=True)
""")


def _python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int, Path]]:
    """A process holding ``tmp_path/run.lock`` as ``owner-A``, and its child's pid."""
    path = tmp_path / "run.lock"
    proc = subprocess.Popen(_python(_HOLDER, str(path), "owner-A"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=run_cli_env(), text=True)
    child = 0
    try:
        assert proc.stdout is not None
        word, pid = proc.stdout.readline().split()  # blocks until the lock is held
        assert word == "held"
        child = int(pid)
        yield proc, child, path
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if child:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _try(path: Path, owner: str) -> str:
    out = subprocess.run(_python(_TRIER, str(path), owner), env=run_cli_env(), capture_output=True,
                         text=True, timeout=60, check=True)
    return out.stdout.strip()


def test_a_second_process_is_refused_while_the_first_holds_it(
    holder: tuple[subprocess.Popen[str], int, Path],
) -> None:
    proc, _, path = holder
    assert _try(path, "owner-B") == "refused owner-A"
    assert lock_free(path) is False
    assert path.read_text() == "owner-A\n"  # the refused one wrote nothing
    # released by its owner: free, and the next one takes it
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    assert proc.stdout.readline().strip() == "released"
    assert proc.wait(timeout=30) == 0
    assert lock_free(path) is True
    assert _try(path, "owner-B") == "taken"
    assert path.read_text() == "owner-B\n"


def test_a_killed_owners_lock_is_free_at_once_and_taken_over(
    holder: tuple[subprocess.Popen[str], int, Path],
) -> None:
    proc, child, path = holder
    proc.send_signal(signal.SIGKILL)  # runs no finally, releases nothing itself
    proc.wait(timeout=30)
    os.kill(child, 0)  # its child lives on, and holds no copy of the lock
    assert lock_free(path) is True
    assert path.read_text() == "owner-A\n"  # the dead owner's name stays until taken over
    mine = RunLock(path)
    assert mine.try_acquire("owner-C") and mine.held
    try:
        assert path.read_text() == "owner-C\n"
        assert _try(path, "owner-D") == "refused owner-C"
    finally:
        mine.release()
    assert not mine.held and lock_free(path) is True


def test_in_one_process_two_locks_on_one_file_exclude_each_other(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    assert lock_free(path) is None  # no file: no proof either way, and none is made
    assert not path.exists()
    first, second = RunLock(path), RunLock(path)
    assert first.try_acquire("one") and first.try_acquire("one")  # holding it: still held
    assert not second.try_acquire("two") and second.holder == "one"
    first.release()
    first.release()  # idempotent
    assert second.try_acquire("two")
    second.release()
    with pytest.raises(OSError):
        RunLock(tmp_path / "no" / "such" / "dir.lock").try_acquire("x")


def test_the_writer_refuses_a_directory_another_process_writes(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import sys
        from rsr_async.engine import Store
        with Store.open(sys.argv[1]):
            print("open", flush=True)
            sys.stdin.read()
    """)
    proc = subprocess.Popen(_python(code, str(tmp_path)), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=run_cli_env(), text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "open"
        with pytest.raises(StoreError, match=rf"{tmp_path}: the run directory is in use by pid {proc.pid};"):
            Store.open(tmp_path)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        with Store.open(tmp_path) as store:  # the dead writer's directory is taken over
            assert store.counts()["pending"] == 0
        assert (tmp_path / "run.lock").read_text() == f"{os.getpid()}\n"
    finally:
        proc.kill()
        proc.wait(timeout=30)
