"""The export stage: what the store says is kept (:func:`~rsr_async.export.collect_records`),
written by :mod:`rsr_async.export`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from ..engine.reader import RunReader
from ..errors import ConfigError
from ..export import RejectedMode, collect_records, write_export, write_harbor_jobs
from ..llm.base import SCRIPTED_MARK
from .figures import pipeline_figures

__all__ = ["ExportFormat", "default_out", "export_run"]

ExportFormat = Literal["sft", "harbor-jobs"]


def default_out(format: ExportFormat) -> str:
    """The export's folder name under the run directory when ``--out`` is not given."""
    return "harbor-jobs" if format == "harbor-jobs" else "export"


def export_run(
    store: RunReader,
    out_dir: Path,
    *,
    validation_share: float,
    seed: int,
    allow_scripted: bool,
    format: ExportFormat = "sft",
    rejected: RejectedMode = "weight",
) -> dict[str, Any]:
    """Write the run's export to ``out_dir``; returns the manifest.

    ``format``: ``sft`` (:func:`~rsr_async.export.write_export`) or ``harbor-jobs`` (the
    SFT set as a Harbor job, :func:`~rsr_async.export.write_harbor_jobs`). Refuses
    trajectories of the scripted stand-in (a test double) unless ``allow_scripted``: its
    data must never be mistaken for a model's.
    """
    identity = store.meta().get("model", "")
    if identity.endswith(SCRIPTED_MARK) and not allow_scripted:
        raise ConfigError(
            f"{store.path.parent}: this run's trajectories come from the scripted stand-in "
            "(a test double), not a model; pass --allow-scripted to export them anyway"
        )
    # Only counts go into the manifest: the cached share depends on the servers' cache
    # state, and the same store must give byte-identical files.
    records = collect_records(store)
    if format == "harbor-jobs":
        return write_harbor_jobs(
            records, out_dir, validation_share=validation_share, seed=seed, rejected=rejected
        )
    figures = {
        k: v
        for k, v in pipeline_figures(store, records=records).items()
        if k != "executor_cached_share"
    }
    return write_export(
        records,
        out_dir,
        validation_share=validation_share,
        seed=seed,
        counts={"pipeline": figures, "model": identity},
        rejected=rejected,
    )
