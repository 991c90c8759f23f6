"""The end-of-run summary: computed from the store, so it always agrees with it.

Counts (episodes, solved tasks, pass@k, tokens, infrastructure errors, permanent errors)
cover every job of the stage in the run directory, across resumes. A permanent error (the
task's or the config's fault, :func:`~rsr_async.errors.is_permanent_error`) is stored as
``failed`` but is no verdict on the model: it is counted and named apart, never in
``failed``, pass@k or the models' graded episodes. Throughput (``wall_s``,
``episodes_per_min``, ``peak_sandboxes``) and the time by stage (``stages``,
``export_s``) cover this invocation only.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from ..analysis.passk import mean_pass_at_k
from ..engine.reader import JobRow, RunReader
from ..errors import PERMANENT_PREFIX, is_permanent_error
from ..phases import PhaseSummary, render_phases, summarise_timings
from ..schema import EpisodeResult, EpisodeTiming, Usage

__all__ = [
    "HarnessSummary",
    "RunSummary",
    "StageTime",
    "render_summary",
    "render_summary_phases",
    "render_summary_stages",
    "stage_times",
    "summarise",
    "write_summary",
]

STAGE_ORDER = ("discover", "plan", "critique", "execute", "audit")
"""The job stages in pipeline order (how ``stages`` is listed)."""


class StageTime(msgspec.Struct, frozen=True, kw_only=True):
    """When one stage's jobs of this invocation ran, in seconds from its start.

    Stages overlap (the pipeline is a job graph without barriers: an execution starts as
    soon as its runbook is accepted), so spans add up to more than the wall time.
    """

    jobs: int
    """Jobs of the stage that ended (any final status) during this invocation."""
    first_start_s: float
    """When the first of them started."""
    last_end_s: float
    """When the last of them ended."""
    busy_s: float
    """Their durations summed (the stage's work, however many ran at once)."""
    median_s: float
    """The median job's duration."""

    @property
    def span_s(self) -> float:
        return self.last_end_s - self.first_start_s


def stage_times(rows: Sequence[JobRow], *, since: float) -> dict[str, StageTime]:
    """Per stage, the jobs of ``rows`` that started at or after ``since`` (wall clock)
    and ended: when they ran relative to ``since``, summed and median durations."""
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        if row.started_at is None or row.finished_at is None or row.started_at < since:
            continue
        spans[row.stage].append((row.started_at - since, row.finished_at - since))
    order = {stage: i for i, stage in enumerate(STAGE_ORDER)}
    times: dict[str, StageTime] = {}
    for stage in sorted(spans, key=lambda s: (order.get(s, len(order)), s)):
        runs = spans[stage]
        durations = sorted(end - start for start, end in runs)
        mid = len(durations) // 2
        median = durations[mid] if len(durations) % 2 else (durations[mid - 1] + durations[mid]) / 2
        times[stage] = StageTime(
            jobs=len(runs),
            first_start_s=round(min(start for start, _ in runs), 3),
            last_end_s=round(max(end for _, end in runs), 3),
            busy_s=round(sum(durations), 3),
            median_s=round(median, 3),
        )
    return times


class HarnessSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One harness's share of a run (the paper compares harnesses and their union)."""

    episodes: int
    """Jobs of this harness with a final status."""
    succeeded: int
    infra_errors: int
    solved_tasks: int
    pass_at_1: float
    pass_at_k: float
    pass_at_k_tasks: int
    permanent_errors: int = 0
    """Episodes ended by the task's or the config's fault (not graded, not retried)."""


class RunSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What ``summary.json`` holds (snake_case keys)."""

    stage: str
    model: str
    scripted_model: bool
    """True when the answers came from the scripted stand-in (a test double, not a model)."""
    tasks: int
    attempts: int
    """Attempts per (task, harness) asked for."""
    episodes: int
    """Jobs of the stage with a final status (succeeded, failed, infra_error, cancelled)."""
    succeeded: int
    failed: int
    """Graded episodes the model failed (permanent errors are not among them)."""
    infra_errors: int
    cancelled: int
    pending: int
    solved_tasks: int
    """Tasks of the dataset with at least one successful episode."""
    pass_at_1: float
    pass_at_k: float
    k: int
    pass_at_k_tasks: int
    """Tasks both pass@ figures average over: those with at least k finished attempts
    (infrastructure errors and cancelled attempts are not samples)."""
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cached_share: float
    wall_s: float
    episodes_this_run: int
    episodes_per_min: float
    peak_sandboxes: int
    models: dict[str, int] = msgspec.field(default_factory=dict)
    """Graded episodes (succeeded or failed) per model name their results record; ""
    counts results that record none (written before results carried their provenance)."""
    scripted_episodes: int = 0
    harnesses: dict[str, HarnessSummary] = msgspec.field(default_factory=dict)
    """Per harness: episodes, succeeded, solved tasks, pass@1, pass@k."""
    union_solved: list[str] = msgspec.field(default_factory=list)
    """Tasks solved by at least one harness (the union the paper's discovery gains use)."""
    """Graded episodes whose results say the scripted stand-in produced them."""
    nothing_finished: str | None = None
    """Set when no episode of the stage was graded (none succeeded or failed): why, e.g.
    ``no episode finished: 36 infra errors (first: ...)``. The pass@ figures are then
    meaningless (they average over no task) and readers should show this instead."""
    permanent_errors: int = 0
    """Episodes ended by a permanent error: the task's or the config's fault (a bad image
    reference, a Dockerfile that fails to build). Never retried, not even on resume, never
    graded: fix the task, then run it in a new run directory."""
    permanent_error_tasks: dict[str, str] = msgspec.field(default_factory=dict)
    """Task → the first permanent error of its episodes (the cause, without the prefix)."""
    open_s: float = 0.0
    """Of ``wall_s``: opening the model servers (or starting the simulators), the Docker
    hosts' checks and the start-up sweep, before any image or sandbox."""
    prewarm_s: float = 0.0
    """Of ``wall_s``: building or checking the images and starting the first wave's
    sandboxes before any episode starts (0 with ``--no-prewarm``)."""
    phases: PhaseSummary | None = None
    """Where the episodes' time went, by phase (mean, median, p90 seconds per episode
    over every timed episode of the stage in the store); None when none is timed."""
    pipeline: dict[str, Any] | None = None
    """The rewrite pipeline's figures (:func:`~rsr_async.rsr.figures.pipeline_figures`)
    when ``run`` ran stages after discover."""
    stages: dict[str, StageTime] = msgspec.field(default_factory=dict)
    """This invocation's time by job stage (discover, plan, critique, execute, audit):
    :func:`stage_times`."""
    export_s: float | None = None
    """Seconds this invocation spent writing the export (after the jobs); None when it
    wrote none."""


def summarise(
    store: RunReader,
    *,
    stage: str,
    model: str,
    scripted_model: bool,
    tasks: Sequence[str],
    attempts: int,
    wall_s: float,
    episodes_this_run: int,
    peak_sandboxes: int,
) -> RunSummary:
    counts = store.counts(stage=stage)
    per_task: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    names = set(tasks)
    permanent: list[JobRow] = []
    for row in store.rows(stage=stage, status=("succeeded", "failed")):
        if row.status == "failed" and is_permanent_error(row.error):
            permanent.append(row)  # not a sample: the model never had its chance
            continue
        if row.task not in names:
            continue
        entry = per_task[(row.task, row.harness)]
        entry[0] += 1
        entry[1] += row.status == "succeeded"
    solved = {task for (task, _), (_, c) in per_task.items() if c > 0}
    usage = Usage()
    models: Counter[str] = Counter()
    scripted = 0
    timings: list[EpisodeTiming] = []
    for result in store.results(stage=stage):
        usage = usage + result.usage
        if isinstance(result, EpisodeResult) and result.status in ("succeeded", "failed"):
            timings.append(result.timing)
        if (
            result.status in ("succeeded", "failed")
            and result.key.task in names
            and not is_permanent_error(result.error)
        ):
            models[result.model] += 1
            scripted += result.scripted
    k = max(1, attempts)
    pairs = [(n, c) for n, c in per_task.values() if n >= k]  # one task set for both
    final = counts["succeeded"] + counts["failed"] + counts["infra_error"] + counts["cancelled"]
    finals: dict[str, Counter[str]] = defaultdict(Counter)
    permanent_of: Counter[str] = Counter()  # kept apart: a permanent error is also `failed`
    for row in store.rows(stage=stage):
        if row.task in names and row.status in ("succeeded", "failed", "infra_error", "cancelled"):
            finals[row.harness][row.status] += 1
            permanent_of[row.harness] += is_permanent_error(row.error)
    harnesses: dict[str, HarnessSummary] = {}
    for harness in sorted({h for _, h in per_task} | set(finals)):
        mine = {t: nc for (t, h), nc in per_task.items() if h == harness}
        own_pairs = [(n, c) for n, c in mine.values() if n >= k]
        harnesses[harness] = HarnessSummary(
            episodes=sum(finals[harness].values()),
            succeeded=finals[harness]["succeeded"],
            infra_errors=finals[harness]["infra_error"],
            solved_tasks=sum(1 for _, c in mine.values() if c > 0),
            pass_at_1=mean_pass_at_k(own_pairs, 1),
            pass_at_k=mean_pass_at_k(own_pairs, k),
            pass_at_k_tasks=len(own_pairs),
            permanent_errors=permanent_of[harness],
        )
    causes: dict[str, str] = {}
    for row in permanent:
        causes.setdefault(row.task, (row.error or "").removeprefix(PERMANENT_PREFIX)[:500])
    graded = counts["succeeded"] + counts["failed"] - len(permanent)
    return RunSummary(
        nothing_finished=None if graded else _why_nothing_finished(store, stage, counts, permanent),
        stage=stage,
        model=model,
        scripted_model=scripted_model,
        tasks=len(names),
        attempts=attempts,
        episodes=final,
        succeeded=counts["succeeded"],
        failed=counts["failed"] - len(permanent),
        infra_errors=counts["infra_error"],
        cancelled=counts["cancelled"],
        pending=counts["pending"] + counts["running"],
        solved_tasks=len(solved),
        pass_at_1=mean_pass_at_k(pairs, 1),
        pass_at_k=mean_pass_at_k(pairs, k),
        k=k,
        pass_at_k_tasks=len(pairs),
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cached_tokens=usage.cached_tokens,
        cached_share=usage.cached_share,
        wall_s=wall_s,
        episodes_this_run=episodes_this_run,
        episodes_per_min=episodes_this_run / (wall_s / 60) if wall_s > 0 else 0.0,
        peak_sandboxes=peak_sandboxes,
        models=dict(sorted(models.items())),
        scripted_episodes=scripted,
        harnesses=harnesses,
        union_solved=sorted(solved),
        permanent_errors=len(permanent),
        permanent_error_tasks=dict(sorted(causes.items())),
        phases=summarise_timings(timings),
    )


_ERROR_CHARS = 300
"""How much of the first error's message the summary quotes."""


def _why_nothing_finished(
    store: RunReader, stage: str, counts: dict[str, int], permanent: Sequence[JobRow] = ()
) -> str:
    """``no episode finished: 36 infra errors (first: ...), 2 cancelled``."""
    parts: list[str] = []
    if permanent:
        first_error = " ".join((permanent[0].error or "").split())[:300]
        parts.append(f"{len(permanent)} permanent error{'s' if len(permanent) > 1 else ''}"
                     f" (first: {first_error})")
    for status, name in (("infra_error", "infra error"), ("cancelled", "cancelled"),
                         ("pending", "pending"), ("running", "running")):
        n = counts.get(status, 0)
        if not n:
            continue
        text = f"{n} {name}{'s' if n > 1 and status == 'infra_error' else ''}"
        if status in ("infra_error", "cancelled"):
            first = next((row.error for row in store.rows(stage=stage, status=status) if row.error), None)
            if first:
                one_line = " ".join(first.split())
                if len(one_line) > _ERROR_CHARS:
                    one_line = one_line[:_ERROR_CHARS] + "…"
                text += f" (first: {one_line})"
        parts.append(text)
    return "no episode finished: " + (", ".join(parts) if parts else "no episode was run")


def write_summary(summary: RunSummary, run_dir: Path) -> Path:
    path = run_dir / "summary.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_bytes(msgspec.json.format(msgspec.json.encode(summary), indent=2) + b"\n")
    tmp.replace(path)  # atomic: a reader never sees half a summary
    return path


def render_summary_stages(summary: RunSummary) -> str:
    """This invocation's time by stage, one line each; "" when no job ended."""
    if not summary.stages:
        return ""
    lines = [
        "time by stage (seconds from the start of this run; stages overlap):",
        f"  {'stage':<10} {'jobs':>6} {'first start':>12} {'last end':>10} {'span':>8} {'median job':>11} {'busy':>9}",
    ]
    for stage, t in summary.stages.items():
        lines.append(
            f"  {stage:<10} {t.jobs:>6} {t.first_start_s:>12.1f} {t.last_end_s:>10.1f} {t.span_s:>8.1f}"
            f" {t.median_s:>11.2f} {t.busy_s:>9.1f}"
        )
    setup = f"  start-up {summary.open_s:.1f} s, prewarm {summary.prewarm_s:.1f} s"
    if summary.export_s is not None:
        setup += f", export {summary.export_s:.1f} s"
    lines.append(setup + f"; jobs and start-up {summary.wall_s:.1f} s of wall time")
    return "\n".join(lines)


def render_summary(summary: RunSummary) -> object:
    """A rich Table of the summary."""
    from rich.table import Table

    table = Table(title=f"{summary.stage}: {summary.model}", show_header=False)
    rows = [
        ("tasks", f"{summary.tasks}"),
        ("attempts per task", f"{summary.attempts}"),
        ("episodes", f"{summary.episodes} ({summary.succeeded} succeeded, {summary.failed} failed)"),
        ("solved tasks", f"{summary.solved_tasks} / {summary.tasks}"),
        *(
            [("pass@1", summary.nothing_finished)]
            if summary.nothing_finished
            else [
                ("pass@1", f"{summary.pass_at_1:.3f} over {summary.pass_at_k_tasks} tasks"),
                *([(f"pass@{summary.k}", f"{summary.pass_at_k:.3f}")] if summary.k > 1 else []),
            ]
        ),
        ("tokens (prompt / completion)", f"{summary.prompt_tokens:,} / {summary.completion_tokens:,}"),
        ("cached share of prompt tokens", f"{summary.cached_share:.1%}"),
        ("episodes/min (this run)", f"{summary.episodes_per_min:.1f}"),
        ("wall time (this run)", f"{summary.wall_s:.1f} s (start-up {summary.open_s:.1f} s, "
                                 f"images and prewarm {summary.prewarm_s:.1f} s)"),
        ("peak live sandboxes", f"{summary.peak_sandboxes}"),
        ("models (graded episodes)", _models_text(summary.models)),
        ("scripted stand-in episodes", f"{summary.scripted_episodes} / {sum(summary.models.values())}"),
        ("infrastructure errors", f"{summary.infra_errors}"),
        ("permanent errors (task/config)", _permanent_text(summary)),
        ("cancelled / unfinished", f"{summary.cancelled} / {summary.pending}"),
    ]
    if summary.phases is not None:
        rows.append(("episodes timed by phase", f"{summary.phases.episodes} "
                     f"({summary.phases.prewarmed} prewarmed; seconds per phase below)"))
    for name, value in rows:
        table.add_row(name, value)
    if summary.scripted_model or summary.scripted_episodes:
        table.caption = "scripted stand-in model: a test double, not a model's results"
    return table


def render_summary_phases(summary: RunSummary) -> str:
    """The per-phase table printed under the summary ("" when no episode is timed)."""
    if summary.phases is None:
        return ""
    return "seconds per episode, by phase:\n" + render_phases(summary.phases)


def _models_text(models: dict[str, int]) -> str:
    if not models:
        return "-"
    return ", ".join(f"{name or 'unrecorded'} × {count}" for name, count in models.items())


def _permanent_text(summary: RunSummary) -> str:
    """The count, then each task with its cause's first line (never retried, never graded)."""
    if not summary.permanent_errors:
        return "0"
    lines = [f"{summary.permanent_errors} (not graded, not retried: fix the task)"]
    for task, cause in summary.permanent_error_tasks.items():
        lines.append(f"{task}: {cause.splitlines()[0][:160] if cause else '?'}")
    return "\n".join(lines)
