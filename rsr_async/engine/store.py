"""Writing a run: the run database's writer (SQLite WAL, one writer thread).

:class:`Store` owns a run directory while it is open: it takes the directory's lock
(:class:`~rsr_async.run_lock.RunLock` on ``run.lock``), creates or checks the database,
compares the config with the stored one (the resume policy, :mod:`rsr_async.resume`),
and writes job rows, results and the event log. It is a
:class:`~rsr_async.engine.reader.RunReader` too, so the engine queries what it wrote;
code that only reads a run opens a reader instead, never this class.

Writes go through one writer thread, in batched transactions (at most one commit per
``batch_ms``, everything queued meanwhile in the same transaction), so the event loop
never blocks on SQLite and ten thousand results cost a few hundred commits. A write that
a caller awaits resolves only after its transaction committed: a result the engine has
handed out is on disk (``synchronous=NORMAL`` in WAL mode survives a killed process; a
power cut may lose the last batches). Job keys are idempotent: registering a job twice
keeps the first row, and a result replaces the row of its key.

Reads use a second connection (WAL lets them run beside the writer) and see committed
data only; :meth:`Store.flush` waits for queued writes first. The format (tables, blob
codecs, the ``light`` column) is described in :mod:`.reader`; stores written before the
``light`` column existed get it on their next writable open.

A file that is not SQLite, not ours, or fails SQLite's integrity check raises
:class:`~rsr_async.errors.StoreCorruptError` and is left untouched: a run is never
silently started over.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import queue
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from ..errors import ConfigMismatchError, StoreCorruptError, StoreError
from ..resume import config_changes, config_hash, resume_view
from ..run_lock import RunLock
from ..schema import JobResult, encode, kind_of
from .jobs import Job

# The format's names stay importable from here, where callers have always found them.
from .reader import (
    APPLICATION_ID,
    DB_NAME,
    EVENTS_NAME,
    FINISHED,
    SCHEMA_VERSION,
    STATUSES,
    JobRow,
    RunReader,
    _check_header,
    _check_ours,
    _corrupt_message,
)

__all__ = [
    "DB_NAME",
    "EVENTS_NAME",
    "FINISHED",
    "LOCK_NAME",
    "STATUSES",
    "JobRow",
    "SCHEMA_VERSION",
    "Store",
    "resume_view",
]

LOCK_NAME: Final = "run.lock"
COMPRESS_OVER: Final = 2048
QUICK_CHECK_MAX_BYTES: Final = 1 << 30

_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    key TEXT PRIMARY KEY,
    stage TEXT NOT NULL,
    task TEXT NOT NULL,
    harness TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    runbook TEXT NOT NULL,
    execution INTEGER NOT NULL,
    kind TEXT NOT NULL DEFAULT 'episode',
    status TEXT NOT NULL,
    tries INTEGER NOT NULL DEFAULT 0,
    reward REAL,
    end_reason TEXT,
    turns INTEGER,
    error TEXT,
    spec BLOB,
    spec_codec INTEGER NOT NULL DEFAULT 0,
    result BLOB,
    codec INTEGER NOT NULL DEFAULT 0,
    light BLOB,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL
);
CREATE INDEX IF NOT EXISTS jobs_stage_status ON jobs (stage, status);
CREATE INDEX IF NOT EXISTS jobs_task ON jobs (task, harness);
"""
"""The tables and indexes (see :mod:`.reader` for what each column holds)."""


def _pack(data: bytes) -> tuple[bytes, int]:
    if len(data) > COMPRESS_OVER:
        return zlib.compress(data, 3), 1
    return data, 0


_Op = tuple[str, Any, "concurrent.futures.Future[Any] | None"]
_STOP: Final = ("stop", None, None)


