"""The run database: one SQLite file (WAL) per run directory.

Writes go through one writer thread, in batched transactions (at most one commit per
``batch_ms``, everything queued meanwhile in the same transaction), so the event loop
never blocks on SQLite and ten thousand results cost a few hundred commits. A write that
a caller awaits resolves only after its transaction committed: a result the engine has
handed out is on disk (``synchronous=NORMAL`` in WAL mode survives a killed process; a
power cut may lose the last batches).

Reads use a second connection (WAL lets them run beside the writer) and see committed
data only; :meth:`Store.flush` waits for queued writes first.

Tables::

    meta(key TEXT PRIMARY KEY, value TEXT)      schema_version, app, created_at, config
    jobs(key TEXT PRIMARY KEY, stage, task, harness, attempt, runbook, execution,
         kind, status, tries, reward, end_reason, turns, error,
         spec BLOB, result BLOB, codec, light BLOB, created_at, started_at, finished_at)

Blobs are msgspec JSON, zlib-compressed when larger than 2 KiB (``codec`` 1). ``light``
is the result without its bulky fields (:meth:`~rsr_async.schema.JobResult.light`:
trajectory, verifier output, raw replies), uncompressed, so analyses over every job read
a few hundred bytes a row instead of inflating whole trajectories; stores written before
it existed get the column on their next writable open and are read from ``result``
where it is empty.

A file that is not SQLite, not ours, or fails SQLite's integrity check raises
:class:`~rsr_async.errors.StoreCorruptError` and is left untouched: a run is never
silently started over.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import os
import queue
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar, cast
from urllib.parse import quote

import msgspec

from ..errors import ConfigMismatchError, StoreCorruptError, StoreError
from ..schema import (
    RESULT_TYPES,
    SPEC_TYPES,
    EpisodeResult,
    JobKey,
    JobResult,
    JobSpec,
    JobStatus,
    decode,
    encode,
    kind_of,
)
from .jobs import Job

__all__ = [
    "DB_NAME",
    "EVENTS_NAME",
    "FINISHED",
    "JobRow",
    "SCHEMA_VERSION",
    "Store",
    "resume_view",
]

R = TypeVar("R", bound=msgspec.Struct)

SCHEMA_VERSION: Final = 1
APPLICATION_ID: Final = 0x52535241  # "RSRA": marks the file as ours for `file`/sqlite tools
SQLITE_HEADER: Final = b"SQLite format 3\x00"
DB_NAME: Final = "run.db"
EVENTS_NAME: Final = "events.jsonl"
LOCK_NAME: Final = "run.lock"
COMPRESS_OVER: Final = 2048
QUICK_CHECK_MAX_BYTES: Final = 1 << 30
FINISHED: Final[frozenset[str]] = frozenset({"succeeded", "failed"})
"""Statuses a rerun skips. ``infra_error`` and ``cancelled`` are run again on resume."""
STATUSES: Final = ("pending", "running", "succeeded", "failed", "infra_error", "cancelled")

# Settings that may change between a run and its resume: how fast and where things run,
# not what is computed. Everything else must match (see resume_view).
OPERATIONAL_KEYS: Final = frozenset(
    {
        "engine",
        "cluster",
        "run.run_dir",
        "run.concurrency",
        "run.model_concurrency",
        "run.stages",
        "run.prewarm",
        "sandbox.docker_urls",
        "sandbox.allow_uncapped_storage",
        "sandbox.max_concurrent_verifiers",
        "sandbox.command_timeout_s",
        "sandbox.shell_quiet_s",
        "sandbox.starts_per_s",
        "sandbox.max_concurrent_starts",
        "sandbox.warm_pool",
        "sandbox.build_concurrency",
        "sandbox.api_timeout_s",
        "llm.urls",
        "llm.max_inflight_per_server",
        "llm.connect_timeout_s",
        "llm.read_timeout_s",
        "llm.total_timeout_s",
        "llm.max_retries",
        "llm.backoff_s",
        "llm.health_interval_s",
        "llm.breaker_failures",
        "llm.breaker_reset_s",
        "llm.balance_abs_threshold",
        "llm.balance_rel_threshold",
        "sim",
    }
)
ADDED_KEYS: Final[Mapping[str, Any]] = {"sandbox.backend": "docker"}
"""Settings added after runs were stored, with the value those runs implicitly used: left
out of the resume check (and of the default run directory's hash) while they hold that
value, so a run stored before them resumes, and compared once set to anything else."""
STAGE_SCOPED: Final = frozenset({"rsr"})
"""Config sections whose keys only later stages depend on: left out of the run-wide
check (and of the default run directory's hash) and checked per stage instead
(:meth:`Store.check_stage_config`), so changing K for rewrite never invalidates discovery."""

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

_TALLY_COLUMNS: Final = frozenset(
    {"stage", "task", "harness", "attempt", "runbook", "execution", "kind", "status", "end_reason"}
)
"""Columns :meth:`Store.tally` counts by and :meth:`Store.distinct` lists (never a blob,
never free text)."""


def _skip_scan(column: str) -> str:
    return (
        f"{column}s(v) AS (SELECT min({column}) FROM jobs UNION ALL SELECT (SELECT min({column})"
        f" FROM jobs WHERE {column} > {column}s.v) FROM {column}s WHERE {column}s.v IS NOT NULL)"
    )


_SKIP_SCANS: Final = {
    "stage": f"WITH RECURSIVE {_skip_scan('stage')} SELECT v FROM stages WHERE v IS NOT NULL",
    "task": f"WITH RECURSIVE {_skip_scan('task')} SELECT v FROM tasks WHERE v IS NOT NULL",
    # harness follows task in the (task, harness) index: skip through each task's harnesses
    "harness": (
        f"WITH RECURSIVE {_skip_scan('task')}, pairs(task, harness) AS ("
        " SELECT v, (SELECT min(harness) FROM jobs WHERE task = tasks.v) FROM tasks"
        " WHERE v IS NOT NULL UNION ALL"
        " SELECT task, (SELECT min(harness) FROM jobs WHERE jobs.task = pairs.task"
        " AND jobs.harness > pairs.harness) FROM pairs WHERE harness IS NOT NULL)"
        " SELECT DISTINCT harness FROM pairs WHERE harness IS NOT NULL ORDER BY harness"
    ),
}
"""Index skip-scans (SQLite does them itself only with ANALYZE statistics, which a run's
database does not keep)."""

_ROW_COLUMNS = (
    "key, stage, task, harness, attempt, runbook, execution, kind, status, tries, reward, "
    "end_reason, turns, error, created_at, started_at, finished_at"
)


class JobRow(msgspec.Struct, frozen=True, kw_only=True):
    """One job's row without its blobs (cheap to list in bulk)."""

    key: str
    stage: str
    task: str
    harness: str
    attempt: int
    runbook: str
    execution: int
    kind: str
    status: JobStatus
    tries: int
    reward: float | None
    end_reason: str | None
    turns: int | None
    error: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None

    @property
    def job_key(self) -> JobKey:
        """The structured key."""
        return JobKey(
            stage=self.stage,
            task=self.task,
            harness=self.harness,
            attempt=self.attempt,
            runbook=self.runbook,
            execution=self.execution,
        )


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out


def resume_view(config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings that must match for a resume (flat ``section.key`` → value)."""
    flat = _flatten(config)
    return {
        key: value
        for key, value in sorted(flat.items())
        if key not in OPERATIONAL_KEYS
        and key.split(".", 1)[0] not in OPERATIONAL_KEYS
        and (key not in ADDED_KEYS or value != ADDED_KEYS[key])
        and key.split(".", 1)[0] not in STAGE_SCOPED
    }


def _pack(data: bytes) -> tuple[bytes, int]:
    if len(data) > COMPRESS_OVER:
        return zlib.compress(data, 3), 1
    return data, 0


def _unpack(data: bytes, codec: int, where: str) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        try:
            return zlib.decompress(data)
        except zlib.error as exc:
            raise StoreCorruptError(f"{where}: compressed blob is damaged ({exc})") from exc
    raise StoreCorruptError(f"{where}: unknown blob codec {codec} (written by a newer rsr_async?)")


_Op = tuple[str, Any, "concurrent.futures.Future[Any] | None"]
_STOP: Final = ("stop", None, None)


class Store:
    """One run database. Open for writing with :meth:`open` (takes the run directory's
    lock, starts the writer thread) or for reading with :meth:`open_readonly`.

    Opening and closing block (file I/O): call them from a thread in async code
    (the :class:`~rsr_async.engine.Engine` does).
    """

    def __init__(
        self,
        path: Path,
        *,
        readonly: bool,
        batch_ms: float = 50.0,
        events_path: Path | None = None,
    ) -> None:
        self.path = path
        self.readonly = readonly
        self.recovered_running = 0
        """Jobs found ``running`` at open (left by a crash), reset to ``pending``."""
        self._batch_s = batch_ms / 1000.0
        self._events_path = events_path
        self._queue: queue.SimpleQueue[_Op] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._closed = False
        self._lock_fd: int | None = None
        self._read_lock = threading.Lock()
        self._writer: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection
        self.commits = 0
        """Transactions committed by the writer (for tests and benchmarks)."""
        self._light_column: bool | None = None

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

    @classmethod
    def open_readonly(cls, path: str | Path) -> Store:
        """Open a run database (or the run directory holding one) for queries only."""
        path = Path(path)
        if path.is_dir():
            path = path / DB_NAME
        if not path.is_file():
            raise StoreError(f"{path}: no run database here (expected {DB_NAME} in a run directory)")
        if path.stat().st_size == 0:  # created, not yet written: not corrupt, just not there
            raise StoreError(f"{path}: the run database is empty (a run that is just starting?)")
        store = cls(path, readonly=True)
        _check_header(path)
        try:
            store._reader = _connect_readonly(path)
            _check_ours(store._reader, path, allow_new=False)
        except sqlite3.DatabaseError as exc:
            raise StoreCorruptError(_corrupt_message(path, exc)) from exc
        return store

    def _take_lock(self, lock_path: Path) -> None:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"{lock_path}: cannot open the run lock: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise StoreError(
                f"{lock_path.parent}: the run directory is in use by pid {holder}; "
                "wait for it to finish or choose another --run-dir"
            ) from exc
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _release(self) -> None:
        for conn in (self._writer, getattr(self, "_reader", None)):
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
        if self._lock_fd is not None:
            # The lock dies with the process too (flock), so a SIGKILL never wedges a run dir.
            os.close(self._lock_fd)
            self._lock_fd = None

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
                    rows["config_hash"] = _config_hash(config)
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
            changed = [
                f"{key}: {stored.get(key, '<unset>')!r} -> {current.get(key, '<unset>')!r}"
                for key in sorted(set(stored) | set(current))
                if stored.get(key, "<unset>") != current.get(key, "<unset>")
            ]
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
                ("config_hash", _config_hash(config)),
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
            changed = [
                f"{key}: {stored.get(key, '<unset>')!r} -> {current.get(key, '<unset>')!r}"
                for key in sorted(set(stored) | set(current))
                if stored.get(key, "<unset>") != current.get(key, "<unset>")
            ]
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

    def stage_config(self, stage: str) -> dict[str, Any] | None:
        """The settings ``stage`` recorded (None when it has not run here)."""
        text = self.meta().get(f"stage_config:{stage}")
        return None if text is None else dict(json.loads(text))

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

    # ------------------------------------------------------------------ reading

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._read_lock:
            try:
                return self._reader.execute(sql, params).fetchall()
            except sqlite3.DatabaseError as exc:
                if isinstance(exc, sqlite3.OperationalError):
                    raise StoreError(f"{self.path}: query failed: {exc}") from exc
                raise StoreCorruptError(_corrupt_message(self.path, exc)) from exc

    def meta(self) -> dict[str, str]:
        """The meta table (schema version, app, created_at, config JSON ...)."""
        return dict(self._read("SELECT key, value FROM meta"))

    def config(self) -> dict[str, Any] | None:
        """The config the run was started (or last forced) with."""
        text = self.meta().get("config")
        return None if text is None else dict(json.loads(text))

    def counts(self, *, stage: str | None = None) -> dict[str, int]:
        """Jobs per status (every status present, zero when none)."""
        where, params = _where(stage=stage)
        rows = self._read(f"SELECT status, count(*) FROM jobs{where} GROUP BY status", params)
        out = dict.fromkeys(STATUSES, 0)
        out.update({status: n for status, n in rows})
        return out

    def statuses(self, keys: Iterable[str] | None = None, *, stage: str | None = None) -> dict[str, str]:
        """``key → status`` for the given keys (those in the store) or for a whole stage."""
        if keys is None:
            where, params = _where(stage=stage)
            return dict(self._read(f"SELECT key, status FROM jobs{where}", params))
        wanted = list(keys)
        out: dict[str, str] = {}
        for i in range(0, len(wanted), 900):  # SQLite's bound-parameter limit
            chunk = wanted[i : i + 900]
            marks = ",".join("?" * len(chunk))
            out.update(self._read(f"SELECT key, status FROM jobs WHERE key IN ({marks})", chunk))
        return out

    def rows(
        self,
        *,
        stage: str | None = None,
        status: str | Iterable[str] | None = None,
        task: str | Iterable[str] | None = None,
        harness: str | None = None,
        prefix: str | None = None,
        after: str | None = None,
        before: str | None = None,
        limit: int | None = None,
    ) -> list[JobRow]:
        """Rows without blobs, ordered by key.

        ``task`` may name several tasks. ``prefix`` keeps the keys that start with it, as a
        range of the key index (``discover/T/`` is task T's episodes, ``plan/T/H/a0/`` one
        source's runbooks). ``after``/``before`` with ``limit`` page through the rows by
        key: ``before`` gives the ``limit`` rows just before it, still in key order.
        """
        where, params = _where(
            stage=stage, status=status, task=task, harness=harness, prefix=prefix,
            after=after, before=before,
        )
        order = "DESC" if before is not None and after is None else "ASC"
        if limit is None:
            sql = f"SELECT {_ROW_COLUMNS} FROM jobs{where} ORDER BY key {order}"
        else:
            # Keys first, rows after: when the filter's index does not give key order,
            # only keys are sorted, not every matching row with its later columns.
            sql = (
                f"SELECT {_ROW_COLUMNS} FROM jobs WHERE key IN (SELECT key FROM jobs{where}"
                f" ORDER BY key {order} LIMIT {int(limit)}) ORDER BY key {order}"
            )
        fetched = self._read(sql, params)
        if order == "DESC":
            fetched.reverse()
        fields = [f.strip() for f in _ROW_COLUMNS.split(",")]
        return [msgspec.convert(dict(zip(fields, row, strict=True)), JobRow) for row in fetched]

    def distinct(self, column: str) -> list[Any]:
        """The values ``column`` takes, sorted. ``stage``, ``task`` and ``harness`` are read
        by skipping through the index they lead (``harness`` within each task): one probe
        per value, not a scan of every job."""
        if column not in _TALLY_COLUMNS:
            raise StoreError(
                f"distinct {column}: not a column to list (choose from {', '.join(sorted(_TALLY_COLUMNS))})"
            )
        sql = _SKIP_SCANS.get(column, f"SELECT DISTINCT {column} FROM jobs ORDER BY {column}")
        return [row[0] for row in self._read(sql)]

    def tally(
        self,
        *by: str,
        stage: str | None = None,
        status: str | Iterable[str] | None = None,
        task: str | Iterable[str] | None = None,
        harness: str | None = None,
        prefix: str | None = None,
    ) -> dict[tuple[Any, ...], int]:
        """Jobs counted per distinct value of the ``by`` columns, without reading a blob:
        ``tally("stage", "status")`` is the run's table of counts, ``tally("harness",
        "status", prefix="discover/T/")`` task T's episodes per harness."""
        unknown = [column for column in by if column not in _TALLY_COLUMNS]
        if unknown:
            raise StoreError(
                f"tally by {', '.join(unknown)}: not a column to count by "
                f"(choose from {', '.join(sorted(_TALLY_COLUMNS))})"
            )
        where, params = _where(stage=stage, status=status, task=task, harness=harness, prefix=prefix)
        if not by:
            return {(): self._read(f"SELECT count(*) FROM jobs{where}", params)[0][0]}
        columns = ", ".join(by)
        fetched = self._read(
            f"SELECT {columns}, count(*) FROM jobs{where} GROUP BY {columns} ORDER BY {columns}",
            params,
        )
        return {tuple(row[:-1]): row[-1] for row in fetched}

    def row(self, key: str | JobKey) -> JobRow | None:
        """One row without blobs."""
        fields = [f.strip() for f in _ROW_COLUMNS.split(",")]
        found = self._read(f"SELECT {_ROW_COLUMNS} FROM jobs WHERE key = ?", (str(key),))
        return msgspec.convert(dict(zip(fields, found[0], strict=True)), JobRow) if found else None

    def get(self, key: str | JobKey) -> JobResult | None:
        """The stored result of one job, typed by its kind (None when it has none yet)."""
        found = self._read("SELECT result, codec, kind FROM jobs WHERE key = ?", (str(key),))
        if not found or found[0][0] is None:
            return None
        return self._decode_result(str(key), found[0][0], found[0][1], found[0][2])

    def spec(self, key: str | JobKey) -> JobSpec | None:
        """The stored spec of one job, typed by its kind."""
        found = self._read("SELECT spec, spec_codec, kind FROM jobs WHERE key = ?", (str(key),))
        if not found or found[0][0] is None:
            return None
        blob, codec, kind = found[0]
        where = f"{self.path}: job {key}"
        spec_type = SPEC_TYPES.get(kind)
        if spec_type is None:
            raise StoreCorruptError(f"{where}: unknown job kind {kind!r}")
        try:
            return cast("JobSpec", decode(_unpack(blob, codec, where), spec_type))
        except msgspec.DecodeError as exc:
            raise StoreCorruptError(f"{where}: stored spec cannot be decoded: {exc}") from exc

    def task_specs(self, *, stage: str | None = None) -> dict[str, JobSpec]:
        """One stored spec per task (any of its jobs' of ``stage``): what is known of each
        task (its ``Task`` record) without decoding every job's spec."""
        where, params = _where(stage=stage)
        fetched = self._read(
            f"SELECT task, min(key) FROM jobs{where} GROUP BY task ORDER BY task", params
        )
        return {task: spec for task, key in fetched if (spec := self.spec(key)) is not None}

    def jobs(self, *, stage: str | None = None, status: str | Iterable[str] | None = None) -> list[Job]:
        """The stored jobs (key and typed spec), ordered by key."""
        return [
            Job(key=row.job_key, spec=spec)
            for row in self.rows(stage=stage, status=status)
            if (spec := self.spec(row.key)) is not None
        ]

    def results(
        self,
        *,
        stage: str | None = None,
        status: str | Iterable[str] | None = None,
        task: str | None = None,
        harness: str | None = None,
        chunk: int = 256,
    ) -> Iterator[EpisodeResult]:
        """Stored episode results, ordered by key, read in chunks (memory stays bounded)."""
        return self.outputs(
            EpisodeResult, stage=stage, status=status, task=task, harness=harness, chunk=chunk
        )

    def outputs(
        self,
        kind: type[R],
        *,
        stage: str | None = None,
        status: str | Iterable[str] | None = None,
        task: str | None = None,
        harness: str | None = None,
        prefix: str | None = None,
        chunk: int = 256,
        light: bool = False,
    ) -> Iterator[R]:
        """Stored results of one kind (``PlanResult``, ``AuditResult`` ...), ordered by key.

        ``kind`` may also be a partial view of a result type (a Struct with the same tag and
        only some of its fields): the rest of each blob is skipped, not decoded. ``prefix``
        keeps the keys that start with it (see :meth:`rows`). With ``light`` the results
        come without their bulky fields (trajectory, verifier output, raw replies: see
        :meth:`~rsr_async.schema.JobResult.light`), read from the small ``light`` column,
        which is many times faster over a whole run."""
        where, params = _where(status=status, task=task, harness=harness)
        # Walk the primary key over the range the stage and prefix allow (keys start with
        # ``<stage>/``), one chunk after another: through the (stage, status) index every
        # chunk would re-sort the whole stage, quadratic over a large run. ``+stage``
        # keeps the planner off that index.
        start, end = "", None
        if stage is not None:
            start, end = f"{stage}/", f"{stage}0"  # "0" sorts right after "/"
            where = f"{where} AND +stage = ?" if where else " WHERE +stage = ?"
            params = [*params, stage]
        if prefix:
            start = max(start, prefix)
            after_prefix = prefix[:-1] + chr(ord(prefix[-1]) + 1)
            end = after_prefix if end is None else min(end, after_prefix)
        if end is not None:
            where = f"{where} AND key < ?" if where else " WHERE key < ?"
            params = [*params, end]
        where = f"{where} AND" if where else " WHERE"
        tag = str(kind.__struct_config__.tag)
        columns = "result, codec"
        if light and self._has_light():
            columns = (
                "CASE WHEN light IS NULL THEN result ELSE light END,"
                " CASE WHEN light IS NULL THEN codec ELSE 0 END"
            )
        last, after = start, ">="  # the first chunk may start at ``start`` itself
        while True:
            fetched = self._read(
                f"SELECT key, {columns} FROM jobs{where} kind = ? AND key {after} ?"
                f" AND result IS NOT NULL ORDER BY key LIMIT {int(chunk)}",
                [*params, tag, last],
            )
            for key, blob, codec in fetched:
                where_ = f"{self.path}: job {key}"
                try:
                    yield decode(_unpack(blob, codec, where_), kind)
                except msgspec.DecodeError as exc:
                    raise StoreCorruptError(
                        f"{where_}: stored result cannot be decoded: {exc}"
                    ) from exc
            if len(fetched) < chunk:
                return
            last, after = fetched[-1][0], ">"

    def _has_light(self) -> bool:
        """Whether the jobs table has the ``light`` column (a read-only open of a store
        written before it existed has not)."""
        if self._light_column is None:
            names = {row[1] for row in self._read("PRAGMA table_info(jobs)")}
            self._light_column = "light" in names
        return self._light_column

    def _decode_result(self, key: str, blob: bytes, codec: int, kind: str) -> JobResult:
        where = f"{self.path}: job {key}"
        result_type = RESULT_TYPES.get(kind)
        if result_type is None:
            raise StoreCorruptError(f"{where}: unknown job kind {kind!r}")
        try:
            return decode(_unpack(blob, codec, where), result_type)
        except msgspec.DecodeError as exc:
            raise StoreCorruptError(f"{where}: stored result cannot be decoded: {exc}") from exc

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _where(
    *,
    stage: str | None = None,
    status: str | Iterable[str] | None = None,
    task: str | Iterable[str] | None = None,
    harness: str | None = None,
    prefix: str | None = None,
    after: str | None = None,
    before: str | None = None,
) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (("stage", stage), ("harness", harness)):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    if isinstance(task, str):
        clauses.append("task = ?")
        params.append(task)
    elif task is not None:
        # One bound parameter however many tasks (SQLite limits their number).
        clauses.append("task IN (SELECT value FROM json_each(?))")
        params.append(json.dumps(list(task)))
    if status is not None:
        statuses = [status] if isinstance(status, str) else list(status)
        clauses.append(f"status IN ({','.join('?' * len(statuses))})")
        params.extend(statuses)
    if prefix:
        # A range of the key index: the keys starting with prefix sort just below the
        # prefix with its last character incremented.
        clauses.append("key >= ? AND key < ?")
        params.extend([prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)])
    if after is not None:
        clauses.append("key > ?")
        params.append(after)
    if before is not None:
        clauses.append("key < ?")
        params.append(before)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _config_hash(config: Mapping[str, Any]) -> str:
    text = json.dumps(resume_view(config), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _check_header(path: Path) -> None:
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise StoreError(f"{path}: cannot read the run database: {exc}") from exc
    if head != SQLITE_HEADER:
        raise StoreCorruptError(
            f"{path}: not an SQLite database (starts with {head[:16]!r}); it was left untouched: "
            "move it away, or choose another --run-dir"
        )


def _check_ours(conn: sqlite3.Connection, path: Path, *, allow_new: bool) -> None:
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if app_id == APPLICATION_ID:
        return
    if app_id == 0 and not tables and allow_new:
        return
    if app_id == 0 and {"meta", "jobs"} <= tables:
        return  # an interrupted creation: the meta check decides
    raise StoreCorruptError(
        f"{path}: an SQLite database that rsr_async did not write (application_id "
        f"{app_id:#x}, tables {sorted(tables)[:5]}); it was left untouched: choose another --run-dir"
    )


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A query-only connection to ``path``, also where its directory cannot be written.

    ``mode=ro`` still creates ``run.db-shm`` (the WAL index) beside the database, so a
    finished run on a read-only mount (an archive, a shared volume) would read as
    unreadable. Where the directory is not writable and no write-ahead log is pending,
    the database is opened ``immutable``: nothing can change it there, and SQLite then
    needs no lock and no index. A pending log (``run.db-wal``, not yet folded into the
    database) cannot be read without its index; if SQLite cannot open it read-only, the
    error says to copy the run directory somewhere writable.
    """
    uri = f"file:{quote(str(path))}?mode=ro"
    wal = path.with_name(path.name + "-wal")
    pending = wal.exists() and wal.stat().st_size > 0
    if os.access(path.parent, os.W_OK) or pending:
        try:
            conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
            conn.execute("PRAGMA schema_version").fetchone()  # opens the file and the log
            return conn
        except sqlite3.OperationalError as exc:
            if os.access(path.parent, os.W_OK):
                raise
            raise StoreError(
                f"{path}: the run directory is read-only and holds a write-ahead log not yet "
                f"folded into the database ({wal.name}), which SQLite cannot read there ({exc}); "
                "copy the run directory somewhere writable and open the copy"
            ) from exc
    return sqlite3.connect(uri + "&immutable=1", uri=True, check_same_thread=False)


def _corrupt_message(path: Path, exc: BaseException) -> str:
    return (
        f"{path}: the run database is unreadable ({exc}); it was left untouched: restore it, "
        "or move it away to start the run over"
    )

