#!/usr/bin/env python3
"""Record what Harbor 0.26.0's own tools make of our export: ``harbor traces export``, ``harbor view``.

Run on demand (not in CI: Harbor needs Python >= 3.12), with a Python that has Harbor
0.26.0 and ``datasets`` (Harbor's traces export builds a ``datasets.Dataset``)::

    python3.12 -m venv /tmp/harbor-venv
    /tmp/harbor-venv/bin/pip install harbor==0.26.0 datasets
    /tmp/harbor-venv/bin/python scripts/record_harbor_traces.py

With this repository's Python (``RSR_PYTHON``, default ``.venv/bin/python``) it writes the
export of ``tests/export/samples.suite()`` (``write_export``) and the Harbor job directory
of the same records (``write_harbor_jobs``, what ``export --format harbor-jobs`` writes).
Then, with Harbor's own code only:

1. ``harbor.viewer.scanner.JobScanner`` (what ``harbor view`` reads) must parse the job's
   config and result and every trial's config and result, and
   ``harbor.models.trajectories.Trajectory`` must validate every ``agent/trajectory.json``;
2. ``harbor.utils.traces_utils.export_traces`` (what ``harbor traces export`` runs) with
   ``episodes="last"`` gives one conversation per trial, and with ``episodes="all"`` one
   per agent step.

It writes ``tests/export/golden/harbor_traces.json``: per trial, the conversation Harbor
exported for the last episode, Harbor's row fields (agent, model, task, result), the
number of episodes ``all`` gave, and the sha256 of the ``trajectory.json`` Harbor read. ``tests/export/test_harbor_traces.py`` rebuilds the same
export in CI and checks that every ``sft.jsonl`` row is Harbor's conversation. The script
also compares here and exits non-zero on any difference or validation failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at import
os.environ["HARBOR_TELEMETRY"] = "0"  # no PostHog events

from harbor.models.trajectories import Trajectory  # noqa: E402
from harbor.utils.traces_utils import export_traces  # noqa: E402
from harbor.viewer.scanner import JobScanner  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "export" / "golden" / "harbor_traces.json"
EXPECTED_HARBOR = "0.26.0"
BUILD = (
    "import sys; from pathlib import Path; from tests.export.samples import suite; "
    "from rsr_async.export import write_export, write_harbor_jobs; "
    "write_export(suite(), Path(sys.argv[1])); write_harbor_jobs(suite(), Path(sys.argv[2]))"
)


def check_viewer(root: Path) -> int:
    """What ``harbor view`` reads: every config and result parses with Harbor's models."""
    failures = 0
    scanner = JobScanner(root)
    jobs = scanner.list_jobs()
    if not jobs:
        print("INVALID: JobScanner finds no job")
        return 1
    for job in jobs:
        if scanner.get_job_config(job) is None or scanner.get_job_result(job) is None:
            print(f"INVALID job {job}: config or result does not parse")
            failures += 1
        for trial in scanner.list_trials(job):
            if scanner.get_trial_config(job, trial) is None:
                print(f"INVALID {job}/{trial}: config.json")
                failures += 1
            if scanner.get_trial_result(job, trial) is None:
                print(f"INVALID {job}/{trial}: result.json")
                failures += 1
            path = root / job / trial / "agent" / "trajectory.json"
            try:
                Trajectory.model_validate(json.loads(path.read_text(encoding="utf-8")))
            except Exception as exc:  # pydantic's ValidationError, reported per file
                print(f"INVALID {job}/{trial}/agent/trajectory.json: {exc}")
                failures += 1
    return failures


def rows(dataset: Any) -> list[dict[str, Any]]:
    return [dict(row) for row in dataset]


def main() -> None:
    version = metadata.version("harbor")
    if version != EXPECTED_HARBOR:
        sys.exit(f"record_harbor_traces: harbor {version} is installed; the reference is {EXPECTED_HARBOR}")
    python = os.environ.get("RSR_PYTHON", str(REPO / ".venv" / "bin" / "python"))
    with tempfile.TemporaryDirectory() as tmp:
        export_dir, jobs_dir = Path(tmp) / "export", Path(tmp) / "jobs"
        subprocess.run([python, "-c", BUILD, str(export_dir), str(jobs_dir)], cwd=REPO, check=True)
        failures = check_viewer(jobs_dir)
        last = rows(export_traces(jobs_dir, episodes="last", export_subagents=False, use_rich_progress=False))
        every = rows(export_traces(jobs_dir, episodes="all", export_subagents=False, use_rich_progress=False))
        sft = [json.loads(line) for line in (export_dir / "sft.jsonl").read_text("utf-8").splitlines()]
        # What Harbor was given, so CI can check its files are still these bytes.
        given = {
            path.parent.parent.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in jobs_dir.glob("*/*/agent/trajectory.json")
        }
    episodes: dict[str, int] = {}
    for row in every:
        episodes[row["trial_name"]] = episodes.get(row["trial_name"], 0) + 1
    trials = {
        row["trial_name"]: {
            "conversations": row["conversations"],
            "agent": row["agent"],
            "model": row["model"],
            "task": row["task"],
            "result": row["result"],
            "episodes": episodes[row["trial_name"]],
            "trajectory_sha256": given[row["trial_name"]],
        }
        for row in last
    }
    # The comparison the CI test makes, here too: by conversation, as a multiset.
    ours = sorted(json.dumps([{"role": m["role"], "content": m["content"]} for m in r["messages"]]) for r in sft)
    theirs = sorted(json.dumps(t["conversations"]) for t in trials.values())
    same = sum(a == b for a, b in zip(ours, theirs, strict=False))
    print(f"harbor traces export: {len(trials)} conversations, {same} of {len(sft)} equal to sft.jsonl")
    if ours != theirs:
        failures += 1
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(
        json.dumps(
            {
                "$comment": (
                    f"harbor=={version} traces export (episodes=last and all) over "
                    "write_harbor_jobs(tests.export.samples.suite()), recorded by "
                    "scripts/record_harbor_traces.py; do not edit by hand"
                ),
                "trials": dict(sorted(trials.items())),
            },
            indent=2,
            sort_keys=True,
            ensure_ascii=False,
        )
        + "\n",
        encoding="utf-8",
    )
    print(f"wrote {GOLDEN.relative_to(REPO)}; {failures} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
