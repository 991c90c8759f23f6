"""The SFT set as a Harbor job directory, so Harbor's own tools read our data unchanged.

Layout of ``out_dir`` (see :func:`write_harbor_jobs`)::

    <job>/config.json                       Harbor's JobConfig: agent terminus-2, raw_content
    <job>/result.json                       Harbor's JobResult: trial counts, rewards
    <job>/<task>__<id>/config.json          Harbor's TrialConfig, one per trajectory
    <job>/<task>__<id>/result.json          Harbor's TrialResult (task, agent, reward)
    <job>/<task>__<id>/agent/trajectory.json  the trajectory's ATIF document (as in atif/)
    manifest.json                           ours: what was written, with sha256 (Harbor
                                            looks only at directories)

``harbor view OUT_DIR`` lists the job and its trials, and ``harbor traces export --path
OUT_DIR --episodes last`` gives one conversation per trajectory equal to its ``sft.jsonl``
row: the ATIF documents are written in Terminus 2's raw-content mode (no ``tool_calls``,
see :mod:`.atif`). ``scripts/record_harbor_traces.py`` checks both with Harbor 0.26.0's
own code. The rows are exactly those of ``sft.jsonl`` (the same dedupe and split), one
trial each; trial names are ``<task>__<first 7 hex of sha256(key)>`` (Harbor's shape,
``<task>__<7 characters>``), and every other id is derived from the job key, so only the
job's ``started_at``/``finished_at`` (when the directory was written) differ between two
writes of the same store.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .atif import HARBOR_AGENTS
from .records import ExportRecord
from .writer import (
    MANIFEST_VERSION,
    RejectedMode,
    _atif_bytes,
    _json_bytes,
    _Plan,
    _Row,
    _write_atomically,
)

__all__ = ["JOB_NAME", "write_harbor_jobs"]

JOB_NAME = "rsr-export"
SOURCE = "rsr_async"
_NAMESPACE = uuid.UUID("3b4f6f8e-4c1d-5a55-9d4e-2a1c7d0b9e61")
"""uuid5 namespace of every id written here, so ids follow from keys."""


def _trial_name(task: str, key: str) -> str:
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", task).strip("._-")[:32] or "task"
    return f"{readable}__{hashlib.sha256(key.encode()).hexdigest()[:7]}"


def _agent_config(model: str) -> dict[str, Any]:
    name, _ = HARBOR_AGENTS["terminus2"]
    # The configuration under which Harbor's Terminus 2 writes trajectories like ours.
    return {"name": name, "model_name": model, "kwargs": {"trajectory_config": {"raw_content": True}}}


def _trial_files(row: _Row, key_rows: list[_Row], split: dict[str, str], job: str) -> dict[str, bytes]:
    r = row.record
    trial = _trial_name(r.task, r.key)
    name, version = HARBOR_AGENTS["terminus2"]
    task = {"path": f"tasks/{r.task}", "source": SOURCE}
    config = {"task": task, "trial_name": trial, "trials_dir": job, "agent": _agent_config(r.model)}
    atif = _atif_bytes(key_rows, split)
    totals = json.loads(atif)["final_metrics"]
    result: dict[str, Any] = {
        "id": str(uuid.uuid5(_NAMESPACE, r.key)),
        "task_name": r.task,
        "trial_name": trial,
        "trial_uri": f"rsr_async:{r.key}",
        "task_id": {"path": task["path"]},
        "source": SOURCE,
        "task_checksum": "",  # the task directory's checksum is not in the store
        "config": config,
        "agent_info": {"name": name, "version": version, "model_info": {"name": r.model}},
        "agent_result": {
            "n_input_tokens": totals["total_prompt_tokens"],
            "n_output_tokens": totals["total_completion_tokens"],
            "metadata": {"key": r.key, "set": r.set, "split": split[r.task], "atif": row.atif},
        },
        "verifier_result": (
            {"rewards": {"reward": r.reward}} if r.reward is not None else None
        ),
    }
    base = f"{job}/{trial}"
    return {
        f"{base}/config.json": _json_bytes(config, indent=2) + b"\n",
        f"{base}/result.json": _json_bytes(result, indent=2) + b"\n",
        f"{base}/agent/trajectory.json": atif,
    }


def write_harbor_jobs(
    records: Iterable[ExportRecord],
    out_dir: Path,
    *,
    validation_share: float = 0.1,
    seed: int = 0,
    rejected: RejectedMode = "weight",
    job_name: str = JOB_NAME,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Write the SFT set of ``records`` as one Harbor job under ``out_dir``; returns our manifest.

    The same rows as :func:`~.writer.write_export`'s ``sft.jsonl`` for the same arguments.
    Every SFT trajectory must be plain Terminus 2 (the only harness Harbor has). ``out_dir``
    is replaced whole, written beside itself and renamed into place.
    """
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", job_name):
        raise ValueError(f"harbor jobs: job name {job_name!r} is not a plain directory name")
    plan = _Plan(records, validation_share=validation_share, seed=seed, rejected=rejected)
    rows = plan.files["sft"]
    for row in rows:
        if row.record.harness not in HARBOR_AGENTS:
            raise ValueError(
                f"harbor jobs: {row.record.key!r} was run by {row.record.harness!r}; "
                "Harbor has only Terminus 2 of our harnesses"
            )
    by_key: dict[str, list[_Row]] = defaultdict(list)
    for row in plan.written:
        by_key[row.record.key].append(row)
    outputs: dict[str, bytes] = {}
    rewards: dict[str, dict[str, dict[str, list[str]]]] = defaultdict(lambda: defaultdict(dict))
    models = sorted({row.record.model for row in rows})
    for row in rows:
        outputs.update(_trial_files(row, by_key[row.record.key], plan.split, job_name))
        r = row.record
        if r.reward is not None:
            trials = rewards[r.model]["reward"].setdefault(str(float(r.reward)), [])
            trials.append(_trial_name(r.task, r.key))
    name, _ = HARBOR_AGENTS["terminus2"]
    evals = {}
    for model in models:
        mine = [row for row in rows if row.record.model == model]
        scored = [row.record.reward for row in mine if row.record.reward is not None]
        evals[f"{name}__{model.split('/')[-1]}__{SOURCE}"] = {
            "n_trials": len(mine),
            "n_errors": 0,
            "metrics": [{"reward": sum(scored) / len(scored)}] if scored else [],
            "reward_stats": rewards.get(model, {}),
        }
    at = (now or datetime.now(UTC)).isoformat()
    job_config = {
        "job_name": job_name,
        "jobs_dir": ".",
        "n_attempts": 1,
        "agents": [_agent_config(model) for model in models],
    }
    job_result = {
        "id": str(uuid.uuid5(_NAMESPACE, job_name)),
        "started_at": at,
        "updated_at": at,
        "finished_at": at,
        "n_total_trials": len(rows),
        "stats": {"n_completed_trials": len(rows), "evals": evals},
    }
    outputs[f"{job_name}/config.json"] = _json_bytes(job_config, indent=2) + b"\n"
    outputs[f"{job_name}/result.json"] = _json_bytes(job_result, indent=2) + b"\n"
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "format": "harbor-jobs",
        "job": job_name,
        "trials": len(rows),
        "rejected_turns_mode": rejected,
        "files": {
            name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
            for name, data in sorted(outputs.items())
        },
    }
    outputs["manifest.json"] = _json_bytes(manifest, indent=2) + b"\n"
    _write_atomically(Path(out_dir), outputs)
    return manifest
