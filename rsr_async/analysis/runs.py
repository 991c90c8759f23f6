"""Rollouts and task facts read from a run directory of this engine.

Reading never blocks a live run: the store is opened read-only (WAL readers run beside
the writer) and results are streamed in chunks through a decoder that keeps only the
fields the tables use (the trajectory is skipped, not built).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from ..engine.store import Store
from ..errors import ConfigError
from ..schema import EpisodeStyle, JobKey, JobStatus, Task
from .rollouts import Rollout, TaskInfo

__all__ = ["store_rollouts", "store_tasks", "subset_of"]


class _EpisodeDetails(msgspec.Struct, kw_only=True, tag="episode", tag_field="kind"):
    """The fields of an ``EpisodeResult`` the tables read (everything else is skipped)."""

    key: JobKey
    status: JobStatus
    reward: float | None = None
    rewards: dict[str, float] = msgspec.field(default_factory=dict)
    turns: int = 0
    style: EpisodeStyle = EpisodeStyle()


_FINAL = ("succeeded", "failed", "infra_error", "cancelled")


def store_rollouts(store: Store, *, stage: str = "discover") -> list[Rollout]:
    """Every finished episode of ``stage`` as a :class:`Rollout` (pending ones are not
    rollouts yet). ``harness`` is the key's harness: for ``execute`` jobs, the source's."""
    out: list[Rollout] = []
    for result in store.outputs(_EpisodeDetails, stage=stage, status=_FINAL):
        key = result.key
        status = result.status
        if status not in _FINAL:
            continue
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
    store: Store, *, stages: Iterable[str] = ("discover",), subset_key: str | None = None
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
