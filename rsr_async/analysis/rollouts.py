"""What every analysis reads: one :class:`Rollout` per agent attempt, whatever produced it.

A run directory of this engine, a JSONL file of another tool's results
(:func:`read_results_jsonl`) and Harbor job directories (``analysis.harbor``) all
become the same list of rollouts, so every table is computed one way.

A rollout is **graded** when a verifier gave it a reward (status ``succeeded`` or
``failed``); it **passed** when the reward is full marks (``reward >= 1``, the engine's
rule for ``succeeded``). Infrastructure errors and cancelled attempts are not samples:
they are counted apart and never enter pass@k or coverage.

The JSONL schema, one object per line (only the first four keys are required)::

    {"task": "fix-git",          # str, the task's name
     "harness": "terminus2",     # str, the agent/harness (or checkpoint) that ran it
     "attempt": 0,               # int >= 0, the attempt index within (task, harness)
     "reward": 1.0,              # number, or null when no reward exists (an
                                 #   infrastructure error: excluded, counted apart)
     "rewards": {"tests": 0.5},  # {str: number}, the verifier's whole reward map
     "domain": "security",       # str, the task's domain (the heatmap's rows)
     "subset": "tb2",            # str, the task's collection (Table 1's subsets)
     "turns": 17}                # int, model turns of the attempt (style, rewrites)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import msgspec

from ..errors import TaskError
from ..schema import EpisodeStyle

__all__ = [
    "GRADED",
    "Rollout",
    "RolloutStatus",
    "TaskInfo",
    "read_results_jsonl",
    "rollout_from_reward",
]

RolloutStatus = Literal["succeeded", "failed", "infra_error", "cancelled"]
GRADED: frozenset[str] = frozenset({"succeeded", "failed"})
"""Statuses of rollouts the verifier graded: the samples of pass@k and coverage."""


class TaskInfo(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What the tables need to know of a task besides its rollouts."""

    name: str
    domain: str = ""
    """The task's domain (its ``category``), the per-domain heatmap's row; "" if unknown."""
    subset: str = ""
    """The task's collection (``--subset-key``), Table 1's subsets; "" if unknown."""


class Rollout(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One attempt of one task by one harness (or checkpoint)."""

    task: str
    harness: str
    attempt: int
    status: RolloutStatus
    reward: float | None = None
    """The verifier's main reward; None when no verifier graded the attempt."""
    rewards: dict[str, float] | None = None
    """The verifier's whole reward map, when known (several keys: partial credit)."""
    turns: int | None = None
    """Model turns, when known."""
    style: EpisodeStyle | None = None
    """Execution style (Table 3), when known (this engine's stores)."""

    @property
    def graded(self) -> bool:
        return self.status in GRADED

    @property
    def passed(self) -> bool:
        return self.status == "succeeded"


class _ResultRow(msgspec.Struct, forbid_unknown_fields=False):
    task: str
    harness: str
    attempt: int
    reward: float | None
    rewards: dict[str, float] | None = None
    domain: str | None = None
    subset: str | None = None
    turns: int | None = None


_row_decoder = msgspec.json.Decoder(_ResultRow)


def rollout_from_reward(
    *,
    task: str,
    harness: str,
    attempt: int,
    reward: float | None,
    rewards: dict[str, float] | None = None,
    turns: int | None = None,
) -> Rollout:
    """A rollout graded by ``reward`` alone: passed at full marks, ungraded when None
    (the rule for results that did not come from this engine)."""
    if reward is None:
        status: RolloutStatus = "infra_error"
    else:
        status = "succeeded" if reward >= 1.0 else "failed"
    return Rollout(
        task=task,
        harness=harness,
        attempt=attempt,
        status=status,
        reward=reward,
        rewards=rewards,
        turns=turns,
    )


def read_results_jsonl(path: str | Path) -> tuple[list[Rollout], dict[str, TaskInfo]]:
    """Rollouts and task facts from a results JSONL file (schema in the module docstring).

    Raises :class:`~rsr_async.errors.TaskError` naming the file, the line and the field
    on the first malformed row; blank lines are skipped."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TaskError(f"{path}: cannot read the results file: {exc}") from exc
    rollouts: list[Rollout] = []
    infos: dict[str, dict[str, str]] = {}
    seen: set[tuple[str, str, int]] = set()
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = _row_decoder.decode(line)
        except msgspec.ValidationError as exc:
            raise TaskError(f"{where}: {exc}") from exc
        except msgspec.DecodeError as exc:
            raise TaskError(f"{where}: not a JSON object ({exc})") from exc
        _check_row(row, where)
        identity = (row.task, row.harness, row.attempt)
        if identity in seen:
            raise TaskError(
                f"{where}: a second row for task {row.task!r}, harness {row.harness!r}, "
                f"attempt {row.attempt}; each attempt may appear once"
            )
        seen.add(identity)
        rollouts.append(
            rollout_from_reward(
                task=row.task,
                harness=row.harness,
                attempt=row.attempt,
                reward=row.reward,
                rewards=row.rewards,
                turns=row.turns,
            )
        )
        info = infos.setdefault(row.task, {})
        for field in ("domain", "subset"):
            value = getattr(row, field)
            if value is None:
                continue
            if info.setdefault(field, value) != value:
                raise TaskError(
                    f"{where}: task {row.task!r} has {field} {value!r} here but "
                    f"{info[field]!r} on an earlier line"
                )
    if not rollouts:
        raise TaskError(f"{path}: no result rows (expected one JSON object per line)")
    return rollouts, {name: TaskInfo(name=name, **info) for name, info in infos.items()}


def _check_row(row: _ResultRow, where: str) -> None:
    if not row.task:
        raise TaskError(f"{where}: `task` is empty")
    if not row.harness:
        raise TaskError(f"{where}: `harness` is empty")
    if row.attempt < 0:
        raise TaskError(f"{where}: `attempt` must be >= 0, got {row.attempt}")
    values: Iterable[tuple[str, float]] = (
        [("reward", row.reward)] if row.reward is not None else []
    )
    if row.rewards:
        values = [*values, *((f"rewards.{k}", v) for k, v in row.rewards.items())]
    for name, value in values:
        if not math.isfinite(value):
            raise TaskError(f"{where}: `{name}` must be a finite number, got {value}")
    if row.turns is not None and row.turns < 0:
        raise TaskError(f"{where}: `turns` must be >= 0, got {row.turns}")
