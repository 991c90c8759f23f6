"""What a run exports, read from its store: the records :func:`~.writer.write_export`
writes, in key order, so the same store gives byte-identical files.

- **rewrite**: executions whose verifier passed *and* whose leak audit accepted them;
- **direct**: Terminus 2 discover successes (the paper's SFT set adds them);
- **baseline**: discover successes of every harness (the direct-SFT baseline).

It lives here rather than in the pipeline (``rsr/``) because analysis counts what an
export keeps with the same function, and analysis sits below the pipeline.
"""

from __future__ import annotations

from typing import Any

from ..engine.reader import RunReader
from ..llm.base import SCRIPTED_MARK
from ..schema import AuditResult, EpisodeResult, Trajectory
from .records import ExportRecord

__all__ = ["DIRECT_HARNESS", "collect_records"]

DIRECT_HARNESS = "terminus2"
"""The harness whose discover successes form the ``direct`` set."""


def collect_records(store: RunReader) -> list[ExportRecord]:
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
