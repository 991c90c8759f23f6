"""Rollouts and task facts read from a run directory of this engine.

Reading never blocks a live run: the store is opened read-only (WAL readers run beside
the writer) and results are streamed in chunks through a decoder that keeps only the
fields the tables use (the trajectory is skipped, not built).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from ..engine.reader import RunReader
from ..errors import ConfigError, StoreError, is_permanent_error
from ..export import collect_records, written_keys
from ..schema import EpisodeStyle, JobKey, JobStatus, Task
from .rollouts import Rollout, TaskInfo
from .tables import (
    AnalysisInput,
    RewriteData,
    RewriteExecution,
    harness_order,
    tasks_with_rollouts,
)

__all__ = ["read_run", "source_id", "store_rewrites", "store_rollouts", "store_tasks", "subset_of"]


class _EpisodeDetails(msgspec.Struct, kw_only=True, tag="episode", tag_field="kind"):
    """The fields of an ``EpisodeResult`` the tables read (everything else is skipped)."""

    key: JobKey
    status: JobStatus
    reward: float | None = None
    rewards: dict[str, float] = msgspec.field(default_factory=dict)
    turns: int = 0
    style: EpisodeStyle = EpisodeStyle()
    scripted: bool = False
    error: str | None = None


_FINAL = ("succeeded", "failed", "infra_error", "cancelled")


def store_rollouts(store: RunReader, *, stage: str = "discover") -> list[Rollout]:
    """Every finished episode of ``stage`` as a :class:`Rollout` (pending ones are not
    rollouts yet; a permanent error becomes an ungraded ``infra_error`` rollout).
    ``harness`` is the key's harness: for ``execute`` jobs, the source's."""
    out: list[Rollout] = []
    for result in store.outputs(_EpisodeDetails, stage=stage, status=_FINAL, light=True):
        key = result.key
        status = result.status
        if status not in _FINAL:
            continue
        if status == "failed" and is_permanent_error(result.error):
            # The task's or the config's fault, stored `failed` so no resume retries it:
            # never a sample. Counted apart with the other ungraded attempts.
            status = "infra_error"
        out.append(
            Rollout(
                task=key.task,
                harness=key.harness,
                attempt=key.attempt,
                status=status,  # type: ignore[arg-type]  # narrowed by _FINAL above
                reward=result.reward,
                rewards=result.rewards or None,
                turns=result.turns,
                style=result.style,
            )
        )
    return out


def subset_of(task: Task, subset_key: str | None) -> str:
    """The task's value for ``--subset-key metadata.KEY`` (dots go deeper), "" if absent."""
    if not subset_key:
        return ""
    head, _, path = subset_key.partition(".")
    if head != "metadata" or not path:
        raise ConfigError(
            f"--subset-key {subset_key!r}: expected metadata.KEY (a key of the tasks' "
            "[metadata] table, e.g. metadata.source)"
        )
    if path in ("category", "difficulty"):  # the loader lifts these out of [metadata]
        return str(getattr(task, path))
    value: Any = task.metadata
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return ""
        value = value[part]
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


def store_tasks(
    store: RunReader, *, stages: Iterable[str] = ("discover",), subset_key: str | None = None
) -> dict[str, TaskInfo]:
    """The tasks the run's ``stages`` hold jobs for, with domain (category) and subset."""
    infos: dict[str, TaskInfo] = {}
    for stage in stages:
        for name, spec in store.task_specs(stage=stage).items():
            if name not in infos:
                task = spec.task
                infos[name] = TaskInfo(
                    name=name, domain=task.category, subset=subset_of(task, subset_key)
                )
    return infos


class _Command(msgspec.Struct):
    keystrokes: str


class _MessageView(msgspec.Struct):
    origin: str
    commands: list[_Command] = msgspec.field(default_factory=list)


class _TrajectoryView(msgspec.Struct):
    messages: list[_MessageView] = msgspec.field(default_factory=list)


class _ExecutionView(msgspec.Struct, kw_only=True, tag="episode", tag_field="kind"):
    """A successful execution's key and its commands per model turn (nothing else)."""

    key: JobKey
    trajectory: _TrajectoryView | None = None


