"""What each page of the viewer shows, read from a run's store.

Every method here blocks (SQLite): the server calls them from a worker thread, never on
the event loop. Each reads only what its page shows, through the store's indexes: job
lists are pages of at most :data:`PAGE_SIZE` rows taken by key (keyset pagination, so a
late page costs what the first does), counts come from the indexes without reading a
blob, and a page decodes only the results it displays. A store of 100,000 jobs serves
every page in tens of milliseconds (``bench viewer``).

The store is opened read-only and never locked: pages read committed data while a run
writes (WAL), each query seeing the latest commit.
"""

from __future__ import annotations

import re
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import urlencode

import msgspec

from ..engine.reader import STATUSES, JobRow, RunReader
from ..schema import (
    AuditResult,
    CritiqueResult,
    EpisodeResult,
    JobKey,
    JobResult,
    PlanResult,
    Usage,
)
from .marks import LEAKED, RULED_DERIVABLE, FlaggedValue, MarkedMessage, mark_message

__all__ = ["PAGE_SIZE", "STAGE_ORDER", "Filters", "NotFound", "RunView"]

PAGE_SIZE: Final = 50
"""Rows per page of a job or task list."""
STAGE_ORDER: Final = ("discover", "plan", "critique", "execute", "audit")
"""Job stages in pipeline order (others, if any, follow alphabetically)."""
RARE_SHARE: Final = 20
"""A status held by under 1/RARE_SHARE of its stage's jobs is read through the (stage,
status) index; a commoner one by walking the stage's keys (see :meth:`RunView._page`)."""
EPISODE_LIMIT: Final = 500
"""Episodes listed on one task's page (the rest through the job list)."""
_RUNBOOK_ID = re.compile(r"r(\d+)d(\d+)")


class NotFound(LookupError):
    """The page's subject is not in the store (the server answers 404)."""


class BadRequest(ValueError):
    """A query parameter that cannot be used (the server answers 400)."""


class Filters(msgspec.Struct, frozen=True, kw_only=True):
    """The job list's filters; ``None`` means any."""

    stage: str | None = None
    harness: str | None = None
    domain: str | None = None
    """A task category (``Task.category`` in the job's spec)."""
    status: str | None = None
    task: str | None = None

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> Filters:
        """From a URL's query (empty values mean any); an unknown status is refused."""
        values = {name: (query.get(name) or "").strip() or None for name in cls.__struct_fields__}
        status = values["status"]
        if status is not None and status not in STATUSES:
            raise BadRequest(f"status {status!r}: expected one of {', '.join(STATUSES)}")
        return cls(**values)

    def query(self, **extra: str | None) -> str:
        """The URL query that repeats these filters (plus ``extra``), ``?``-prefixed."""
        values = {**msgspec.structs.asdict(self), **extra}
        pairs = [(name, value) for name, value in values.items() if value]
        return "?" + urlencode(pairs) if pairs else ""

    @property
    def active(self) -> bool:
        return any(msgspec.structs.astuple(self))


def _ordered_stages(stages: Iterable[str]) -> list[str]:
    present = set(stages)
    return [s for s in STAGE_ORDER if s in present] + sorted(present - set(STAGE_ORDER))


def _moved(key: JobKey, stage: str, **changes: Any) -> str:
    return str(msgspec.structs.replace(key, stage=stage, **changes))


def _source_prefix(key: JobKey, stage: str) -> str:
    return f"{stage}/{key.task}/{key.harness}/a{key.attempt}/"


def _in_key_order(part: str) -> str:
    return part + "/"


def _runbook_order(runbook: str) -> tuple[int, int]:
    match = _RUNBOOK_ID.fullmatch(runbook)
    return (int(match[1]), int(match[2])) if match else (1 << 30, 0)


