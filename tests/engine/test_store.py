"""The run database on real SQLite files: round trips, batching under concurrent
writers, resume bookkeeping, and files that are corrupt or not ours."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import msgspec
import pytest

from rsr_async.engine import Job, Store
from rsr_async.engine.fakes import make_jobs
from rsr_async.errors import ConfigMismatchError, StoreCorruptError, StoreError
from rsr_async.schema import EpisodeResult, EpisodeSpec, JobKey, Message, Task, Trajectory, Usage


def result_for(job: Job, *, status: str = "succeeded", messages: int = 2) -> EpisodeResult:
    trajectory = Trajectory(task=job.key.task, harness=job.key.harness, model="m")
    for turn in range(messages):
        trajectory.messages.append(
            Message(role="assistant", content=f"turn {turn} " + "x" * 40, origin="model", turn=turn,
                    usage=Usage(prompt_tokens=10, completion_tokens=2, requests=1))
        )
    return EpisodeResult(
        key=job.key, status=status, end_reason="completed",  # type: ignore[arg-type]
        reward=1.0 if status == "succeeded" else 0.0, trajectory=trajectory, turns=messages,
    )


def test_round_trip_compression_and_queries(tmp_path: Path) -> None:
    jobs = make_jobs(6)
    task = Task(name="t", path="/tasks/t", instruction="do it")
    episode = Job.episode(EpisodeSpec(key=JobKey(stage="discover", task="t", harness="terminus2"), task=task))
    with Store.open(tmp_path, config={"run": {"attempts": 1}}) as store:
        store.register([*jobs, episode])
        store.mark_running(str(jobs[0].key))
        big = result_for(jobs[0], messages=200)
        store.put_result(big)
        store.put_result(result_for(jobs[1], status="failed"))
        store.flush()
        assert store.get(jobs[0].key) == big
        assert store.get(jobs[2].key) is None
        assert store.spec(episode.key) == episode.spec
        assert store.spec(jobs[3].key) == jobs[3].spec
        assert store.counts() == {"pending": 5, "running": 0, "succeeded": 1, "failed": 1,
                                  "infra_error": 0, "cancelled": 0}
        assert [r.key for r in store.results(status="failed")] == [jobs[1].key]
        assert [r.key for r in store.results(stage="discover", status=("succeeded", "failed"), chunk=1)] == [
            jobs[0].key, jobs[1].key]
        row = store.row(jobs[0].key)
        assert row is not None and row.tries == 1 and row.reward == 1.0 and row.job_key == jobs[0].key
        assert store.statuses([str(jobs[1].key), "nope"]) == {str(jobs[1].key): "failed"}
    raw = sqlite3.connect(tmp_path / "run.db")
    blob, codec = raw.execute("SELECT result, codec FROM jobs WHERE key = ?", (str(jobs[0].key),)).fetchone()
    raw.close()
    assert codec == 1 and len(blob) < len(b"x" * 40 * 200) / 4  # compressed


def test_concurrent_writers_are_batched_and_nothing_is_lost(tmp_path: Path) -> None:
    jobs = make_jobs(4000)
    with Store.open(tmp_path, batch_ms=20) as store:
        store.register(jobs[:2000])  # the rest arrive as results without registration

        def thread_writer(part: list[Job]) -> None:
            for job in part:
                store.mark_running(str(job.key))
                store.put_result(result_for(job), wait=False)

        threads = [threading.Thread(target=thread_writer, args=(jobs[i:2000:4],)) for i in range(4)]

        async def async_writers() -> None:
            async def one(job: Job) -> None:
                future = store.put_result(result_for(job, status="failed"))
                assert future is not None
                await asyncio.wrap_future(future)

            async with asyncio.TaskGroup() as tg:
                for job in jobs[2000:]:
                    tg.create_task(one(job))

        reader_errors: list[BaseException] = []
        stop = threading.Event()

        def reader() -> None:  # WAL: reads go on beside the writer
            ro = Store.open_readonly(tmp_path)
            try:
                while not stop.is_set():
                    ro.counts()
            except BaseException as exc:
                reader_errors.append(exc)
            finally:
                ro.close()

        read_thread = threading.Thread(target=reader)
        read_thread.start()
        for t in threads:
            t.start()
        asyncio.run(async_writers())
        for t in threads:
            t.join()
        store.flush()
        stop.set()
        read_thread.join()
        counts = store.counts()
        commits = store.commits
    assert not reader_errors
    assert counts["succeeded"] == 2000 and counts["failed"] == 2000 and sum(counts.values()) == 4000
    assert commits < 400  # 10,000 writes in a few hundred transactions
    with Store.open_readonly(tmp_path) as ro:
        assert all(r.tries == 1 for r in ro.rows(status="succeeded"))


def test_running_rows_left_by_a_crash_go_back_to_pending(tmp_path: Path) -> None:
    jobs = make_jobs(3)
    with Store.open(tmp_path) as store:
        store.register(jobs)
        store.mark_running(str(jobs[0].key))
        store.mark_running(str(jobs[1].key))
        store.put_result(result_for(jobs[1]))
    with Store.open(tmp_path) as store:
        assert store.recovered_running == 1
        assert store.statuses() == {str(jobs[0].key): "pending", str(jobs[1].key): "succeeded",
                                    str(jobs[2].key): "pending"}


def test_config_mismatch_names_the_keys(tmp_path: Path) -> None:
    base = {"run": {"attempts": 1, "concurrency": 8}, "llm": {"model": "a", "urls": ["x"]}}
    Store.open(tmp_path, config=base).close()
    Store.open(tmp_path, config={"run": {"attempts": 1, "concurrency": 99},
                                 "llm": {"model": "a", "urls": ["y"]}}).close()
    with pytest.raises(ConfigMismatchError, match=r"llm\.model: 'a' -> 'b'"):
        Store.open(tmp_path, config={**base, "llm": {"model": "b", "urls": ["x"]}})
    Store.open(tmp_path, config={**base, "llm": {"model": "b", "urls": ["x"]}}, force=True).close()
    with Store.open_readonly(tmp_path) as store:
        assert store.config() == {**base, "llm": {"model": "b", "urls": ["x"]}}
        assert "config_history" in store.meta()


def _assert_refused_untouched(path: Path, match: str) -> None:
    before = path.read_bytes()
    with pytest.raises(StoreCorruptError, match=match):
        Store.open(path.parent)
    with pytest.raises(StoreCorruptError, match=match):
        Store.open_readonly(path.parent)
    assert path.read_bytes() == before
    assert not (path.parent / "run.db-wal").exists() or path.read_bytes() == before


def test_a_file_that_is_not_sqlite_is_refused_and_left_untouched(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    db.write_bytes(b"this is a text file, not a database\n" * 100)
    _assert_refused_untouched(db, "not an SQLite database.*left untouched")


def test_a_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    _assert_refused_untouched(db, "did not write")


def test_damaged_pages_are_detected(tmp_path: Path) -> None:
    jobs = make_jobs(300)
    with Store.open(tmp_path) as store:
        store.register(jobs)
        for job in jobs:
            store.put_result(result_for(job, messages=30), wait=False)
        store.flush()
    conn = sqlite3.connect(tmp_path / "run.db")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    db = tmp_path / "run.db"
    data = bytearray(db.read_bytes())
    assert len(data) > 40 * 4096
    data[8 * 4096 : 30 * 4096] = b"\xde\xad\xbe\xef" * (22 * 1024)
    db.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptError, match="damaged|unreadable|malformed"):
        Store.open(tmp_path)
    assert db.read_bytes() == bytes(data)


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    Store.open(tmp_path).close()
    conn = sqlite3.connect(tmp_path / "run.db")
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer rsr_async"):
        Store.open(tmp_path)


def test_readonly_refuses_writes_and_missing_dirs(tmp_path: Path) -> None:
    Store.open(tmp_path).close()
    with Store.open_readonly(tmp_path) as store, pytest.raises(StoreError, match="read-only"):
        store.register(make_jobs(1))
    with pytest.raises(StoreError, match="no run database"):
        Store.open_readonly(tmp_path / "elsewhere")


def test_an_empty_file_is_a_new_database_not_a_corrupt_one(tmp_path: Path) -> None:
    (tmp_path / "run.db").touch()  # killed right after SQLite created the file
    with pytest.raises(StoreError, match="empty"):
        Store.open_readonly(tmp_path)
    with Store.open(tmp_path) as store:
        assert store.counts()["pending"] == 0


def test_light_results_leave_out_bulky_fields_and_old_stores_still_read(tmp_path: Path) -> None:
    jobs = make_jobs(3)
    with Store.open(tmp_path, config={}) as store:
        for job in jobs:
            store.put_result(msgspec.structs.replace(result_for(job, messages=50), verifier_output="log"))
        store.flush()
        light = list(store.outputs(EpisodeResult, light=True))
        full = list(store.outputs(EpisodeResult))
    assert [r.trajectory for r in light] == [None] * 3 and all(r.verifier_output == "" for r in light)
    assert [msgspec.structs.replace(r, trajectory=None, verifier_output="") for r in full] == light
    assert all(r.trajectory is not None for r in full)
    # A store written before the light column existed: read-only opens read the full
    # blobs; the next writable open adds the column (new rows fill it).
    raw = sqlite3.connect(tmp_path / "run.db")
    raw.execute("ALTER TABLE jobs DROP COLUMN light")
    raw.commit()
    raw.close()
    with Store.open_readonly(tmp_path) as old:
        assert [r.key for r in old.outputs(EpisodeResult, light=True)] == [j.key for j in jobs]
        assert all(r.trajectory is not None for r in old.outputs(EpisodeResult, light=True))
    with Store.open(tmp_path, config={}) as store:
        assert len(list(store.outputs(EpisodeResult, light=True))) == 3
    raw = sqlite3.connect(tmp_path / "run.db")
    assert "light" in {row[1] for row in raw.execute("PRAGMA table_info(jobs)")}
    raw.close()


def test_outputs_of_a_stage_walk_its_key_range_in_chunks(tmp_path: Path) -> None:
    # Stages whose names prefix each other's keys, results in every chunk position.
    jobs = [*make_jobs(7, stage="plan"), *make_jobs(5, stage="plan2"), *make_jobs(3, stage="pla")]
    with Store.open(tmp_path, config={}) as store:
        for job in jobs:
            store.put_result(result_for(job, status="failed"))
        store.flush()
        plan = [r.key for r in store.results(stage="plan", chunk=2)]
        assert plan == sorted((j.key for j in jobs if j.key.stage == "plan"), key=str)
        assert len(list(store.results(stage="plan2", chunk=3))) == 5
        assert len(list(store.results(stage="pla", chunk=1, status="failed"))) == 3
