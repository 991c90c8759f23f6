"""The paper's tables, computed from rollouts (any source) and, for a run directory of
this engine, from the rewrite stages.

Every table is a :class:`Table`: a name (its file stem), a title, columns, rows of plain
values, and the definitions printed with it. :mod:`.report` writes each as Markdown, CSV
and JSON and gathers them in ``report.html``; :mod:`.plots` draws the figures from the
same tables, so a figure can never disagree with its table.

Shared definitions:

- The **pool** is every task the input names (a task whose rollouts all failed on the
  infrastructure, or that has none, still counts in the denominators).
- A task is **solved** by a harness when at least one of its rollouts passed (full marks).
- **Rollouts** are graded rollouts: infrastructure errors and cancelled attempts are
  counted apart, never as failures.
- The **union** solves a task when any harness does; the **gain** is union minus the best
  single harness (absolute, and relative to that harness). Ties for best are all named.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations
from typing import Any

import msgspec

from .outcomes import OUTCOME_DEFINITIONS, outcomes
from .rollouts import Rollout, TaskInfo

__all__ = [
    "ALL_SUBSET",
    "AnalysisInput",
    "RewriteData",
    "RewriteExecution",
    "Table",
    "coverage_table",
    "domain_table",
    "equal_rollout_table",
    "exclusivity_table",
    "intersections_table",
    "outcomes_table",
    "rewrites_tables",
    "similarity_table",
    "solved_sets",
    "style_table",
]

ALL_SUBSET = "all"
"""The pooled subset's label."""


class Table(msgspec.Struct, kw_only=True):
    """One table: ``rows`` are lists of plain values (str, int, float or None)."""

    name: str
    title: str
    columns: list[str]
    rows: list[list[Any]]
    notes: list[str] = msgspec.field(default_factory=list)
    """Definitions and caveats printed with the table."""


