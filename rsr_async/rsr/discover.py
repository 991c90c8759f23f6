"""The discover stage: every task × harness × attempt, in fresh sandboxes.

Job keys are ``discover/<task>/<harness>/a<attempt>/-/e-1``, so rerunning the same
command in the same run directory resumes: finished episodes are skipped.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence

from ..config import Config
from ..engine import Job
from ..schema import EpisodeSpec, JobKey, Task

__all__ = ["STAGE", "discover_jobs", "episode_seed"]

STAGE = "discover"


def episode_seed(base: int, key: JobKey) -> int:
    """A per-episode seed, stable across reruns (CRC32 of the key, mixed with the base)."""
    return (zlib.crc32(str(key).encode()) ^ (base * 0x9E3779B1)) & 0x7FFFFFFF


def discover_jobs(tasks: Sequence[Task], config: Config) -> Iterator[Job]:
    """One job per (task, harness, attempt), attempts of a task interleaved last.

    Attempts of one task share an affinity key, so they start on the same model server
    and its prefix cache holds their common first prompt once.
    """
    for attempt in range(config.run.attempts):
        for harness in config.run.harnesses:
            for task in tasks:
                key = JobKey(stage=STAGE, task=task.name, harness=harness, attempt=attempt)
                yield Job(
                    key=key,
                    spec=EpisodeSpec(
                        key=key,
                        task=task,
                        harness=harness,
                        temperature=config.llm.temperature,
                        seed=episode_seed(config.run.seed, key),
                        max_turns=config.harness.max_turns,
                        # group#member: attempts of a task start on one server (shared prefix)
                        affinity=f"{STAGE}:{task.name}:{harness}#a{attempt}",
                    ),
                )
