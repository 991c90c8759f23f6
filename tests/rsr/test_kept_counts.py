"""``kept`` means written by the export, everywhere: pipeline figures (summary.json), the
export's manifest and ``analyze``'s rewrite table agree, and duplicates are counted apart.

The analysis scenario's run directory (a real store) plus one more accepted rewrite whose
public conversation is byte-identical to a kept one (same commands; only its key differs).
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from rsr_async.analysis.runs import read_run
from rsr_async.analysis.tables import rewrites_tables
from rsr_async.engine import Job, Store
from rsr_async.rsr.exporting import export_run
from rsr_async.rsr.figures import pipeline_figures
from rsr_async.schema import AuditResult, AuditSpec, EpisodeResult, EpisodeSpec, JobKey, Verdict
from tests.analysis import scenario


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = scenario.write_run(tmp_path_factory.mktemp("kept") / "run")
    twin_of = scenario.EXECUTIONS[("terminus2", 0, "t1", "r0d0", 0)][3]
    key = JobKey(stage="execute", task="t1", harness="terminus2", attempt=0, runbook="r0d0",
                 execution=2)
    with Store.open(run_dir) as store:
        result = EpisodeResult(key=key, status="succeeded", reward=1.0, turns=8,
                               trajectory=scenario._trajectory("t1", "terminus2", twin_of))
        spec = EpisodeSpec(key=key, task=scenario.task_record("t1"))
        store.put_result(result, job=Job.episode(spec), wait=False)
        audit_key = msgspec.structs.replace(key, stage="audit")
        assert result.trajectory is not None
        audit = AuditSpec(key=audit_key, task=scenario.task_record("t1"), execution_key=str(key),
                          trajectory=result.trajectory)
        verdict = Verdict(subject=str(key), accepted=True, stage="audit")
        store.put_result(AuditResult(key=audit_key, status="succeeded", verdict=verdict),
                         job=Job.of(audit), wait=False)
        store.flush()
    return run_dir


def test_figures_manifest_and_report_agree_on_kept(run_dir: Path, tmp_path: Path) -> None:
    with Store.open_readonly(run_dir) as store:
        figures = pipeline_figures(store)
        manifest = export_run(store, tmp_path / "export", validation_share=0.0, seed=0,
                              allow_scripted=False)
    # 4 executions the audit accepted; one is a byte-identical twin of another
    assert figures["audit_accepted"] == 4
    assert (figures["kept"], figures["kept_duplicates"]) == (3, 1)
    assert figures["expansion_factor"] == pytest.approx(3 / figures["sources"])
    assert manifest["records"]["written"]["rewrite"] == 3
    assert manifest["records"]["duplicates"]["rewrite"] == 1
    assert manifest["counts"]["pipeline"]["kept"] == 3
    rows = [json.loads(line) for line in (tmp_path / "export" / "sft.jsonl").read_text().splitlines()]
    assert sum(r["set"] == "rewrite" for r in rows) == 3
    summary = rewrites_tables(read_run(run_dir))[0]
    row = dict(zip(summary.columns, summary.rows[0], strict=True))
    assert (row["kept"], row["duplicates"]) == (3, 1)
    assert row["expansion_factor"] == pytest.approx(figures["expansion_factor"])


def test_export_command_writes_harbor_jobs_and_drops_rejected(run_dir: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    def export(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rsr_async", "export", str(run_dir), *flags],
            capture_output=True, text=True, timeout=120, check=False,
        )

    done = export("--format", "harbor-jobs", "--out", str(tmp_path / "jobs"))
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "jobs" / "manifest.json").read_text())
    trials = sorted((tmp_path / "jobs" / "rsr-export").glob("*/agent/trajectory.json"))
    # the SFT set: 3 kept rewrites and the terminus2 discover successes not deduplicated
    sft = export("--out", str(tmp_path / "sft"), "--rejected", "drop")
    assert sft.returncode == 0, sft.stderr
    rows = (tmp_path / "sft" / "sft.jsonl").read_text().splitlines()
    assert manifest["trials"] == len(trials) == len(rows) > 3
    bad = export("--format", "parquet")
    assert bad.returncode != 0 and "invalid choice: 'parquet'" in bad.stderr
