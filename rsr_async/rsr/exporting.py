"""The export stage: what the store says is kept, handed to :mod:`rsr_async.export`.

- **rewrite**: executions whose verifier passed *and* whose leak audit accepted them;
- **direct**: Terminus 2 discover successes (the paper's SFT set adds them);
- **baseline**: discover successes of every harness (the direct-SFT baseline).

Everything is read in key order, so the same store gives byte-identical files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from ..engine.store import Store
from ..errors import ConfigError
from ..export import ExportRecord, RejectedMode, write_export, write_harbor_jobs
from ..schema import AuditResult, EpisodeResult, Trajectory
from .figures import pipeline_figures
from .runtime import SCRIPTED_MARK

__all__ = ["ExportFormat", "collect_records", "default_out", "export_run"]

DIRECT_HARNESS = "terminus2"
ExportFormat = Literal["sft", "harbor-jobs"]


def default_out(format: ExportFormat) -> str:
    """The export's folder name under the run directory when ``--out`` is not given."""
    return "harbor-jobs" if format == "harbor-jobs" else "export"


def collect_records(store: Store) -> list[ExportRecord]:
    """The trajectories to export, in key order."""
    model = store.meta().get("model", "").removesuffix(SCRIPTED_MARK)
    records: list[ExportRecord] = []
    for source in store.results(stage="discover", status="succeeded"):
        if source.trajectory is None:
            continue
        for common in _conversations(source, model):
            records.append(ExportRecord(set="baseline", **common))
            if source.key.harness == DIRECT_HARNESS:
                records.append(ExportRecord(set="direct", **common))
    kept = {
        audit.verdict.subject
        for audit in store.outputs(AuditResult, stage="audit", status="succeeded")
        if audit.verdict is not None and audit.verdict.accepted
    }
    for execution in store.results(stage="execute", status="succeeded"):
        if str(execution.key) not in kept or execution.trajectory is None:
            continue
        key = execution.key
        source_key = f"discover/{key.task}/{key.harness}/a{key.attempt}/-/e-1"
        records.append(
            ExportRecord(set="rewrite", source_key=source_key, runbook=key.runbook, **_common(execution, model))
        )
    return records


def _conversations(result: EpisodeResult, model: str) -> list[dict[str, Any]]:
    """One record's fields per conversation: a multi-step episode's steps are separate
    chats (the agent starts each afresh, as under Harbor), so each step with full marks
    is its own record (``<key>#<step>``); a single-step episode is one."""
    common = _common(result, model)
    if not result.steps:
        return [common]
    trajectory = common["trajectory"]
    out: list[dict[str, Any]] = []
    for index, step in enumerate(result.steps):
        if step.reward is None or step.reward < 1.0 - 1e-9:
            continue
        end = result.steps[index + 1].first_message if index + 1 < len(result.steps) else None
        part = Trajectory(task=trajectory.task, harness=trajectory.harness, model=trajectory.model,
                          messages=trajectory.messages[step.first_message:end])
        out.append({**common, "key": f"{common['key']}#{step.name}", "trajectory": part, "reward": step.reward})
    return out


def _common(result: EpisodeResult, model: str) -> dict[str, Any]:
    assert result.trajectory is not None
    return {
        "key": str(result.key),
        "task": result.key.task,
        "harness": result.trajectory.harness,
        "trajectory": result.trajectory,
        "model": result.model or result.trajectory.model or model,
        "reward": result.reward,
    }


def export_run(
    store: Store,
    out_dir: Path,
    *,
    validation_share: float,
    seed: int,
    allow_scripted: bool,
    format: ExportFormat = "sft",
    rejected: RejectedMode = "weight",
) -> dict[str, Any]:
    """Write the run's export to ``out_dir``; returns the manifest.

    ``format``: ``sft`` (:func:`~rsr_async.export.write_export`) or ``harbor-jobs`` (the
    SFT set as a Harbor job, :func:`~rsr_async.export.write_harbor_jobs`). Refuses
    trajectories of the scripted stand-in (a test double) unless ``allow_scripted``: its
    data must never be mistaken for a model's.
    """
    identity = store.meta().get("model", "")
    if identity.endswith(SCRIPTED_MARK) and not allow_scripted:
        raise ConfigError(
            f"{store.path.parent}: this run's trajectories come from the scripted stand-in "
            "(a test double), not a model; pass --allow-scripted to export them anyway"
        )
    # Only counts go into the manifest: the cached share depends on the servers' cache
    # state, and the same store must give byte-identical files.
    records = collect_records(store)
    if format == "harbor-jobs":
        return write_harbor_jobs(
            records, out_dir, validation_share=validation_share, seed=seed, rejected=rejected
        )
    figures = {
        k: v
        for k, v in pipeline_figures(store, records=records).items()
        if k != "executor_cached_share"
    }
    return write_export(
        records,
        out_dir,
        validation_share=validation_share,
        seed=seed,
        counts={"pipeline": figures, "model": identity},
        rejected=rejected,
    )
