"""The read-only reader on its own, over real SQLite files the writer wrote: it reads a
copy of a run directory, gives back exactly the rows the writer wrote, writes nothing,
takes no lock, and meets files that are not a run as the writer does."""

from __future__ import annotations

import ast
import hashlib
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from rsr_async.engine import Job, RunReader, Store
from rsr_async.engine.fakes import make_jobs
from rsr_async.errors import StoreCorruptError, StoreError
from rsr_async.schema import CritiqueResult, EpisodeResult, JobKey, Verdict

from .test_store import result_for


def _write_run(run_dir: Path) -> tuple[list[Job], dict[str, Any]]:
    """A run of every kind of row; and what the writer itself reads back of it."""
    jobs = make_jobs(12)
    with Store.open(run_dir, config={"run": {"attempts": 2}}) as store:
        store.register(jobs)
        store.check_stage_config("plan", {"k": 4})
        for i, job in enumerate(jobs[:9]):
            store.mark_running(str(job.key))
            # every third one big enough to be compressed
            store.put_result(result_for(job, status="failed" if i % 4 == 0 else "succeeded",
                                        messages=120 if i % 3 == 0 else 2), wait=False)
        store.put_result(CritiqueResult(key=JobKey(stage="critique", task="t", harness="rsrt", runbook="r0d0"),
                                        status="succeeded",
                                        verdict=Verdict(subject="r0d0", accepted=True, stage="judge")))
        store.flush()
        written = _everything(store, jobs)
    return jobs, written


def _digest(run_dir: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run_dir.iterdir())}


def _everything(reader: RunReader, jobs: list[Job]) -> dict[str, Any]:
    """What a reader gives back, through every query."""
    return {
        "meta": reader.meta(),
        "config": reader.config(),
        "stage_config": reader.stage_config("plan"),
        "counts": reader.counts(),
        "statuses": reader.statuses(),
        "rows": reader.rows(),
        "page": reader.rows(status="succeeded", after=str(jobs[1].key), limit=3),
        "distinct": [reader.distinct(c) for c in ("stage", "task", "harness", "status")],
        "tally": reader.tally("stage", "status"),
        "results": list(reader.results()),
        "light": list(reader.outputs(EpisodeResult, light=True)),
        "critiques": list(reader.outputs(CritiqueResult)),
        "gets": [reader.get(job.key) for job in jobs],
        "specs": [reader.spec(job.key) for job in jobs],
        "jobs": reader.jobs(),
        "task_specs": reader.task_specs(),
    }


def test_a_copy_reads_back_exactly_what_the_writer_wrote_and_stays_unchanged(tmp_path: Path) -> None:
    jobs, written = _write_run(tmp_path / "run")
    shutil.copytree(tmp_path / "run", tmp_path / "copy")
    before = _digest(tmp_path / "copy")
    with RunReader.open_readonly(tmp_path / "copy") as reader:
        assert type(reader) is RunReader and reader.readonly
        read = _everything(reader, jobs)
    assert read == written
    assert written["counts"] == {"pending": 3, "running": 0, "succeeded": 7, "failed": 3,
                                 "infra_error": 0, "cancelled": 0}
    assert len(written["results"]) == 9 and len(written["critiques"]) == 1
    assert written["stage_config"] == {"k": 4} and written["config"] == {"run": {"attempts": 2}}
    after = _digest(tmp_path / "copy")
    assert after["run.db"] == before["run.db"]  # nothing written to the database
    assert not hasattr(reader, "register") and not hasattr(reader, "put_result")


def test_the_reader_refuses_to_write_through_its_connection(tmp_path: Path) -> None:
    _write_run(tmp_path)
    with RunReader.open_readonly(tmp_path) as reader:
        n = reader.counts()
        for statement in ("DELETE FROM jobs", "UPDATE meta SET value = 'x'", "CREATE TABLE t (x)"):
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                reader._reader.execute(statement)
        assert reader.counts() == n


def test_a_reader_takes_no_lock_and_sees_later_commits(tmp_path: Path) -> None:
    jobs = make_jobs(4)
    with Store.open(tmp_path) as writer:
        writer.register(jobs)
        writer.flush()
        with RunReader.open_readonly(tmp_path) as reader:
            assert reader.counts()["pending"] == 4
            writer.put_result(result_for(jobs[0]))
            writer.flush()  # committed: a reader sees it
            assert reader.counts()["succeeded"] == 1
            assert reader.get(jobs[0].key) == writer.get(jobs[0].key)
    # a reader open on the directory does not keep a writer out
    with RunReader.open_readonly(tmp_path) as reader, Store.open(tmp_path) as writer:
        writer.put_result(result_for(jobs[1]))
        writer.flush()
        assert reader.counts()["succeeded"] == 2


def test_files_that_are_not_a_run_are_refused_by_name_and_left_untouched(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"no run database here \(expected run.db"):
        RunReader.open_readonly(tmp_path)
    garbage = tmp_path / "run.db"
    garbage.write_bytes(b"not a database at all" * 100)
    with pytest.raises(StoreCorruptError, match=f"{garbage}: not an SQLite database"):
        RunReader.open_readonly(tmp_path)
    assert garbage.read_bytes() == b"not a database at all" * 100
    garbage.unlink()
    foreign = sqlite3.connect(garbage)
    foreign.execute("CREATE TABLE songs (title TEXT)")
    foreign.commit()
    foreign.close()
    with pytest.raises(StoreCorruptError, match="an SQLite database that rsr_async did not write"):
        RunReader.open_readonly(garbage)


# -- who reads through the reader ---------------------------------------------------------

PACKAGE = Path(__file__).resolve().parents[2] / "rsr_async"
READ_SIDE = (
    "analysis", "viewer", "export",
    "rsr/summary.py", "rsr/figures.py", "rsr/exporting.py", "rsr/eval_commands.py", "rsr/stage_commands.py",
)
"""The packages and modules that only read runs (eval and the stage commands run an
engine too, whose writer they reach as ``engine.store``, never by importing it)."""


def _imports(path: Path) -> list[tuple[str, str]]:
    """``(module, name)`` of every import in a file, the module made absolute."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found: list[tuple[str, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            found += [(module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names]
    return found


def test_the_read_side_never_imports_the_writer() -> None:
    files = [f for part in READ_SIDE for f in ([PACKAGE / part] if part.endswith(".py")
                                               else sorted((PACKAGE / part).rglob("*.py")))]
    assert len(files) > 20
    offenders = []
    for path in files:
        imports = _imports(path)
        assert imports, path
        for module, name in imports:
            writer = (module == "rsr_async.engine.store" or (module, name) == ("rsr_async.engine", "store")
                      or (module.startswith("rsr_async.engine") and name == "Store"))
            if writer:
                offenders.append(f"{path.relative_to(PACKAGE)}: from {module} import {name}")
    assert not offenders, offenders
    # and the check sees such an import where there is one
    assert ("rsr_async.engine", "Store") in _imports(PACKAGE / "rsr" / "runtime.py")
