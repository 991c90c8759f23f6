"""Harbor's own ``traces export`` over our Harbor job directory gives ``sft.jsonl``'s conversations.

``golden/harbor_traces.json`` holds what Harbor 0.26.0's ``export_traces`` (the code behind
``harbor traces export``) produced from ``write_harbor_jobs(samples.suite())``, recorded by
``scripts/record_harbor_traces.py``, with the sha256 of each ``trajectory.json`` it read.
Here the same directory is written again: its trajectory files must be those bytes (so
Harbor's recorded output is the output for them), and every ``sft.jsonl`` row must be
Harbor's conversation for its trial, message for message.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from rsr_async.export import write_export, write_harbor_jobs
from tests.export import samples

GOLDEN = json.loads(
    (Path(__file__).parent / "golden" / "harbor_traces.json").read_text(encoding="utf-8")
)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("harbor")
    write_export(samples.suite(), root / "export")
    write_harbor_jobs(samples.suite(), root / "jobs")
    return root / "export", root / "jobs"


def test_harbor_read_exactly_these_trajectory_files(written: tuple[Path, Path]) -> None:
    _, jobs = written
    assert "harbor==0.26.0" in GOLDEN["$comment"]
    ours = {
        path.parent.parent.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in jobs.glob("rsr-export/*/agent/trajectory.json")
    }
    assert ours == {name: t["trajectory_sha256"] for name, t in GOLDEN["trials"].items()}


def test_every_sft_row_is_harbors_conversation(written: tuple[Path, Path]) -> None:
    export, jobs = written
    sft = {row["key"]: row for row in _jsonl(export / "sft.jsonl")}
    seen = set()
    for trial, harbor in GOLDEN["trials"].items():
        result = json.loads((jobs / "rsr-export" / trial / "result.json").read_text())
        row = sft[result["agent_result"]["metadata"]["key"]]
        seen.add(row["key"])
        # Harbor's traces export keeps no weight: compare what it has, role and content.
        assert harbor["conversations"] == [
            {"role": m["role"], "content": m["content"]} for m in row["messages"]
        ], trial
        assert (harbor["agent"], harbor["model"], harbor["task"]) == (
            "terminus-2",
            row["model"],
            row["task"],
        )
        assert harbor["result"] == str(float(row["reward"]))
        # episodes=all: one conversation per agent step, i.e. per model reply
        assert harbor["episodes"] == sum(m["role"] == "assistant" for m in row["messages"])
        # and the trial's trajectory is the export's ATIF file, byte for byte
        assert (jobs / "rsr-export" / trial / "agent" / "trajectory.json").read_bytes() == (
            export / row["atif"]
        ).read_bytes()
    assert seen == set(sft)


def test_harbor_jobs_hold_only_plain_terminus2(tmp_path: Path) -> None:
    statem = samples.record(samples.statem_success("delta"), "direct", "discover/delta/statem/a0/-/e-1")
    with pytest.raises(ValueError, match="Harbor has only Terminus 2"):
        write_harbor_jobs([statem], tmp_path / "jobs")
    with pytest.raises(ValueError, match="not a plain directory name"):
        write_harbor_jobs(samples.suite(), tmp_path / "jobs", job_name="../x")
    assert not (tmp_path / "jobs").exists()


def test_harbor_jobs_manifest_lists_every_file(written: tuple[Path, Path]) -> None:
    _, jobs = written
    manifest = json.loads((jobs / "manifest.json").read_text())
    files = {
        str(p.relative_to(jobs)): p.read_bytes()
        for p in jobs.rglob("*")
        if p.is_file() and p.name != "manifest.json"
    }
    assert set(manifest["files"]) == set(files)
    for name, data in files.items():
        assert manifest["files"][name]["sha256"] == hashlib.sha256(data).hexdigest()
    assert manifest["format"] == "harbor-jobs" and manifest["trials"] == len(GOLDEN["trials"])
