"""`run --config paper --stages discover,rewrite,verify,export` end to end on bundled
tasks (all three harnesses: Terminus 2, StateM, RSRT): real containers, the embedded simulator with the scripted stand-in, a real SQLite store, a
SIGKILL mid-pipeline and a rerun whose export is byte-identical to a clean run's."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rsr_async.analysis.runs import read_run
from rsr_async.analysis.tables import all_tables
from rsr_async.engine.store import Store
from rsr_async.llm.scripted import is_wait_reply
from rsr_async.rsr.runtime import run_id_for
from rsr_async.schema import AuditResult, PlanResult
from rsr_async.tasks import BUNDLED_SUITE
from tests.conftest import run_cli_env

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

# Tasks the scripted stand-in solves often (solve_probability > 0.8), so there are sources.
TASKS = ["merge-inventory", "endpoint-latency-report", "normalize-line-endings"]
STAGES = "discover,rewrite,verify,export"
SMALL = ["--set", "rsr.runbooks_per_source=2", "--set", "rsr.executions_per_runbook=2",
         "--set", "rsr.critic_max_retries=1"]


def _dataset(tmp_path: Path) -> Path:
    listing = tmp_path / "tasks.txt"
    listing.write_text("".join(f"{BUNDLED_SUITE / n}\n" for n in TASKS))
    return listing


def _cmd(dataset: Path, run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rsr_async", "run", "--dataset", str(dataset), "--run-dir", str(run_dir),
            "--progress", "none", "--config", "paper", "--attempts", "1", "--concurrency", "8",
            "--stages", STAGES,
            "--allow-scripted", *SMALL, *extra]


def _leftovers(run_dir: Path) -> list[str]:
    return subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=rsr_async.run={run_id_for(run_dir)}"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()


def _export_files(run_dir: Path) -> dict[str, bytes]:
    root = run_dir / "export"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _finished(db: Path, stage: str) -> int:
    if not db.exists():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        (n,) = con.execute(
            "SELECT count(*) FROM jobs WHERE stage = ? AND status IN ('succeeded', 'failed')", (stage,)
        ).fetchone()
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()
    return int(n)


def _check_run(run_dir: Path) -> dict[str, object]:
    manifest = json.loads((run_dir / "export" / "manifest.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    with Store.open_readonly(run_dir) as store:
        for stage in ("discover", "plan", "critique", "execute", "audit"):
            counts = store.counts(stage=stage)
            assert counts["infra_error"] == 0, (stage, counts)
            assert counts["pending"] == counts["running"] == 0, (stage, counts)
        sources = store.counts(stage="discover")["succeeded"]
        kept = [a for a in store.outputs(AuditResult, stage="audit")
                if a.verdict is not None and a.verdict.accepted]
        direct = sum(1 for r in store.rows(stage="discover", status="succeeded") if r.harness == "terminus2")
    assert sources > 0, "no source succeeded: nothing to rewrite"
    harnesses = summary["harnesses"]
    assert set(harnesses) == {"terminus2", "statem", "rsrt"}
    assert all(h["episodes"] == len(TASKS) and h["infra_errors"] == 0 for h in harnesses.values())
    assert set(summary["union_solved"]) == {t for h in ("terminus2", "statem", "rsrt")
                                           for t in _solved(run_dir, h)}
    figures = summary["pipeline"]
    assert figures["sources"] == sources and figures["audit_accepted"] == len(kept)
    # kept = written by the export; byte-identical rewrites are counted apart
    assert manifest["records"]["written"]["rewrite"] == figures["kept"]
    assert manifest["records"]["duplicates"].get("rewrite", 0) == figures["kept_duplicates"]
    assert manifest["counts"]["pipeline"]["kept"] == figures["kept"]
    # analyze reads the same run the same way the run's own summary and figures do
    tables = {t.name: t for t in all_tables(read_run(run_dir))}
    coverage = {row[1]: row for row in tables["coverage"].rows}
    for harness, figures_of in harnesses.items():
        assert coverage[harness][4] == figures_of["solved_tasks"], harness
    assert coverage["union"][4] == len(summary["union_solved"])
    (rewrites,) = tables["rewrites"].rows
    assert rewrites[0] == figures["sources"] and rewrites[2] == figures["rewrite_rollouts"]
    assert rewrites[5] == figures["kept"] and rewrites[1] == figures["runbooks_accepted"]
    assert rewrites[4] == pytest.approx(figures["rewrite_pass_rate"])
    # the manifest agrees with the store and with the files
    assert manifest["records"]["received"] == {"rewrite": len(kept), "direct": direct, "baseline": sources}
    rows = (run_dir / "export" / "sft.jsonl").read_text().splitlines()
    assert len(rows) == sum(manifest["split"]["rows"]["sft.jsonl"].values()) > 0
    assert len(rows) == manifest["records"]["written"]["rewrite"] + manifest["records"]["written"]["direct"]
    baseline = (run_dir / "export" / "direct_sft.jsonl").read_text().splitlines()
    assert len(baseline) == sources - len(manifest["dedupe"]["dropped"]["direct_sft"])
    _check_dataset(run_dir / "export", rows)
    with Store.open_readonly(run_dir) as store:
        runbooks = [p.runbook.text for p in store.outputs(PlanResult, stage="plan") if p.runbook]
    assert runbooks
    exported = "".join(p.read_text() for p in (run_dir / "export").rglob("*.json*"))
    for runbook in runbooks:  # nothing private reaches any exported file
        assert max(runbook.splitlines(), key=len) not in exported
    assert _leftovers(run_dir) == []
    assert _snapshot_images() == []  # RSRT's hidden-verification copies are gone too
    return manifest


def _check_stage_times(run_dir: Path, stderr: str) -> None:
    """summary.json says when each stage's jobs ran in this (first) invocation: every
    job of every stage, inside the run's wall time, after start-up; then the export."""
    summary = json.loads((run_dir / "summary.json").read_text())
    stages = summary["stages"]
    assert list(stages) == ["discover", "plan", "critique", "execute", "audit"]
    with Store.open_readonly(run_dir) as store:
        for stage, times in stages.items():
            counts = store.counts(stage=stage)
            assert times["jobs"] == counts["succeeded"] + counts["failed"] > 0, stage
            assert summary["open_s"] <= times["first_start_s"] <= times["last_end_s"] <= summary["wall_s"], stage
            assert 0 <= times["median_s"] <= times["busy_s"], stage  # an audit with no flag is sub-ms
    assert stages["discover"]["median_s"] > 0 and stages["execute"]["median_s"] > 0
    # the graph has no barrier, but each stage waits for its first input
    assert stages["discover"]["first_start_s"] <= stages["plan"]["first_start_s"]
    assert stages["plan"]["first_start_s"] <= stages["execute"]["first_start_s"]
    assert summary["export_s"] > 0
    assert "time by stage" in stderr and "export" in stderr


