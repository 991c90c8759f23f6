"""One live owner per run directory: an exclusive ``flock`` on a file in it.

A run directory serves one process at a time. The owner holds :class:`RunLock` on a
file there (the store's ``run.lock``; a sandbox pool's ``sandbox.lock``) for its whole
life and writes who it is into the file. The kernel releases a ``flock`` when the last
descriptor of it closes, so the lock dies with its process however it ends (SIGKILL, the
OOM killer run no ``finally``): a later process takes it over at once, and a lock
nobody holds is proof that its owner is gone (:func:`lock_free`; the sandbox sweep
relies on that to remove a dead run's containers, never a live one's).

That proof holds only if no other process keeps the descriptor open. The descriptor is
opened non-inheritable (``O_CLOEXEC``, Python's default), so a child that ``exec``s does
not get it; children started through :mod:`rsr_async.lifeline` also close every
inherited descriptor, for libraries (libuv) that would pass it on anyway.

The file is never removed: removing it would let a second process lock a new file of
the same name while the first still holds the old one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

__all__ = ["RunLock", "lock_free"]

_HOLDER_MAX = 256
"""Bytes of the holder's text read back (the text is one short line)."""


class RunLock:
    """An exclusive lock on the file ``path``, taken with :meth:`try_acquire`.

    Blocking file I/O (quick, never waits for the holder): call it from a thread in
    async code. Not thread-safe: one owner object per lock.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.holder = ""
        """After a refused :meth:`try_acquire`: what the holder wrote (may be empty when
        it has not written yet)."""
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def try_acquire(self, owner: str) -> bool:
        """Take the lock without waiting and write ``owner`` (one line) into the file.

        True when taken (or already held by this object); False when another open file
        description holds it (another process, or another :class:`RunLock` on the same
        file), with :attr:`holder` set to what its owner wrote. Raises :class:`OSError`
        when the file cannot be opened or created (the caller names the directory).
        """
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                self.holder = os.pread(fd, _HOLDER_MAX, 0).decode(errors="replace").strip()
            finally:
                os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{owner}\n".encode(), 0)
        except BaseException:
            os.close(fd)  # closing releases the flock too
            raise
        self._fd = fd
        self.holder = owner
        return True

    def release(self) -> None:
        """Let go of the lock (idempotent). The file stays (see the module docstring)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # the last descriptor of the lock: the kernel releases it


def lock_free(path: str | Path) -> bool | None:
    """True when nobody holds the lock file ``path``: its owner is provably gone. False
    while someone holds it; None when it cannot be told (no such file, unreadable).

    Never creates the file, and holds the lock only for the instant of the test.
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return None
    finally:
        os.close(fd)  # releases the test lock if it was taken
    return True
