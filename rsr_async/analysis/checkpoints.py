"""The checkpoint table (the paper's Table 5): per benchmark, checkpoints side by side.

Pure: rollouts in, a :class:`CheckpointTable` out, rendered as Markdown
(:func:`render_markdown`) or JSON (:func:`encode_table`). A rollout's ``harness`` names
the checkpoint that ran it (the ``eval`` command relabels its stores' rollouts so; a
results JSONL of another tool may say so directly). Every figure is
:func:`~.outcomes.outcomes` over one benchmark's tasks with ``k`` = the runs per task:

- **pass@R** and **mean of R runs** (± sample std) over the tasks with R graded runs;
- **process reward** over the tasks that give partial credit, with their count;
- **tasks scored** (those with R graded runs) and **infra errors excluded** (with
  cancelled runs): infrastructure failures are never samples, but they are shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import msgspec

from .outcomes import OUTCOME_DEFINITIONS, Outcome, outcomes
from .rollouts import Rollout

__all__ = [
    "SCRIPTED_LABEL",
    "BenchmarkOutcomes",
    "Checkpoint",
    "CheckpointTable",
    "checkpoint_table",
    "encode_table",
    "render_markdown",
]

SCRIPTED_LABEL = "scripted stand-in: a test double, not a model's results"
"""What the table says of a checkpoint whose answers came from the scripted stand-in."""


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True):
    """One column of the table: a served checkpoint and what is known of its server."""

    name: str
    """The column's name (``--model NAME=URL``)."""
    url: str = ""
    model: str = ""
    """The model name the server reported (``model_path``), "" if unknown."""
    scripted: bool = False
    """True when the answers came from the scripted stand-in (a test double, not a model)."""
    simulator: bool = False
    """True when the server is this package's SGLang simulator (it serves the stand-in)."""
    run_dir: str = ""
    """Where this checkpoint's episodes are stored (a run directory of the engine)."""


class BenchmarkOutcomes(msgspec.Struct, frozen=True, kw_only=True):
    """One benchmark's rows: its tasks and one :class:`Outcome` per checkpoint."""

    name: str
    tasks: list[str]
    outcomes: dict[str, Outcome]
    """Checkpoint name → figures, in column order."""


class CheckpointTable(msgspec.Struct, frozen=True, kw_only=True):
    """What ``eval.json`` holds."""

    harness: str
    runs: int
    """R: runs per task and checkpoint (the k of pass@k and of mean of k runs)."""
    checkpoints: list[Checkpoint]
    benchmarks: list[BenchmarkOutcomes]
    notes: list[str]
    """Caveats a reader must see (scripted stand-ins, excluded infrastructure errors)."""
    definitions: str = OUTCOME_DEFINITIONS


def checkpoint_table(
    rollouts: Iterable[Rollout],
    benchmarks: Mapping[str, Sequence[str]],
    checkpoints: Sequence[Checkpoint],
    *,
    runs: int,
    harness: str = "terminus2",
) -> CheckpointTable:
    """The table for ``checkpoints`` (columns, in order) over ``benchmarks`` (benchmark
    name → its task names; rows, in order). Rollouts of other checkpoints or of tasks in
    no benchmark are ignored; a checkpoint without rollouts on a task still counts it."""
    names = [c.name for c in checkpoints]
    if len(set(names)) != len(names):
        raise ValueError(f"checkpoint_table: checkpoint names repeat: {names}")
    owner: dict[str, str] = {}
    for bench, tasks in benchmarks.items():
        for task in tasks:
            if owner.setdefault(task, bench) != bench:
                raise ValueError(
                    f"checkpoint_table: task {task!r} is in benchmarks {owner[task]!r} and {bench!r}"
                )
    wanted = set(names)
    per_bench: dict[str, list[Rollout]] = {bench: [] for bench in benchmarks}
    for rollout in rollouts:
        home = owner.get(rollout.task)
        if home is not None and rollout.harness in wanted:
            per_bench[home].append(rollout)
    rows = [
        BenchmarkOutcomes(
            name=bench,
            tasks=sorted(tasks),
            outcomes={
                o.group: o
                for o in outcomes(per_bench[bench], list(tasks), k=runs, groups=names)
            },
        )
        for bench, tasks in benchmarks.items()
    ]
    return CheckpointTable(
        harness=harness,
        runs=runs,
        checkpoints=list(checkpoints),
        benchmarks=rows,
        notes=_notes(checkpoints, rows),
    )