class RewriteExecution(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One rewrite execution (``execute`` job) as the rewrite tables need it."""

    key: str
    task: str
    source: str
    """The source's id, ``task/harness/aN`` (the discover episode it was rewritten from)."""
    runbook: str
    """The runbook's id within its source (``r<i>d<d>``)."""
    status: str
    turns: int
    kept: bool
    """Passed the verifier and the leak audit, and written by the export (not a duplicate)."""
    duplicate: bool = False
    """Passed the verifier and the leak audit, but its public conversation is byte-identical
    to one the export already writes: dropped there, counted apart here."""
    commands: tuple[tuple[str, ...], ...] = ()
    """Per model turn, its commands (successful executions only: the similarity input)."""

    @property
    def passed(self) -> bool:
        return self.status == "succeeded"


class RewriteData(msgspec.Struct, frozen=True, kw_only=True):
    """What the rewrite stages of a run stored (only this engine's run directories)."""

    sources: dict[str, int]
    """Successful discover episodes (``task/harness/aN``) → their turns."""
    runbooks: dict[str, int]
    """Source id → runbooks the critic accepted."""
    executions: list[RewriteExecution]


class AnalysisInput(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the tables are computed from."""

    rollouts: list[Rollout]
    tasks: dict[str, TaskInfo]
    """The pool, with each task's domain and subset."""
    harnesses: list[str]
    """In display order; a harness named here with no rollouts still gets its rows."""
    k: int
    """The k of pass@k (attempts per task and harness)."""
    origin: str
    """Where the results came from, said on every output ("run directory X", ...)."""
    scripted: bool = False
    """The results came from the scripted stand-in (a test double)."""
    rewrites: RewriteData | None = None


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def solved_sets(rollouts: Iterable[Rollout], tasks: Iterable[str]) -> dict[str, set[str]]:
    """Harness → tasks of ``tasks`` it solved."""
    pool = set(tasks)
    out: dict[str, set[str]] = {}
    for rollout in rollouts:
        if rollout.task in pool:
            entry = out.setdefault(rollout.harness, set())
            if rollout.passed:
                entry.add(rollout.task)
    return out


def _graded_counts(rollouts: Iterable[Rollout], tasks: Iterable[str]) -> Counter[tuple[str, str]]:
    pool = set(tasks)
    return Counter((r.task, r.harness) for r in rollouts if r.graded and r.task in pool)


def _subsets(data: AnalysisInput) -> list[tuple[str, list[str]]]:
    """(label, tasks) per subset, then the pooled one; only the pooled one without subsets."""
    names = sorted(data.tasks)
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(data.tasks[name].subset or "(none)", []).append(name)
    if set(groups) == {"(none)"}:
        return [(ALL_SUBSET, names)]
    return [*sorted(groups.items()), (ALL_SUBSET, names)]


def _coverage_rows(
    data: AnalysisInput, subset: str, tasks: Sequence[str], rollouts: Sequence[Rollout]
) -> list[list[Any]]:
    solved = solved_sets(rollouts, tasks)
    graded = _graded_counts(rollouts, tasks)
    n = len(tasks)
    rows: list[list[Any]] = []
    counts = {h: len(solved.get(h, set())) for h in data.harnesses}
    for harness in data.harnesses:
        rollouts_h = sum(c for (_, h), c in graded.items() if h == harness)
        rows.append([subset, harness, n, rollouts_h, counts[harness], _ratio(counts[harness], n),
                     None, None, None])
    union = set().union(*(solved.get(h, set()) for h in data.harnesses)) if data.harnesses else set()
    best = max(counts.values(), default=0)
    leaders = [h for h in data.harnesses if counts[h] == best]
    rows.append([
        subset,
        "union",
        n,
        sum(graded.values()),
        len(union),
        _ratio(len(union), n),
        "=".join(leaders) if best > 0 else None,
        len(union) - best,
        _ratio(len(union) - best, best),
    ])
    return rows


_COVERAGE_COLUMNS = [
    "subset", "harness", "tasks", "rollouts", "solved", "solved_rate",
    "best_single", "gain_abs", "gain_rel",
]
_COVERAGE_NOTES = [
    "solved: tasks with at least one passing rollout (full marks); solved_rate: solved / tasks.",
    "rollouts: graded rollouts (infrastructure errors and cancelled attempts excluded).",
    "union row: tasks solved by any harness; best_single names the best single harness "
    "(ties joined by '='); gain_abs = union - best; gain_rel = gain_abs / best.",
]


def coverage_table(data: AnalysisInput) -> Table:
    """Table 1: tasks solved per harness and subset, the union and its gain."""
    rows = [
        row
        for subset, tasks in _subsets(data)
        for row in _coverage_rows(data, subset, tasks, data.rollouts)
    ]
    return Table(name="coverage", title="Coverage per harness (Table 1)",
                 columns=_COVERAGE_COLUMNS, rows=rows, notes=list(_COVERAGE_NOTES))


def equal_rollout_tasks(data: AnalysisInput) -> list[str]:
    """Tasks on which every harness had the same (non-zero) number of graded rollouts."""
    graded = _graded_counts(data.rollouts, data.tasks)
    out = []
    for task in sorted(data.tasks):
        counts = {graded.get((task, h), 0) for h in data.harnesses}
        if len(counts) == 1 and counts != {0}:
            out.append(task)
    return out


def equal_rollout_table(data: AnalysisInput) -> Table:
    """Table 2: coverage over the tasks where every harness had as many graded rollouts."""
    equal = set(equal_rollout_tasks(data))
    sub = msgspec.structs.replace(data, tasks={n: i for n, i in data.tasks.items() if n in equal})
    rows = [
        row
        for subset, tasks in _subsets(sub)
        for row in _coverage_rows(sub, subset, tasks, data.rollouts)
    ] if equal else []
    return Table(
        name="equal_rollouts",
        title="Equal-rollout control (Table 2)",
        columns=_COVERAGE_COLUMNS,
        rows=rows,
        notes=[
            f"Tasks on which every harness ({', '.join(data.harnesses)}) had the same number "
            f"of graded rollouts: {len(equal)} of {len(data.tasks)}.",
            *_COVERAGE_NOTES,
        ],
    )


def exclusivity_table(data: AnalysisInput) -> Table:
    """Tasks solved by exactly one, two, ... all harnesses; per-harness exclusive counts."""
    solved = solved_sets(data.rollouts, data.tasks)
    by_task: Counter[str] = Counter(t for h in data.harnesses for t in solved.get(h, set()))
    rows: list[list[Any]] = []
    n = len(data.harnesses)
    for count in range(1, n + 1):
        label = "all" if count == n and n > 1 else str(count)
        rows.append([f"solved by exactly {label}", sum(1 for c in by_task.values() if c == count)])
    rows.append(["solved by none", len(data.tasks) - len(by_task)])
    for harness in data.harnesses:
        mine = solved.get(harness, set())
        rows.append([f"only {harness}", sum(1 for t in mine if by_task[t] == 1)])
    return Table(
        name="exclusivity",
        title="Exclusivity: how many harnesses solve each task",
        columns=["group", "tasks"],
        rows=rows,
        notes=["Over the whole pool; 'only H' counts tasks that H alone solved."],
    )


def intersections_table(data: AnalysisInput) -> Table:
    """Tasks per exact combination of solving harnesses (the UpSet plot's data)."""
    solved = solved_sets(data.rollouts, data.tasks)
    members: dict[str, tuple[str, ...]] = {}
    for task in data.tasks:
        combo = tuple(h for h in data.harnesses if task in solved.get(h, set()))
        if combo:
            members[task] = combo
    counts = Counter(members.values())
    rows: list[list[Any]] = [
        ["+".join(combo), size, counts.get(combo, 0)]
        for size in range(len(data.harnesses), 0, -1)
        for combo in combinations(data.harnesses, size)
    ]
    return Table(
        name="intersections",
        title="Tasks per exact set of solving harnesses (UpSet data)",
        columns=["harnesses", "size", "tasks"],
        rows=rows,
        notes=["Each task is counted once, under exactly the harnesses that solved it."],
    )


def domain_table(data: AnalysisInput) -> Table:
    """Per domain: share of tasks each harness solved, the union, the strongest harness,
    and each harness's exclusive solves (the heatmap's data)."""
    solved = solved_sets(data.rollouts, data.tasks)
    domains: dict[str, list[str]] = {}
    for name, info in sorted(data.tasks.items()):
        domains.setdefault(info.domain or "(none)", []).append(name)
    columns = ["domain", "tasks",
               *(f"{h}_share" for h in data.harnesses), "union_share", "strongest",
               *(f"{h}_only" for h in data.harnesses)]
    rows: list[list[Any]] = []
    for domain, tasks in sorted(domains.items()):
        pool = set(tasks)
        mine = {h: solved.get(h, set()) & pool for h in data.harnesses}
        union = set().union(*mine.values()) if mine else set()
        best = max((len(s) for s in mine.values()), default=0)
        strongest = "=".join(h for h in data.harnesses if len(mine[h]) == best) if best else None
        only = {
            h: len(mine[h] - set().union(*(mine[o] for o in data.harnesses if o != h)))
            for h in data.harnesses
        }
        rows.append([
            domain, len(tasks),
            *(len(mine[h]) / len(tasks) for h in data.harnesses),
            len(union) / len(tasks), strongest,
            *(only[h] for h in data.harnesses),
        ])
    return Table(
        name="domains",
        title="Solved share per domain and harness",
        columns=columns,
        rows=rows,
        notes=["Domain: the task's category ((none) when it has none). strongest: the "
               "harness(es) solving most of the domain; H_only: tasks of the domain only H solved."],
    )


def style_table(data: AnalysisInput) -> Table:
    """Table 3: execution style per harness, over its successful trajectories."""
    rows: list[list[Any]] = []
    for harness in data.harnesses:
        wins = [r for r in data.rollouts if r.harness == harness and r.passed and r.task in data.tasks]
        turns = [
            r.style.model_turns if r.style is not None and r.style.model_turns else r.turns
            for r in wins
        ]
        known_turns = [t for t in turns if t is not None]
        styled = [r.style for r in wins if r.style is not None]
        commands = sum(s.commands for s in styled)
        explore = sum(round(s.exploration_share * s.commands) for s in styled)
        state = sum(round(s.state_share * s.commands) for s in styled)
        rows.append([
            harness,
            len(wins),
            float(statistics.median(known_turns)) if known_turns else None,
            _ratio(explore, commands) if styled else None,
            _ratio(state, commands) if styled else None,
            statistics.fmean(s.claims for s in styled) if styled else None,
            _ratio(sum(s.rejected_claim for s in styled), len(styled)) if styled else None,
        ])
    return Table(
        name="style",
        title="Execution style per harness (Table 3)",
        columns=["harness", "successes", "median_turns", "exploration_share", "state_share",
                 "claims_per_success", "rejected_claim_first_share"],
        rows=rows,
        notes=[
            "Over each harness's successful trajectories. median_turns: model turns. "
            "exploration_share / state_share: commands that only read (ls, cat, grep, find "
            "without -delete ...) / that are `statem` commands, over all commands of those "
            "trajectories. claims_per_success: confirmed completion claims per success. "
            "rejected_claim_first_share: successes in which a claim was rejected before the "
            "final one. Empty where the input has no style records (results from other tools).",
        ],
    )


def rewrites_tables(data: AnalysisInput) -> list[Table]:
    """The rewrite summary and the per-source case table (run directories only)."""
    rewrites = data.rewrites
    if rewrites is None:
        return []
    finished = [e for e in rewrites.executions if e.status in ("succeeded", "failed")]
    passed = [e for e in finished if e.passed]
    kept = [e for e in finished if e.kept]
    duplicates = sum(e.duplicate for e in finished)
    infra = sum(e.status == "infra_error" for e in rewrites.executions)
    summary = Table(
        name="rewrites",
        title="Rewrites",
        columns=["sources", "runbooks", "rollouts", "passed", "pass_rate", "kept",
                 "duplicates", "expansion_factor", "infra_errors"],
        rows=[[
            len(rewrites.sources),
            sum(rewrites.runbooks.values()),
            len(finished),
            len(passed),
            _ratio(len(passed), len(finished)),
            len(kept),
            duplicates,
            _ratio(len(kept), len(rewrites.sources)),
            infra,
        ]],
        notes=[
            "sources: successful discover episodes; runbooks: runbooks the critic accepted; "
            "rollouts: graded rewrite executions; kept: passed the verifier and the leak "
            "audit and written by the export; duplicates: passed both but byte-identical "
            "(public conversation) to a row the export already writes, so not written; "
            "expansion_factor: kept / sources; infra_errors: executions the "
            "infrastructure ended (not counted as rollouts).",
        ],
    )
    per_source: dict[str, list[RewriteExecution]] = {s: [] for s in rewrites.sources}
    for execution in finished:
        per_source.setdefault(execution.source, []).append(execution)
    rows: list[list[Any]] = []
    for source, runs in sorted(per_source.items()):
        wins = [e.turns for e in runs if e.passed]
        rows.append([
            source,
            rewrites.runbooks.get(source, 0),
            len(runs),
            sum(e.passed for e in runs),
            _ratio(sum(e.passed for e in runs), len(runs)),
            sum(e.kept for e in runs),
            rewrites.sources.get(source),
            float(statistics.median(wins)) if wins else None,
        ])
    cases = Table(
        name="rewrite_sources",
        title="Per source: rewrite pass rate and turns (the case studies, for every source)",
        columns=["source", "runbooks", "rollouts", "passed", "pass_rate", "kept",
                 "source_turns", "median_turns_successful_rewrites"],
        rows=rows,
        notes=["source: task/harness/attempt of the successful discover episode."],
    )
    return [summary, cases]


SIMILARITY_DEFINITIONS = (
    "Commands are the model's keystrokes per command with whitespace runs collapsed; blank "
    "ones are dropped. Exact-command Jaccard: |A ∩ B| / |A ∪ B| over two trajectories' "
    "command sets (1.0 when both are empty). Command-order similarity: LCS(a, b) / "
    "max(|a|, |b|) over the command sequences (normalised LCS). Pairs: successful rewrite "
    "executions of the same task, from the same accepted runbook vs from different runbooks "
    "(same or another source). Figures are means over all pairs; 'without first 2 turns' "
    "drops each trajectory's first two model turns."
)


def similarity_table(data: AnalysisInput) -> Table | None:
    """Table 4: command similarity of same-runbook vs different-runbook rewrite pairs,
    with the native all-pairs kernels (one matrix per task)."""
    if data.rewrites is None:
        return None
    from .._native import pairwise_jaccard, pairwise_order_similarity

    by_task: dict[str, list[RewriteExecution]] = {}
    for execution in data.rewrites.executions:
        if execution.passed:
            by_task.setdefault(execution.task, []).append(execution)
    # sums[(relation, skip)] = [jaccard sum, order sum, pairs]
    sums: dict[tuple[str, int], list[float]] = {
        (rel, skip): [0.0, 0.0, 0] for rel in ("same", "different") for skip in (0, 2)
    }
    for runs in by_task.values():
        if len(runs) < 2:
            continue
        groups: dict[tuple[str, str], list[int]] = {}
        for i, execution in enumerate(runs):
            groups.setdefault((execution.source, execution.runbook), []).append(i)
        n = len(runs)
        pairs = n * (n - 1) // 2
        same_pairs = sum(len(g) * (len(g) - 1) // 2 for g in groups.values())
        for skip in (0, 2):
            items = [[c for turn in e.commands[skip:] for c in turn] for e in runs]
            for slot, matrix in enumerate((pairwise_jaccard(items), pairwise_order_similarity(items))):
                # Sums over the upper triangle without a Python loop over pairs: the whole
                # matrix minus its diagonal, halved; same-runbook pairs from their blocks.
                total = (sum(map(sum, matrix)) - sum(matrix[i][i] for i in range(n))) / 2
                same = sum(
                    (sum(matrix[i][j] for i in g for j in g) - sum(matrix[i][i] for i in g)) / 2
                    for g in groups.values()
                )
                sums[("same", skip)][slot] += same
                sums[("different", skip)][slot] += total - same
            sums[("same", skip)][2] += same_pairs
            sums[("different", skip)][2] += pairs - same_pairs
    rows: list[list[Any]] = []
    for rel in ("same", "different"):
        full, later = sums[(rel, 0)], sums[(rel, 2)]
        rows.append([
            f"{rel} runbook",
            int(full[2]),
            _ratio(full[0], full[2]),
            _ratio(full[1], full[2]),
            _ratio(later[0], later[2]),
            _ratio(later[1], later[2]),
        ])
    return Table(
        name="similarity",
        title="Command similarity of rewrites (Table 4)",
        columns=["pairs_of", "pairs", "jaccard", "order_similarity",
                 "jaccard_without_first_2_turns", "order_similarity_without_first_2_turns"],
        rows=rows,
        notes=[SIMILARITY_DEFINITIONS],
    )


def outcomes_table(data: AnalysisInput) -> Table:
    """pass@1, pass@k, mean of k runs, process reward per harness; infra errors apart."""
    found = outcomes(data.rollouts, sorted(data.tasks), k=data.k, groups=data.harnesses)
    rows = [
        [o.group, o.tasks, o.tasks_scored, o.rollouts, o.passed, o.pass_at_1, o.pass_at_k,
         o.mean_of_k, o.std_of_k, o.partial_credit_tasks, o.process_reward, o.infra_errors,
         o.cancelled]
        for o in found
    ]
    return Table(
        name="outcomes",
        title=f"Outcomes per harness (k = {data.k})",
        columns=["harness", "tasks", "tasks_scored", "rollouts", "passed", "pass_at_1",
                 f"pass_at_{data.k}", f"mean_of_{data.k}", f"std_of_{data.k}",
                 "partial_credit_tasks", "process_reward", "infra_errors", "cancelled"],
        rows=rows,
        notes=[OUTCOME_DEFINITIONS],
    )


def all_tables(data: AnalysisInput) -> list[Table]:
    """Every table the input allows, in report order."""
    tables = [
        coverage_table(data),
        equal_rollout_table(data),
        exclusivity_table(data),
        intersections_table(data),
        domain_table(data),
        style_table(data),
        *rewrites_tables(data),
    ]
    similarity = similarity_table(data)
    if similarity is not None:
        tables.append(similarity)
    tables.append(outcomes_table(data))
    return tables


def harness_order(names: Iterable[str], preferred: Sequence[str] = ()) -> list[str]:
    """``preferred`` (those present or not) first, then the others sorted."""
    seen = list(dict.fromkeys(preferred))
    return seen + sorted(set(names) - set(seen))


def tasks_with_rollouts(rollouts: Iterable[Rollout], known: Mapping[str, TaskInfo]) -> dict[str, TaskInfo]:
    """The pool: every known task and every task a rollout names."""
    out = dict(known)
    for rollout in rollouts:
        out.setdefault(rollout.task, TaskInfo(name=rollout.task))
    return dict(sorted(out.items()))
