"""The rewrite pipeline's figures, computed from the store (so they always agree with it).

Printed at the end of ``run`` and stored in ``summary.json`` under ``pipeline``: sources;
runbooks proposed, rejected (by rule and by judge), regenerated, accepted; rewrite
rollouts and their pass rate; accepted by the leak audit; kept; duplicates; dropped by the
leak audit; the expansion factor (kept ÷ sources); median turns of sources vs kept
rewrites; the cached share of the executors' prompt tokens.

``kept`` is what the export writes: the rewrites the audit accepted, less those whose
public conversation is byte-identical to one already written (``kept_duplicates``,
counted apart; the export's dedupe, :func:`~rsr_async.export.written_keys`) and those
with no public conversation left. ``summary.json``, the manifest and ``analyze``'s
rewrite table all take it from here or from the same function.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from ..engine.reader import RunReader
from ..export import ExportRecord, collect_records, written_keys
from ..schema import AuditResult, CritiqueResult, EpisodeResult, PlanResult, Usage

__all__ = ["pipeline_figures", "render_figures"]


def pipeline_figures(
    store: RunReader, *, records: Sequence[ExportRecord] | None = None
) -> dict[str, Any]:
    """Counts per stage of the RSR graph in this run directory.

    ``records``: the run's export records when the caller has them already
    (:func:`~rsr_async.export.collect_records`), else they are read here.
    """
    # Light views: counts, statuses, verdicts, turns and usage only, so no trajectory or
    # raw reply of the whole run is inflated to compute them.
    sources = list(store.outputs(EpisodeResult, stage="discover", status="succeeded", light=True))
    plans = list(store.outputs(PlanResult, stage="plan", light=True))
    critiques = list(store.outputs(CritiqueResult, stage="critique", light=True))
    executions = list(store.outputs(EpisodeResult, stage="execute", light=True))
    audits = list(store.outputs(AuditResult, stage="audit", light=True))

    finished = [e for e in executions if e.status in ("succeeded", "failed")]
    passed = [e for e in finished if e.status == "succeeded"]
    kept_keys = {
        a.verdict.subject for a in audits if a.status == "succeeded" and a.verdict and a.verdict.accepted
    }
    accepted = [e for e in passed if str(e.key) in kept_keys]
    if records is None:
        records = collect_records(store)
    export = written_keys(records)
    written = set(export["written"].get("rewrite", ()))
    kept = [e for e in accepted if str(e.key) in written]
    usage = sum((e.usage for e in executions), Usage())

    def verdicts(stage: str, accepted: bool) -> int:
        return sum(
            1
            for c in critiques
            if c.verdict is not None and c.verdict.stage == stage and c.verdict.accepted is accepted
        )

    def median_turns(turns: list[int]) -> float | None:
        return float(statistics.median(turns)) if turns else None

    def infra(stage: str) -> int:
        return store.counts(stage=stage)["infra_error"]

    return {
        "sources": len(sources),
        "runbooks_proposed": sum(1 for p in plans if p.runbook is not None),
        "runbook_replies_unusable": sum(1 for p in plans if p.status == "failed"),
        "runbooks_rejected_by_rule": verdicts("deterministic", False),
        "runbooks_rejected_by_judge": verdicts("judge", False),
        "runbooks_regenerated": sum(1 for p in plans if p.key.runbook.split("d")[-1] != "0"),
        "runbooks_accepted": verdicts("judge", True),
        "critic_replies_unusable": sum(1 for c in critiques if c.status == "failed"),
        "rewrite_rollouts": len(finished),
        "rewrite_pass_rate": len(passed) / len(finished) if finished else 0.0,
        "audited": sum(1 for a in audits if a.status in ("succeeded", "failed")),
        "audit_accepted": len(accepted),
        "kept": len(kept),
        "kept_duplicates": len(export["duplicates"].get("rewrite", ())),
        "dropped_by_leak_audit": sum(
            1 for a in audits if a.status == "succeeded" and a.verdict and not a.verdict.accepted
        ),
        "audit_replies_unusable": sum(1 for a in audits if a.status == "failed"),
        "expansion_factor": len(kept) / len(sources) if sources else 0.0,
        "median_turns_sources": median_turns([s.turns for s in sources]),
        "median_turns_rewrites": median_turns([k.turns for k in kept]),
        "executor_cached_share": usage.cached_share,
        "infra_errors": {stage: infra(stage) for stage in ("plan", "critique", "execute", "audit")},
    }


def render_figures(figures: dict[str, Any]) -> str:
    """A plain-text table of :func:`pipeline_figures`."""
    lines = ["rewrite pipeline"]
    for name, value in figures.items():
        if isinstance(value, float):
            value = f"{value:.3f}"
        lines.append(f"  {name.replace('_', ' '):<28} {value}")
    return "\n".join(lines)
