"""Reading a run: the run database opened read-only, and the queries over it.

Analysis, the viewer, export, evaluation and the run summary read runs through
:class:`RunReader`, never through the writer (:class:`~rsr_async.engine.store.Store`,
which subclasses it to query what it wrote). A reader takes no lock and writes nothing:
it opens the database with SQLite's ``mode=ro``, so it can read beside a live run (WAL
lets it) and sees committed data only; a run directory that cannot be written (a
read-only mount, an archive) is opened ``immutable`` (see :func:`_connect_readonly`).

The file format is defined here, where both sides need it (the writer adds the DDL)::

    meta(key TEXT PRIMARY KEY, value TEXT)      schema_version, app, created_at, config
    jobs(key TEXT PRIMARY KEY, stage, task, harness, attempt, runbook, execution,
         kind, status, tries, reward, end_reason, turns, error,
         spec BLOB, result BLOB, codec, light BLOB, created_at, started_at, finished_at)

Blobs are msgspec JSON, zlib-compressed when larger than 2 KiB (``codec`` 1). ``light``
is the result without its bulky fields (:meth:`~rsr_async.schema.JobResult.light`:
trajectory, verifier output, raw replies), uncompressed, so analyses over every job read
a few hundred bytes a row instead of inflating whole trajectories; stores written before
it existed are read from ``result`` where it is empty.

A file that is not SQLite, not ours, or unreadable raises
:class:`~rsr_async.errors.StoreCorruptError` and is left untouched.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final, Self, TypeVar, cast
from urllib.parse import quote

import msgspec

from ..errors import StoreCorruptError, StoreError
from ..schema import (
    RESULT_TYPES,
    SPEC_TYPES,
    EpisodeResult,
    JobKey,
    JobResult,
    JobSpec,
    JobStatus,
    decode,
)
from .jobs import Job

__all__ = [
    "APPLICATION_ID",
    "DB_NAME",
    "EVENTS_NAME",
    "FINISHED",
    "SCHEMA_VERSION",
    "STATUSES",
    "JobRow",
    "RunReader",
]

R = TypeVar("R", bound=msgspec.Struct)

SCHEMA_VERSION: Final = 1
APPLICATION_ID: Final = 0x52535241  # "RSRA": marks the file as ours for `file`/sqlite tools
SQLITE_HEADER: Final = b"SQLite format 3\x00"
DB_NAME: Final = "run.db"
EVENTS_NAME: Final = "events.jsonl"
FINISHED: Final[frozenset[str]] = frozenset({"succeeded", "failed"})
"""Statuses a rerun skips. ``infra_error`` and ``cancelled`` are run again on resume."""
STATUSES: Final = ("pending", "running", "succeeded", "failed", "infra_error", "cancelled")

_TALLY_COLUMNS: Final = frozenset(
    {"stage", "task", "harness", "attempt", "runbook", "execution", "kind", "status", "end_reason"}
)
"""Columns :meth:`RunReader.tally` counts by and :meth:`RunReader.distinct` lists (never a blob,
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



def _unpack(data: bytes, codec: int, where: str) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        try:
            return zlib.decompress(data)
        except zlib.error as exc:
            raise StoreCorruptError(f"{where}: compressed blob is damaged ({exc})") from exc
    raise StoreCorruptError(f"{where}: unknown blob codec {codec} (written by a newer rsr_async?)")


class RunReader:
    """Queries over one run database. Open one with :meth:`open_readonly`; the writer
    (:class:`~rsr_async.engine.store.Store`) is one too, over its own connection.

    Queries may come from several threads (they take turns on the one connection).
    Opening, querying and closing block (file I/O): call them from a thread in async code.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.readonly = True
        """False only on a writer opened for writing."""
        self._read_lock = threading.Lock()
        self._reader: sqlite3.Connection
        self._light_column: bool | None = None

    @classmethod
    def open_readonly(cls, path: str | Path) -> Self:
        """Open a run database (or the run directory holding one) for queries only.

        Takes no lock and never writes, so it reads beside a live run and from a
        read-only run directory. Raises :class:`~rsr_async.errors.StoreError` when there
        is no database there (or an empty one: a run just starting), and
        :class:`~rsr_async.errors.StoreCorruptError` for a file that is not SQLite, not
        ours, or unreadable (left untouched)."""
        path = Path(path)
        if path.is_dir():
            path = path / DB_NAME
        if not path.is_file():
            raise StoreError(f"{path}: no run database here (expected {DB_NAME} in a run directory)")
        if path.stat().st_size == 0:  # created, not yet written: not corrupt, just not there
            raise StoreError(f"{path}: the run database is empty (a run that is just starting?)")
        reader = cls(path)
        _check_header(path)
        try:
            reader._reader = _connect_readonly(path)
            _check_ours(reader._reader, path, allow_new=False)
        except sqlite3.DatabaseError as exc:
            reader.close()
            raise StoreCorruptError(_corrupt_message(path, exc)) from exc
        except BaseException:
            reader.close()
            raise
        return reader

    def close(self) -> None:
        """Close the connection (idempotent)."""
        conn = getattr(self, "_reader", None)
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stage_config(self, stage: str) -> dict[str, Any] | None:
        """The settings ``stage`` recorded (None when it has not run here)."""
        text = self.meta().get(f"stage_config:{stage}")
        return None if text is None else dict(json.loads(text))

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

