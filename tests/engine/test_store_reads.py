"""The store's paged and counting reads (what the viewer pages use), on real SQLite files:
key prefixes, keyset pages in both directions, several tasks at once, counts by column,
distinct values, and typed outputs under a prefix."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsr_async.engine import Store
from rsr_async.errors import StoreError
from rsr_async.schema import CritiqueResult, EpisodeResult, JobKey, JobStatus, Verdict


def _keys(n_tasks: int = 4) -> list[JobKey]:
    keys = []
    for t in range(n_tasks):
        for harness in ("rsrt", "terminus2"):
            for attempt in range(3):
                keys.append(JobKey(stage="discover", task=f"t{t}", harness=harness, attempt=attempt))
                keys.append(JobKey(stage="execute", task=f"t{t}", harness=harness, attempt=attempt,
                                   runbook="r0d0", execution=0))
    # a task whose name extends another's: a prefix must end at the separator
    keys.append(JobKey(stage="discover", task="t1x", harness="rsrt", attempt=0))
    return keys


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path, events=False) as writer:
        for i, key in enumerate(_keys()):
            status: JobStatus = "failed" if i % 5 == 0 else "succeeded"
            writer.put_result(EpisodeResult(key=key, status=status), wait=False)
        writer.put_result(CritiqueResult(key=JobKey(stage="critique", task="t1", harness="rsrt", runbook="r0d0"),
                                         status="succeeded",
                                         verdict=Verdict(subject="r0d0", accepted=True, stage="judge")))
        writer.flush()
    reader = Store.open_readonly(tmp_path)
    yield reader
    reader.close()


def test_prefix_is_a_key_range_that_stops_at_the_separator(store: Store) -> None:
    every = [r.key for r in store.rows()]
    mine = [r.key for r in store.rows(prefix="discover/t1/")]
    assert mine == [k for k in every if k.startswith("discover/t1/")] and len(mine) == 6
    assert all(not k.startswith("discover/t1x/") for k in mine)
    assert [r.key for r in store.rows(prefix="discover/t1/rsrt/a2/")] == ["discover/t1/rsrt/a2/-/e-1"]
    plan = store._reader.execute(  # the range uses the key index, not a scan
        "EXPLAIN QUERY PLAN SELECT key FROM jobs WHERE key >= ? AND key < ? ORDER BY key", ("a/", "a0")
    ).fetchall()
    assert "sqlite_autoindex_jobs_1" in str(plan)


def test_keyset_pages_cover_every_row_once_in_both_directions(store: Store) -> None:
    wanted = [r.key for r in store.rows(status="succeeded", harness="rsrt")]
    forward: list[str] = []
    after = None
    while True:
        page = store.rows(status="succeeded", harness="rsrt", after=after, limit=4)
        forward += [r.key for r in page]
        if len(page) < 4:
            break
        after = page[-1].key
    assert forward == wanted
    backward: list[str] = []
    before = wanted[-1]
    while True:
        page = store.rows(status="succeeded", harness="rsrt", before=before, limit=4)
        assert [r.key for r in page] == sorted(r.key for r in page)  # still in key order
        backward = [r.key for r in page] + backward
        if len(page) < 4:
            break
        before = page[0].key
    assert backward == wanted[:-1]


def test_several_tasks_at_once_and_a_bad_column_is_refused(store: Store) -> None:
    rows = store.rows(task=["t0", "t3", "nope"], stage="execute")
    assert {r.task for r in rows} == {"t0", "t3"} and len(rows) == 12
    assert store.rows(task=[]) == []
    many = [f"x{i}" for i in range(5000)] + ["t2"]  # beyond SQLite's bound-parameter limit
    assert {r.task for r in store.rows(task=many)} == {"t2"}
    with pytest.raises(StoreError, match="not a column"):
        store.tally("error")
    with pytest.raises(StoreError, match="not a column"):
        store.distinct("spec")


def test_tally_counts_by_columns_without_reading_blobs(store: Store) -> None:
    every = store.rows()
    assert store.tally() == {(): len(every)}
    by_stage = store.tally("stage", "status")
    assert sum(by_stage.values()) == len(every)
    assert by_stage[("discover", "failed")] == sum(1 for r in every if r.stage == "discover" and r.status == "failed")
    per_harness = store.tally("harness", "status", prefix="discover/t2/")
    assert sum(per_harness.values()) == 6 and {h for h, _ in per_harness} == {"rsrt", "terminus2"}
    assert store.tally("status", task=["t0", "t1"], stage="execute") == {
        (s,): sum(1 for r in every if r.task in ("t0", "t1") and r.stage == "execute" and r.status == s)
        for s in {r.status for r in every if r.task in ("t0", "t1") and r.stage == "execute"}
    }


def test_distinct_values_and_outputs_under_a_prefix(store: Store) -> None:
    assert store.distinct("stage") == ["critique", "discover", "execute"]
    assert store.distinct("task") == ["t0", "t1", "t1x", "t2", "t3"]
    assert store.distinct("harness") == ["rsrt", "terminus2"]
    found = [r.key for r in store.outputs(EpisodeResult, prefix="execute/t3/terminus2/", chunk=2)]
    assert [str(k) for k in found] == [r.key for r in store.rows(prefix="execute/t3/terminus2/")]
    assert len(found) == 3
    assert [c.verdict for c in store.outputs(CritiqueResult, prefix="critique/t1/")][0].accepted


def test_reads_work_beside_a_live_writer(tmp_path: Path) -> None:
    with Store.open(tmp_path, events=False) as writer:
        writer.put_result(EpisodeResult(key=JobKey(stage="discover", task="a"), status="succeeded"))
        writer.flush()
        with Store.open_readonly(tmp_path) as reader:
            assert reader.tally("task") == {("a",): 1}
            writer.put_result(EpisodeResult(key=JobKey(stage="discover", task="b"), status="failed"))
            writer.flush()
            assert reader.distinct("task") == ["a", "b"]  # each read sees the latest commit
    assert sqlite3.connect(tmp_path / "run.db").execute("SELECT count(*) FROM jobs").fetchone() == (2,)
