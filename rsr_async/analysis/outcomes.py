"""Outcome metrics per harness (or per checkpoint): pass@k, mean over k runs, process reward.

Definitions (printed with the table):

- **pass@k** is the unbiased estimator (Chen et al. 2021) over every graded rollout of a
  task, averaged over the tasks with at least ``k`` graded rollouts.
- **mean of k runs**: run ``j`` is each task's ``j``-th graded rollout (attempt order);
  a run's score is the share of those tasks it passed; the figure is the mean of the
  ``k`` runs' scores, with their sample standard deviation. Tasks as for pass@k.
- **process reward** is the mean partial credit in [0, 1]: per task the mean of its
  graded rollouts' rewards (clamped to [0, 1]), averaged over the *partial-credit tasks*:
  those whose verifier reported several reward keys or a reward strictly between 0 and 1.
- Infrastructure errors and cancelled attempts are not samples: they are counted apart.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence

import msgspec

from .passk import pass_at_k
from .rollouts import Rollout

__all__ = ["OUTCOME_DEFINITIONS", "Outcome", "is_partial_credit", "outcomes"]

OUTCOME_DEFINITIONS = (
    "pass@k: unbiased estimator 1 - C(n-c, k)/C(n, k) over all n graded rollouts of a task "
    "(c passed), averaged over tasks with at least k graded rollouts. "
    "mean of k runs: run j is each such task's j-th graded rollout by attempt; the mean "
    "(and sample std) of the k runs' pass shares. "
    "process reward: mean partial credit in [0, 1] (rewards clamped) per task, averaged over "
    "tasks whose verifier reports several reward keys or a reward strictly between 0 and 1. "
    "Infrastructure errors and cancelled attempts are excluded from every figure and counted "
    "apart."
)


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """One group's outcome figures (a harness, or a checkpoint in ``eval``)."""

    group: str
    tasks: int
    """Tasks in the pool (with or without rollouts of this group)."""
    k: int
    tasks_scored: int
    """Tasks with at least ``k`` graded rollouts: what pass@k and mean of k average over."""
    rollouts: int
    """Graded rollouts."""
    passed: int
    infra_errors: int
    cancelled: int
    pass_at_1: float | None
    pass_at_k: float | None
    mean_of_k: float | None
    std_of_k: float | None
    partial_credit_tasks: int
    process_reward: float | None


def is_partial_credit(rollout: Rollout) -> bool:
    """Whether this rollout's verifier gives partial credit (several keys, or a fraction)."""
    if rollout.rewards is not None and len(rollout.rewards) > 1:
        return True
    return rollout.reward is not None and 0.0 < rollout.reward < 1.0


def outcomes(
    rollouts: Iterable[Rollout],
    tasks: Sequence[str],
    *,
    k: int,
    group: Callable[[Rollout], str] = lambda r: r.harness,
    groups: Sequence[str] = (),
) -> list[Outcome]:
    """One :class:`Outcome` per group (``groups`` first, in order, then any other seen).

    ``tasks`` is the pool: rollouts of other tasks are ignored, and tasks without any
    rollout still count in ``tasks``."""
    if k < 1:
        raise ValueError(f"outcomes: k must be >= 1, got {k}")
    pool = set(tasks)
    per_group: dict[str, dict[str, list[Rollout]]] = {name: {} for name in groups}
    for rollout in rollouts:
        if rollout.task in pool:
            per_group.setdefault(group(rollout), {}).setdefault(rollout.task, []).append(rollout)
    return [_outcome(name, per_task, len(pool), k) for name, per_task in per_group.items()]


def _outcome(name: str, per_task: dict[str, list[Rollout]], pool: int, k: int) -> Outcome:
    graded: dict[str, list[Rollout]] = {}
    infra = cancelled = 0
    for task, rows in per_task.items():
        rows = sorted(rows, key=lambda r: r.attempt)
        graded[task] = [r for r in rows if r.graded]
        infra += sum(r.status == "infra_error" for r in rows)
        cancelled += sum(r.status == "cancelled" for r in rows)
    scored = {t: rows for t, rows in graded.items() if len(rows) >= k}
    at_1 = [pass_at_k(len(rows), sum(r.passed for r in rows), 1) for rows in scored.values()]
    at_k = [pass_at_k(len(rows), sum(r.passed for r in rows), k) for rows in scored.values()]
    runs = [
        sum(rows[j].passed for rows in scored.values()) / len(scored) for j in range(k)
    ] if scored else []
    partial = {t: rows for t, rows in graded.items() if rows and any(map(is_partial_credit, rows))}
    credit = [
        statistics.fmean(min(1.0, max(0.0, r.reward or 0.0)) for r in rows)
        for rows in partial.values()
    ]
    return Outcome(
        group=name,
        tasks=pool,
        k=k,
        tasks_scored=len(scored),
        rollouts=sum(len(rows) for rows in graded.values()),
        passed=sum(r.passed for rows in graded.values() for r in rows),
        infra_errors=infra,
        cancelled=cancelled,
        pass_at_1=statistics.fmean(at_1) if at_1 else None,
        pass_at_k=statistics.fmean(at_k) if at_k else None,
        mean_of_k=statistics.fmean(runs) if runs else None,
        std_of_k=statistics.stdev(runs) if len(runs) > 1 else None,
        partial_credit_tasks=len(partial),
        process_reward=statistics.fmean(credit) if credit else None,
    )