def _check_dataset(export: Path, rows: list[str]) -> None:
    """The export folder loads with the real `datasets`, no arguments; weights mark exactly
    the replies Terminus 2 rejected."""
    import datasets

    cache = export.parent / "hf-cache"
    sft = datasets.load_dataset(str(export), cache_dir=str(cache))
    assert sum(len(split) for split in sft.values()) == len(rows)
    assert set(sft) <= {"train", "validation"} and "train" in sft
    baseline = datasets.load_dataset(str(export), "direct_sft", cache_dir=str(cache))
    assert sum(len(split) for split in baseline.values()) == len(
        (export / "direct_sft.jsonl").read_text().splitlines())
    for line in rows:
        row = json.loads(line)
        zero = [i for i, m in enumerate(row["messages"]) if m.get("weight") == 0]
        assert len(zero) == row["rejected_turns"]
        assert all(row["messages"][i + 1]["content"].startswith(
            ("Previous response had parsing errors:", "ERROR!! NONE of the actions")) for i in zero)
    shutil.rmtree(cache)


def test_pipeline_end_to_end_then_sigkill_and_rerun_gives_the_same_export(tmp_path: Path) -> None:
    dataset = _dataset(tmp_path)
    clean = tmp_path / "clean"
    out = subprocess.run(_cmd(dataset, clean), env=run_cli_env(), capture_output=True, text=True, timeout=800)
    assert out.returncode == 0, out.stderr[-4000:]
    _check_run(clean)
    _check_stage_times(clean, out.stderr)

    # The same run, killed once the first rewrite executions have finished, then rerun.
    killed = tmp_path / "killed"
    proc = subprocess.Popen(_cmd(dataset, killed), env=run_cli_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 600
    try:
        while _finished(killed / "run.db", "execute") < 1:
            assert proc.poll() is None, proc.stderr.read()[-4000:] if proc.stderr else ""
            assert time.monotonic() < deadline, "no rewrite execution finished within 600 s"
            time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    again = subprocess.run(_cmd(dataset, killed), env=run_cli_env(), capture_output=True, text=True, timeout=800)
    assert again.returncode == 0, again.stderr[-4000:]
    _check_run(killed)
    # every job ran to a final status exactly once over both invocations
    finals = Counter()
    for line in (killed / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("event") == "job" and event.get("status") in ("succeeded", "failed"):
            finals[event["key"]] += 1
    assert finals and set(finals.values()) == {1}
    # Same seeds, same work: the same rows, sets, split and model replies as the clean run.
    # (Observations may differ in wall-clock details such as `ls -la` dates, so two separate
    # executions are compared by content that does not depend on the clock.)
    replies_killed, replies_clean = _replies(killed), _replies(clean)
    for name in replies_clean:  # rows dropped as duplicates may differ; shared rows agree
        shared = replies_clean[name].keys() & replies_killed[name].keys()
        assert shared and all(replies_clean[name][k] == replies_killed[name][k] for k in shared)
    assert _manifest_counts(killed) == _manifest_counts(clean)
    # Exporting the same run directory again gives byte-identical files.
    before = _export_files(killed)
    out = subprocess.run([sys.executable, "-m", "rsr_async", "export", str(killed), "--allow-scripted"],
                         env=run_cli_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert _export_files(killed) == before


def _solved(run_dir: Path, harness: str) -> set[str]:
    with Store.open_readonly(run_dir) as store:
        return {r.task for r in store.rows(stage="discover", status="succeeded", harness=harness)}


def _snapshot_images() -> list[str]:
    return subprocess.run(["docker", "images", "-q", "--filter", "label=rsr_async.snapshot"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.split()


def _manifest(run_dir: Path) -> dict[str, object]:
    return json.loads((run_dir / "export" / "manifest.json").read_text())


def _manifest_counts(run_dir: Path) -> dict[str, object]:
    # What was selected, and the split; not what dedupe (by content) made of it, nor
    # figures that depend on observed output (audit verdicts, turns).
    manifest = _manifest(run_dir)
    split = manifest["split"]
    assert isinstance(split, dict)
    received = manifest["records"]["received"]  # type: ignore[index]
    return {"sources": (received["baseline"], received["direct"]), "train": split["train"],
            "validation": split["validation"]}


def _replies(run_dir: Path) -> dict[str, dict[str, list[str]]]:
    """Per export file: row key -> the model's replies, in order, less the stand-in's
    waits for a command still running (they follow the machine's speed, not the seed)."""
    out: dict[str, dict[str, list[str]]] = {}
    for name in ("sft.jsonl", "direct_sft.jsonl"):
        rows = [json.loads(line) for line in (run_dir / "export" / name).read_text().splitlines()]
        out[name] = {r["key"]: [m["content"] for m in r["messages"]
                                if m["role"] == "assistant" and not is_wait_reply(m["content"])]
                     for r in rows}
    return out