class Store(RunReader):
    """One run database, open for writing with :meth:`open` (takes the run directory's
    lock, starts the writer thread). :meth:`open_readonly` (from :class:`RunReader`)
    gives one whose writes raise :class:`~rsr_async.errors.StoreError`; code that only
    reads opens :class:`RunReader` itself.

    Opening and closing block (file I/O): call them from a thread in async code
    (the :class:`~rsr_async.engine.Engine` does).
    """

    def __init__(
        self,
        path: Path,
        *,
        readonly: bool = True,
        batch_ms: float = 50.0,
        events_path: Path | None = None,
    ) -> None:
        super().__init__(path)
        self.readonly = readonly
        self.recovered_running = 0
        """Jobs found ``running`` at open (left by a crash), reset to ``pending``."""
        self._batch_s = batch_ms / 1000.0
        self._events_path = events_path
        self._queue: queue.SimpleQueue[_Op] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._closed = False
        self._lock: RunLock | None = None
        self._writer: sqlite3.Connection | None = None
        self.commits = 0
        """Transactions committed by the writer (for tests and benchmarks)."""

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls,
        run_dir: str | Path,
        *,
        config: Mapping[str, Any] | None = None,
        force: bool = False,
        batch_ms: float = 50.0,
        events: bool = True,
    ) -> Store:
        """Open (or create) the store of ``run_dir`` for writing.

        ``config`` (``Config.to_dict()``) is recorded on creation and compared on resume:
        a difference in :func:`resume_view` raises
        :class:`~rsr_async.errors.ConfigMismatchError` unless ``force``. Raises
        :class:`~rsr_async.errors.StoreError` when another process holds the run directory.
        """
        run_dir = Path(run_dir)
        if config is not None:
            config = json.loads(json.dumps(config))  # tuples become lists, as when read back
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{run_dir}: cannot create the run directory: {exc}") from exc
        store = cls(
            run_dir / DB_NAME,
            readonly=False,
            batch_ms=batch_ms,
            events_path=run_dir / EVENTS_NAME if events else None,
        )
        store._take_lock(run_dir / LOCK_NAME)
        try:
            store._open_write(config, force)
        except BaseException:
            store._release()
            raise
        return store

    def _take_lock(self, lock_path: Path) -> None:
        lock = RunLock(lock_path)
        try:
            taken = lock.try_acquire(str(os.getpid()))
        except OSError as exc:
            raise StoreError(f"{lock_path}: cannot open the run lock: {exc}") from exc
        if not taken:
            raise StoreError(
                f"{lock_path.parent}: the run directory is in use by pid "
                f"{lock.holder or 'another process'}; "
                "wait for it to finish or choose another --run-dir"
            )
        self._lock = lock

    def _release(self) -> None:
        for conn in (self._writer, getattr(self, "_reader", None)):
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
        if self._lock is not None:
            # The lock dies with the process too (flock), so a SIGKILL never wedges a run dir.
            self._lock.release()
            self._lock = None

    def _open_write(self, config: Mapping[str, Any] | None, force: bool) -> None:
        path = self.path
        exists = path.exists() and path.stat().st_size > 0
        if exists:
            _check_header(path)
        try:
            writer = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._writer = writer
            writer.execute("PRAGMA busy_timeout = 10000")
            _check_ours(writer, path, allow_new=True)
            if exists and path.stat().st_size <= QUICK_CHECK_MAX_BYTES:
                problems = [r[0] for r in writer.execute("PRAGMA quick_check(5)")]
                if problems != ["ok"]:
                    raise StoreCorruptError(
                        f"{path}: the run database is damaged ({'; '.join(problems)}); it was "
                        "left untouched: restore it, or move it away to start the run over"
                    )
            writer.execute("PRAGMA journal_mode = WAL")
            writer.execute("PRAGMA synchronous = NORMAL")
            writer.execute("BEGIN IMMEDIATE")
            for statement in _DDL.strip().split(";"):
                if statement.strip():
                    writer.execute(statement)
            columns = {row[1] for row in writer.execute("PRAGMA table_info(jobs)")}
            if "light" not in columns:  # a store written before the light view existed
                writer.execute("ALTER TABLE jobs ADD COLUMN light BLOB")
            meta = dict(writer.execute("SELECT key, value FROM meta").fetchall())
            now = time.time()
            if not meta:
                writer.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                writer.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                rows = {
                    "app": "rsr_async",
                    "schema_version": str(SCHEMA_VERSION),
                    "created_at": repr(now),
                }
                if config is not None:
                    rows["config"] = json.dumps(dict(config), sort_keys=True)
                    rows["config_hash"] = config_hash(config)
                writer.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", rows.items())
            else:
                self._check_config(writer, meta, config, force, now)
            # Jobs left running by a crash go back to pending: they run again on resume.
            cur = writer.execute("UPDATE jobs SET status = 'pending' WHERE status = 'running'")
            self.recovered_running = cur.rowcount
            writer.execute("COMMIT")
            self._reader = sqlite3.connect(path, check_same_thread=False)
            self._reader.execute("PRAGMA busy_timeout = 10000")
        except sqlite3.DatabaseError as exc:
            raise StoreCorruptError(_corrupt_message(path, exc)) from exc
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: cannot open the run database: {exc}") from exc
        self._thread = threading.Thread(
            target=self._write_loop, name=f"rsr-store-writer:{path.parent.name}", daemon=True
        )
        self._thread.start()

    def _check_config(
        self,
        writer: sqlite3.Connection,
        meta: Mapping[str, str],
        config: Mapping[str, Any] | None,
        force: bool,
        now: float,
    ) -> None:
        if meta.get("app") != "rsr_async":
            raise StoreCorruptError(
                f"{self.path}: this database was not written by rsr_async (no app marker); "
                "it was left untouched: choose another --run-dir"
            )
        version = int(meta.get("schema_version", "0"))
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: written by a newer rsr_async (schema {version} > "
                f"{SCHEMA_VERSION}); upgrade rsr_async to resume this run"
            )
        if config is None:
            return
        stored_text = meta.get("config")
        if stored_text is not None:
            stored = resume_view(json.loads(stored_text))
            current = resume_view(config)
            changed = config_changes(stored, current)
            if changed and not force:
                more = f" (and {len(changed) - 8} more)" if len(changed) > 8 else ""
                raise ConfigMismatchError(
                    f"{self.path.parent}: this run was started with another config; "
                    f"changed: {'; '.join(changed[:8])}{more}. Rerun with the original "
                    "config, pass --force to resume with the new one, or use a new --run-dir"
                )
            if changed:
                history = json.loads(meta.get("config_history", "[]"))
                history.append({"at": now, "config": json.loads(stored_text)})
                writer.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('config_history', ?)",
                    (json.dumps(history, sort_keys=True),),
                )
        writer.executemany(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
            [
                ("config", json.dumps(dict(config), sort_keys=True)),
                ("config_hash", config_hash(config)),
            ],
        )

    def check_stage_config(
        self, stage: str, settings: Mapping[str, Any], *, force: bool = False
    ) -> None:
        """Record the settings ``stage`` depends on; refuse a change to them on resume.

        Blocking (reads, then waits for the write to commit): call it from a thread in
        async code. A stage that has not run in this directory records its settings; a
        stage that has must see the same ones, else
        :class:`~rsr_async.errors.ConfigMismatchError` names the stage and what changed
        (``force`` accepts the new settings and keeps the old ones in the history).
        """
        current = json.loads(json.dumps(dict(settings), sort_keys=True))
        meta_key = f"stage_config:{stage}"
        stored_text = self.meta().get(meta_key)
        if stored_text is not None:
            stored = json.loads(stored_text)
            changed = config_changes(stored, current)
            if not changed:
                return
            if not force:
                raise ConfigMismatchError(
                    f"{self.path.parent}: the {stage!r} stage of this run used other settings; "
                    f"changed: {'; '.join(changed)}. Rerun with the original settings, pass "
                    "--force to continue with the new ones, or use a new --run-dir"
                )
        text = json.dumps(current, sort_keys=True)

        def write(conn: sqlite3.Connection) -> None:
            if stored_text is not None:
                conn.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                    (f"{meta_key}:replaced@{time.time():.3f}", stored_text),
                )
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (meta_key, text))

        self.call(write).result(timeout=60)

    # ------------------------------------------------------------------ writing

    def _submit(self, kind: str, payload: Any, wait: bool) -> concurrent.futures.Future[Any] | None:
        if self.readonly:
            raise StoreError(f"{self.path}: opened read-only")
        if self._failure is not None:
            raise StoreError(f"{self.path}: the store writer failed: {self._failure}") from (
                self._failure
            )
        if self._closed:
            raise StoreError(f"{self.path}: the store is closed")
        future: concurrent.futures.Future[Any] | None = (
            concurrent.futures.Future() if wait else None
        )
        self._queue.put((kind, payload, future))
        return future

    def register(
        self, jobs: Sequence[Job], *, wait: bool = True
    ) -> concurrent.futures.Future[Any] | None:
        """Insert ``pending`` rows for jobs not in the store yet (existing rows untouched)."""
        now = time.time()
        return self._submit("register", [(job, now) for job in jobs], wait)

    def mark_running(
        self, key: str, *, wait: bool = False
    ) -> concurrent.futures.Future[Any] | None:
        """Status ``running``, one more try, start time now."""
        return self._submit("running", (key, time.time()), wait)

    def put_result(
        self, result: JobResult, *, job: Job | None = None, wait: bool = True
    ) -> concurrent.futures.Future[Any] | None:
        """Store a job's final (or cancelled) result; the future resolves once committed."""
        return self._submit("result", (result, job, time.time()), wait)

    def log_event(self, event: Mapping[str, Any]) -> None:
        """Append one line to the run's ``events.jsonl`` (written after the next commit)."""
        if self._events_path is not None and not self._closed and self._failure is None:
            self._queue.put(("event", event, None))

    def call(self, fn: Callable[[sqlite3.Connection], Any]) -> concurrent.futures.Future[Any]:
        """Run ``fn(connection)`` on the writer thread, inside the next transaction."""
        future = self._submit("call", fn, True)
        assert future is not None
        return future

    def flush(self, timeout: float | None = 60.0) -> None:
        """Block until everything queued so far is committed."""
        if self.readonly or self._closed:
            return
        future = self._submit("flush", None, True)
        assert future is not None
        future.result(timeout)

    def close(self) -> None:
        """Commit what is queued, stop the writer, close the files and release the lock."""
        if self._closed:
            return
        self._closed = True  # first: a write that races with close fails loudly, never hangs
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()
        self._release()

    def _write_loop(self) -> None:
        writer = self._writer
        assert writer is not None
        events = (
            open(self._events_path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the thread
            if self._events_path is not None
            else None
        )
        last_commit = 0.0
        stop = False
        try:
            while not stop:
                first = self._queue.get()
                if first[0] in ("result", "running", "register", "event"):
                    # Group commit: wait out the batch interval so one transaction carries
                    # everything that arrives meanwhile.
                    pause = last_commit + self._batch_s - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                ops = [first]
                with contextlib.suppress(queue.Empty):
                    while len(ops) < 20000:
                        ops.append(self._queue.get_nowait())
                stop = any(op[0] == "stop" for op in ops)
                self._apply(writer, ops, events)
                last_commit = time.monotonic()
        except Exception as exc:  # the writer must never die silently: callers wait on it
            self._failure = exc
            self._fail_pending(exc)
        finally:
            if events is not None:
                events.close()

    def _apply(
        self, writer: sqlite3.Connection, ops: list[_Op], events: Any
    ) -> None:
        results: list[tuple[concurrent.futures.Future[Any], Any]] = []
        lines: list[bytes] = []
        try:
            writer.execute("BEGIN IMMEDIATE")
            for kind, payload, future in ops:
                value: Any = None
                if kind == "result":
                    self._write_result(writer, *payload)
                elif kind == "running":
                    key, now = payload
                    writer.execute(
                        "UPDATE jobs SET status = 'running', tries = tries + 1, started_at = ? "
                        "WHERE key = ?",
                        (now, key),
                    )
                elif kind == "register":
                    self._write_register(writer, payload)
                elif kind == "event":
                    lines.append(msgspec.json.encode(payload))
                elif kind == "call":
                    value = payload(writer)
                if future is not None:
                    results.append((future, value))
            writer.execute("COMMIT")
            self.commits += 1
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                writer.execute("ROLLBACK")
            error: StoreError = (
                StoreCorruptError(_corrupt_message(self.path, exc))
                if isinstance(exc, sqlite3.DatabaseError)
                and not isinstance(exc, sqlite3.OperationalError)
                else StoreError(f"{self.path}: writing the run database failed: {exc}")
            )
            error.__cause__ = exc
            for _, _, future in ops:
                if future is not None and not future.done():
                    future.set_exception(error)
            raise error from exc
        except Exception as exc:
            with contextlib.suppress(sqlite3.Error):
                writer.execute("ROLLBACK")
            for _, _, future in ops:
                if future is not None and not future.done():
                    future.set_exception(exc)
            raise
        for future, value in results:
            if not future.done():  # a waiter that gave up cancelled it; the write still stands
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    future.set_result(value)
        if events is not None and lines:
            events.write(b"\n".join(lines).decode() + "\n")
            events.flush()

    @staticmethod
    def _write_register(writer: sqlite3.Connection, items: list[tuple[Job, float]]) -> None:
        rows = []
        for job, now in items:
            key = job.key
            spec_blob, spec_codec = _pack(encode(job.spec))
            kind = kind_of(job.spec)
            rows.append(
                (
                    str(key),
                    key.stage,
                    key.task,
                    key.harness,
                    key.attempt,
                    key.runbook,
                    key.execution,
                    kind,
                    spec_blob,
                    spec_codec,
                    now,
                )
            )
        writer.executemany(
            "INSERT OR IGNORE INTO jobs (key, stage, task, harness, attempt, runbook, execution,"
            " kind, status, spec, spec_codec, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)",
            rows,
        )

    @staticmethod
    def _write_result(
        writer: sqlite3.Connection, result: JobResult, job: Job | None, now: float
    ) -> None:
        key = result.key
        blob, codec = _pack(encode(result))
        light = encode(result.light())
        spec_blob, spec_codec = _pack(encode(job.spec)) if job is not None else (None, 0)
        kind = str(type(result).__struct_config__.tag)
        reward, turns = result.columns()
        writer.execute(
            "INSERT INTO jobs (key, stage, task, harness, attempt, runbook, execution, kind,"
            " status, tries, reward, end_reason, turns, error, spec, spec_codec, result, codec,"
            " light, created_at, started_at, finished_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (key) DO UPDATE SET status = excluded.status,"
            " reward = excluded.reward, end_reason = excluded.end_reason,"
            " turns = excluded.turns, error = excluded.error, result = excluded.result,"
            " codec = excluded.codec, light = excluded.light, finished_at = excluded.finished_at",
            (
                str(key),
                key.stage,
                key.task,
                key.harness,
                key.attempt,
                key.runbook,
                key.execution,
                kind,
                result.status,
                reward,
                result.end_reason,
                turns,
                result.error,
                spec_blob,
                spec_codec,
                blob,
                codec,
                light,
                now,
                result.started_at or None,
                result.finished_at or now,
            ),
        )

    def _fail_pending(self, exc: BaseException) -> None:
        error = StoreError(f"{self.path}: the store writer failed: {exc}")
        with contextlib.suppress(queue.Empty):
            while True:
                _, _, future = self._queue.get_nowait()
                if future is not None and not future.done():
                    future.set_exception(error)