class RunView:
    """The viewer's queries over one open (read-only) store.

    Task categories (the domain filter) are read once per task, from one stored spec, and
    kept: a task's category does not change within a run.
    """

    def __init__(self, store: RunReader) -> None:
        self.store = store
        self._categories: dict[str, str] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ shared facets

    def categories(self, tasks: Iterable[str]) -> dict[str, str]:
        """``task → category`` ("" when the task's spec names none)."""
        wanted = list(dict.fromkeys(tasks))
        with self._lock:
            missing = [task for task in wanted if task not in self._categories]
        found: dict[str, str] = {}
        for task in missing:
            # A discover spec is small (the Task and a few settings); other kinds carry
            # whole trajectories, so they are the fallback.
            rows = self.store.rows(prefix=f"discover/{task}/", limit=1) or self.store.rows(
                task=task, limit=1
            )
            spec = self.store.spec(rows[0].key) if rows else None
            found[task] = spec.task.category if spec is not None else ""
        with self._lock:
            self._categories.update(found)
            return {task: self._categories.get(task, "") for task in wanted}

    def facets(self) -> dict[str, Any]:
        """Values the filters offer: stages, harnesses, domains and statuses present."""
        tasks = self.store.distinct("task")
        domains = sorted({c for c in self.categories(tasks).values() if c})
        return {
            "stages": _ordered_stages(self.store.distinct("stage")),
            "harnesses": self.store.distinct("harness"),
            "domains": domains,
            "statuses": list(STATUSES),
            "tasks": tasks,
        }

    # ------------------------------------------------------------------ pages

    def overview(self, *, domain: str | None, harness: str | None, page: int) -> dict[str, Any]:
        """The run's counts per stage and status, and one page of its tasks with their
        episodes per harness."""
        store = self.store
        counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(STATUSES, 0))
        for (stage, status), n in store.tally("stage", "status").items():
            counts[stage][status] = n
        facets = self.facets()
        categories = self.categories(facets["tasks"])
        tasks = [t for t in facets["tasks"] if domain is None or categories.get(t) == domain]
        harnesses = [h for h in facets["harnesses"] if harness is None or h == harness]
        pages = max(1, -(-len(tasks) // PAGE_SIZE))
        page = min(max(page, 1), pages)
        shown = tasks[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
        table = []
        for task in shown:
            per: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(STATUSES, 0))
            for (h, status), n in store.tally(
                "harness", "status", prefix=f"discover/{task}/", harness=harness
            ).items():
                per[h][status] = n
            rewrites = {s: n for (s,), n in store.tally("status", prefix=f"execute/{task}/").items()}
            table.append({"task": task, "domain": categories.get(task, ""), "harnesses": per,
                          "rewrites": rewrites})
        meta = store.meta()
        return {
            "counts": {stage: counts[stage] for stage in _ordered_stages(counts)},
            "total": sum(sum(c.values()) for c in counts.values()),
            "tasks": table,
            "task_total": len(tasks),
            "harness_columns": harnesses,
            "page": page,
            "pages": pages,
            "facets": facets,
            "domain": domain,
            "harness": harness,
            "created_at": float(meta.get("created_at", "0") or 0),
            "config_hash": meta.get("config_hash", ""),
        }

    def jobs(
        self, filters: Filters, *, after: str | None = None, before: str | None = None
    ) -> dict[str, Any]:
        """One page of jobs matching ``filters``, by key, after or before a key."""
        facets = self.facets()
        tasks: list[str] | None = [filters.task] if filters.task else None
        if filters.domain is not None:
            categories = self.categories(facets["tasks"])
            tasks = [t for t in facets["tasks"] if categories.get(t) == filters.domain
                     and filters.task in (None, t)]
        elif filters.harness is not None and tasks is None:
            tasks = facets["tasks"]  # harness follows task in a key: one key range per task
        backwards = before is not None and after is None
        rows = self._page(filters, facets["stages"], tasks, after=after, before=before)
        more = len(rows) > PAGE_SIZE
        if backwards:
            earlier, later, rows = more, True, rows[-PAGE_SIZE:]
        else:
            earlier, later, rows = after is not None, more, rows[:PAGE_SIZE]
        return {
            "rows": rows,
            "domains": self.categories(row.task for row in rows),
            "filters": filters,
            "facets": facets,
            "earlier": rows[0].key if earlier and rows else None,
            "later": rows[-1].key if later and rows else None,
        }

    def _page(
        self,
        filters: Filters,
        stages: list[str],
        tasks: list[str] | None,
        *,
        after: str | None,
        before: str | None,
    ) -> list[JobRow]:
        """Up to ``PAGE_SIZE + 1`` matching rows in key order, after ``after`` (or just
        before ``before``).

        A key is ``stage/task/harness/...``, so the filters that pin its leading parts
        name ranges of the key index, and those ranges, in order, hold the whole list in
        order: rows are read range by range (stage, then task, then harness), each read
        stopping once the page is full. A status filter is checked against the store's
        counts per (stage, status): a stage without it is passed over, and a status that
        is rare in its stage is looked up through the (stage, status) index instead of
        walking the stage's keys.
        """
        store = self.store
        backwards = before is not None and after is None
        counts = store.tally("stage", "status") if filters.status is not None else {}
        totals: dict[str, int] = defaultdict(int)
        for (stage, _), n in counts.items():
            totals[stage] += n
        found: list[JobRow] = []

        def read(prefix: str, **where: Any) -> bool:
            """Add the rows under ``prefix``; True once the page is full."""
            nonlocal found
            end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
            if (after is not None and after >= end) or (before is not None and before <= prefix):
                return False  # the whole range lies on the far side of the cursor
            rows = store.rows(status=filters.status, prefix=prefix, after=after, before=before,
                              limit=PAGE_SIZE + 1 - len(found), **where)
            found = rows + found if backwards else found + rows
            return len(found) > PAGE_SIZE

        # in key order: "a/" sorts after "a-b/" though "a" sorts before "a-b"
        chosen = [filters.stage] if filters.stage else sorted(stages, key=_in_key_order)
        ordered = None if tasks is None else sorted(tasks, key=_in_key_order)
        for stage in reversed(chosen) if backwards else chosen:
            if filters.status is not None:
                matches = counts.get((stage, filters.status), 0)
                if matches == 0:
                    continue
                if matches * RARE_SHARE < totals[stage]:
                    if read(f"{stage}/", stage=stage, harness=filters.harness, task=ordered):
                        break
                    continue
            if ordered is None:
                full = read(f"{stage}/", harness=filters.harness)
            else:
                full = False
                for task in reversed(ordered) if backwards else ordered:
                    tail = f"{filters.harness}/" if filters.harness else ""
                    if read(f"{stage}/{task}/{tail}"):
                        full = True
                        break
            if full:
                break
        return found

    def task(self, name: str) -> dict[str, Any]:
        """One task: its spec, its episodes, and its jobs per stage and status."""
        store = self.store
        episodes = store.rows(prefix=f"discover/{name}/", limit=EPISODE_LIMIT)
        stages: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(STATUSES, 0))
        for (stage, status), n in store.tally("stage", "status", task=name).items():
            stages[stage][status] = n
        if not stages:
            raise NotFound(f"no task {name!r} in this run")
        first = episodes[0].key if episodes else store.rows(task=name, limit=1)[0].key
        spec = store.spec(first)
        return {
            "name": name,
            "task": spec.task if spec is not None else None,
            "episodes": episodes,
            "more_episodes": len(episodes) >= EPISODE_LIMIT,
            "stages": {stage: stages[stage] for stage in _ordered_stages(stages)},
        }

    def job(self, key: str) -> dict[str, Any]:
        """One job: its row, its result (a trajectory for episodes, with the leak audit's
        marks on a rewrite) and links to the jobs it comes from and leads to."""
        store = self.store
        row = store.row(key)
        if row is None:
            raise NotFound(f"no job {key!r} in this run")
        jk = row.job_key
        result = store.get(key)
        flagged: list[FlaggedValue] = []
        audit: AuditResult | None = None
        related: list[tuple[str, str]] = []
        source = _moved(jk, "discover", runbook="-", execution=-1)
        if jk.stage != "discover":
            related.append(("source", source))
        if jk.stage in ("critique", "execute", "audit"):
            related.append(("runbook", _moved(jk, "plan", execution=-1)))
        if jk.stage in ("plan", "execute", "audit"):
            related.append(("critique", _moved(jk, "critique", execution=-1)))
        if jk.stage == "audit":
            related.append(("execution", _moved(jk, "execute")))
        if jk.stage == "execute":
            audit_key = _moved(jk, "audit")
            found = store.get(audit_key)
            if isinstance(found, AuditResult):
                audit = found
                flagged = _rulings(found)
            related.append(("audit", audit_key))
        if isinstance(result, AuditResult):
            flagged = _rulings(result)
        related = [(label, k) for label, k in related if store.row(k) is not None]
        messages: list[MarkedMessage] = []
        if isinstance(result, EpisodeResult) and result.trajectory is not None:
            messages = [mark_message(m, flagged) for m in result.trajectory.messages]
        return {
            "row": row,
            "result": result,
            "messages": messages,
            "usage": _usage(result),
            "flagged": flagged,
            "audit": audit,
            "related": related,
            "source": source if jk.stage == "discover" else None,
            "domain": self.categories([row.task]).get(row.task, ""),
        }

    def source(self, key: str) -> dict[str, Any]:
        """A source trajectory beside what was made of it: its runbook drafts with the
        critic's verdicts, and each accepted runbook's rewrites with their leak audits."""
        store = self.store
        row = store.row(key)
        if row is None or row.stage != "discover":
            raise NotFound(f"no discover episode {key!r} in this run")
        jk = row.job_key
        result = store.get(key)
        plans = {p.key.runbook: p for p in store.outputs(PlanResult, prefix=_source_prefix(jk, "plan"))}
        critiques = {
            c.key.runbook: c for c in store.outputs(CritiqueResult, prefix=_source_prefix(jk, "critique"))
        }
        audits = {
            (a.key.runbook, a.key.execution): a
            for a in store.outputs(AuditResult, prefix=_source_prefix(jk, "audit"))
        }
        plan_rows = {r.runbook: r for r in store.rows(prefix=_source_prefix(jk, "plan"))}
        critique_rows = {r.runbook: r for r in store.rows(prefix=_source_prefix(jk, "critique"))}
        executions: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in store.rows(prefix=_source_prefix(jk, "execute")):
            found = audits.get((r.runbook, r.execution))
            executions[r.runbook].append({
                "row": r,
                "audit": found,
                "audit_key": _moved(r.job_key, "audit"),
                "leaks": list(found.verdict.leaks) if found and found.verdict else [],
            })
        groups: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for runbook in sorted(set(plan_rows) | set(critique_rows), key=_runbook_order):
            index, draft = _runbook_order(runbook)
            groups[index].append({
                "id": runbook,
                "draft": draft,
                "plan_key": _moved(jk, "plan", runbook=runbook),
                "plan_row": plan_rows.get(runbook),
                "plan": plans.get(runbook),
                "critique_key": _moved(jk, "critique", runbook=runbook),
                "critique_row": critique_rows.get(runbook),
                "critique": critiques.get(runbook),
                "executions": executions.get(runbook, []),
            })
        messages = []
        if isinstance(result, EpisodeResult) and result.trajectory is not None:
            messages = [mark_message(m) for m in result.trajectory.messages]
        return {
            "row": row,
            "result": result,
            "messages": messages,
            "usage": _usage(result),
            "runbooks": [groups[i] for i in sorted(groups)],
            "domain": self.categories([row.task]).get(row.task, ""),
        }


def _rulings(audit: AuditResult) -> list[FlaggedValue]:
    """The values an audit flagged, each with the auditor's ruling; a ruled leak that the
    scanner's list lacks (an older store) is shown too."""
    leaked = {(leak.value, leak.turn, leak.position) for leak in (audit.verdict.leaks if audit.verdict else ())}
    out = [
        FlaggedValue(
            leak=leak,
            mark=LEAKED if (leak.value, leak.turn, leak.position) in leaked else RULED_DERIVABLE,
        )
        for leak in audit.flagged
    ]
    listed = {(f.leak.value, f.leak.turn, f.leak.position) for f in out}
    if audit.verdict is not None:
        out.extend(
            FlaggedValue(leak=leak, mark=LEAKED)
            for leak in audit.verdict.leaks
            if (leak.value, leak.turn, leak.position) not in listed
        )
    return out


def _usage(result: JobResult | None) -> Usage:
    if isinstance(result, EpisodeResult) and result.trajectory is not None:
        total = result.trajectory.usage()
        return total if total.requests or total.prompt_tokens else result.usage
    return result.usage if result is not None else Usage()
