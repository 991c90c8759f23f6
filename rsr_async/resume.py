"""The resume policy: which settings may change between a run and its resume.

A run directory keeps the config it was started with. Rerunning the same command there
resumes it, and that is only sound when the new config would compute the same results:
the settings that say *what* is computed must match, while those that say *how fast*
and *where* things run may change freely (:data:`OPERATIONAL_KEYS`). The writer
(:class:`~rsr_async.engine.store.Store`) compares :func:`resume_view` of the stored and
the new config when it opens a run directory and refuses a difference
(:class:`~rsr_async.errors.ConfigMismatchError`) unless forced.

Settings only later stages depend on (:data:`STAGE_SCOPED`: K, M, the critic's budget …)
are left out of the run-wide view and checked per stage instead
(:meth:`~rsr_async.engine.store.Store.check_stage_config`), so changing K for the rewrite
never invalidates discovery. The same view names a run's default directory (its hash)
and fingerprints an evaluation checkpoint.

This lives beside :mod:`rsr_async.config`, not in the engine: the keys are the
pipeline's settings, and the engine only applies the policy it is given.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "ADDED_KEYS",
    "OPERATIONAL_KEYS",
    "STAGE_SCOPED",
    "config_changes",
    "config_hash",
    "resume_view",
]

OPERATIONAL_KEYS: Final = frozenset(
    {
        "engine",
        "cluster",
        "run.run_dir",
        "run.concurrency",
        "run.model_concurrency",
        "run.stages",
        "run.prewarm",
        "sandbox.docker_urls",
        "sandbox.allow_uncapped_storage",
        "sandbox.max_concurrent_verifiers",
        "sandbox.command_timeout_s",
        "sandbox.shell_quiet_s",
        "sandbox.starts_per_s",
        "sandbox.max_concurrent_starts",
        "sandbox.warm_pool",
        "sandbox.build_concurrency",
        "sandbox.api_timeout_s",
        "llm.urls",
        "llm.max_inflight_per_server",
        "llm.connect_timeout_s",
        "llm.read_timeout_s",
        "llm.total_timeout_s",
        "llm.max_retries",
        "llm.backoff_s",
        "llm.health_interval_s",
        "llm.breaker_failures",
        "llm.breaker_reset_s",
        "llm.balance_abs_threshold",
        "llm.balance_rel_threshold",
        "sim",
    }
)
"""Settings that may change between a run and its resume: how fast and where things
run, not what is computed (a whole section, or one ``section.key``). Everything else must
match (see :func:`resume_view`)."""

ADDED_KEYS: Final[Mapping[str, Any]] = {"sandbox.backend": "docker"}
"""Settings added after runs were stored, with the value those runs implicitly used: left
out of the resume check (and of the default run directory's hash) while they hold that
value, so a run stored before them resumes, and compared once set to anything else."""
STAGE_SCOPED: Final = frozenset({"rsr"})
"""Config sections whose keys only later stages depend on: left out of the run-wide
check (and of the default run directory's hash) and checked per stage instead
(:meth:`~rsr_async.engine.store.Store.check_stage_config`), so changing K for rewrite
never invalidates discovery."""

UNSET: Final = "<unset>"
"""How :func:`config_changes` shows a setting one side does not have."""


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out


def resume_view(config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings that must match for a resume (flat ``section.key`` → value)."""
    flat = _flatten(config)
    return {
        key: value
        for key, value in sorted(flat.items())
        if key not in OPERATIONAL_KEYS
        and key.split(".", 1)[0] not in OPERATIONAL_KEYS
        and (key not in ADDED_KEYS or value != ADDED_KEYS[key])
        and key.split(".", 1)[0] not in STAGE_SCOPED
    }


def config_hash(config: Mapping[str, Any]) -> str:
    """A short fingerprint of :func:`resume_view` (16 hex digits)."""
    text = json.dumps(resume_view(config), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def config_changes(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``key: old -> new`` for every key whose value differs between two flat views,
    sorted by key; a key one side lacks shows as ``'<unset>'``."""
    return [
        f"{key}: {stored.get(key, UNSET)!r} -> {current.get(key, UNSET)!r}"
        for key in sorted(set(stored) | set(current))
        if stored.get(key, UNSET) != current.get(key, UNSET)
    ]