class _VerdictView(msgspec.Struct):
    subject: str
    accepted: bool


class _CritiqueView(msgspec.Struct, kw_only=True, tag="critique", tag_field="kind"):
    key: JobKey
    status: JobStatus
    verdict: _VerdictView | None = None


class _AuditView(msgspec.Struct, kw_only=True, tag="audit", tag_field="kind"):
    key: JobKey
    status: JobStatus
    verdict: _VerdictView | None = None


def source_id(task: str, harness: str, attempt: int) -> str:
    """How the rewrite tables name a source: ``task/harness/aN``."""
    return f"{task}/{harness}/a{attempt}"


def store_rewrites(store: RunReader, rollouts: Iterable[Rollout]) -> RewriteData | None:
    """The rewrite stages' records, or None when the run has no rewrite jobs."""
    executions = store.rows(stage="execute")
    plans = store.counts(stage="plan")
    if not executions and not any(plans.values()):
        return None
    sources = {
        source_id(r.task, r.harness, r.attempt): r.turns or 0 for r in rollouts if r.passed
    }
    runbooks: dict[str, int] = {}
    for critique in store.outputs(_CritiqueView, stage="critique", status="succeeded", light=True):
        if critique.verdict is not None and critique.verdict.accepted:
            key = critique.key
            sid = source_id(key.task, key.harness, key.attempt)
            runbooks[sid] = runbooks.get(sid, 0) + 1
    accepted = {
        audit.verdict.subject
        for audit in store.outputs(_AuditView, stage="audit", status="succeeded", light=True)
        if audit.verdict is not None and audit.verdict.accepted
    }
    # Kept = what the export writes (its dedupe, one function for every count of it).

    export = written_keys(collect_records(store))
    kept = accepted & set(export["written"].get("rewrite", ()))
    duplicates = accepted & set(export["duplicates"].get("rewrite", ()))
    commands: dict[str, tuple[tuple[str, ...], ...]] = {}
    for view in store.outputs(_ExecutionView, stage="execute", status="succeeded"):
        messages = view.trajectory.messages if view.trajectory is not None else []
        commands[str(view.key)] = tuple(
            tuple(c.keystrokes for c in m.commands) for m in messages if m.origin == "model"
        )
    return RewriteData(
        sources=sources,
        runbooks=runbooks,
        executions=[
            RewriteExecution(
                key=row.key,
                task=row.task,
                source=source_id(row.task, row.harness, row.attempt),
                runbook=row.runbook,
                status=row.status,
                turns=row.turns or 0,
                kept=row.status == "succeeded" and row.key in kept,
                duplicate=row.status == "succeeded" and row.key in duplicates,
                commands=commands.get(row.key, ()),
            )
            for row in executions
            if row.status in _FINAL
        ],
    )


def read_run(
    run_dir: str | Path, *, subset_key: str | None = None, k: int | None = None
) -> AnalysisInput:
    """Everything the tables need from one run directory (opened read-only)."""
    store = RunReader.open_readonly(run_dir)
    try:
        config = store.config() or {}
        run = config.get("run", {}) if isinstance(config.get("run"), dict) else {}
        rollouts = store_rollouts(store, stage="discover")
        if not rollouts and not store.rows(stage="discover"):
            raise StoreError(f"{run_dir}: the run has no discover episodes to analyse")
        known = store_tasks(store, stages=("discover",), subset_key=subset_key)
        harnesses = harness_order({r.harness for r in rollouts}, run.get("harnesses", ()))
        attempts = int(run.get("attempts", 0)) or max((r.attempt + 1 for r in rollouts), default=1)
        scripted = "scripted" in store.meta().get("model", "")
        rewrites = store_rewrites(store, rollouts)
    finally:
        store.close()
    return AnalysisInput(
        rollouts=rollouts,
        tasks=tasks_with_rollouts(rollouts, known),
        harnesses=harnesses,
        k=k or attempts,
        origin=f"run directory {Path(run_dir).resolve()}",
        scripted=scripted,
        rewrites=rewrites,
    )