def _notes(checkpoints: Sequence[Checkpoint], rows: Sequence[BenchmarkOutcomes]) -> list[str]:
    notes = []
    for checkpoint in checkpoints:
        if checkpoint.scripted:
            server = " (served by the rsr_async simulator)" if checkpoint.simulator else ""
            notes.append(f"{checkpoint.name}: {SCRIPTED_LABEL}{server}")
    infra = sum(o.infra_errors for row in rows for o in row.outcomes.values())
    cancelled = sum(o.cancelled for row in rows for o in row.outcomes.values())
    if infra or cancelled:
        notes.append(
            f"{_count(infra, 'infra error')} and {_count(cancelled, 'cancelled run')} are "
            "excluded from the figures; rerun the same command to retry them"
        )
    return notes


def encode_table(table: CheckpointTable) -> bytes:
    """``eval.json``: the table as indented JSON (checkpoints keep their column order)."""
    return msgspec.json.format(msgspec.json.encode(table), indent=2) + b"\n"


def render_markdown(table: CheckpointTable) -> str:
    """``eval.md``: one row group per benchmark, one column per checkpoint."""
    k = table.runs
    heads = [
        _cell(c.name + (" (scripted stand-in)" if c.scripted else "")) for c in table.checkpoints
    ]
    lines = [
        f"# Checkpoint evaluation: plain Terminus 2, {k} runs per task",
        "",
        "| benchmark | metric | " + " | ".join(heads) + " |",
        "|---|---|" + "---:|" * len(heads),
    ]
    metrics = [
        (f"pass@{k} (%)", _pass_at_k),
        (f"mean of {k} runs (%, ± std)", _mean_of_k),
        ("process reward (partial-credit tasks)", _process_reward),
        (f"tasks scored (with {k} graded runs)", _scored),
        ("infra errors excluded", _infra),
    ]
    for row in table.benchmarks:
        for i, (label, cell) in enumerate(metrics):
            first = f"{_cell(row.name)} ({_count(len(row.tasks), 'task')})" if i == 0 else ""
            values = [cell(row.outcomes[c.name]) for c in table.checkpoints]
            lines.append(f"| {first} | {label} | " + " | ".join(values) + " |")
    lines += ["", "Checkpoints:", ""]
    for c in table.checkpoints:
        model = f"model `{c.model}`" if c.model else "model name not reported"
        where = f" at {c.url}" if c.url else ""
        sim = " (the rsr_async simulator)" if c.simulator else ""
        lines.append(f"- `{c.name}`: {model}{where}{sim}")
    if table.notes:
        lines += ["", "Notes:", "", *(f"- **{note}**" for note in table.notes)]
    lines += [
        "",
        f"n/a: no task has {k} graded runs (pass@{k}, mean), or none gives partial credit "
        "(process reward).",
        "",
        f"Definitions (k = {k}): {table.definitions}",
        "",
    ]
    return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def _pass_at_k(o: Outcome) -> str:
    return _percent(o.pass_at_k)


def _mean_of_k(o: Outcome) -> str:
    if o.mean_of_k is None:
        return "n/a"
    spread = "" if o.std_of_k is None else f" ± {100 * o.std_of_k:.1f}"
    return _percent(o.mean_of_k) + spread


def _process_reward(o: Outcome) -> str:
    value = "n/a" if o.process_reward is None else f"{o.process_reward:.3f}"
    return f"{value} ({_count(o.partial_credit_tasks, 'task')})"


def _scored(o: Outcome) -> str:
    return f"{o.tasks_scored}/{o.tasks}"


def _infra(o: Outcome) -> str:
    return f"{o.infra_errors}" + (f" (+{o.cancelled} cancelled)" if o.cancelled else "")
