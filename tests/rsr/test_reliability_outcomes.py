"""Outcomes are blamed on the right party, and the summary says so (issue 15)."""

from __future__ import annotations

from pathlib import Path

from rsr_async.config import Config, EngineConfig, RunConfig
from rsr_async.engine import Engine, Job, JobContext
from rsr_async.errors import ContainerError
from rsr_async.rsr.summary import render_summary, summarise
from rsr_async.schema import EpisodeResult, EpisodeSpec, JobKey, Task


async def _broken_docker(job: Job, ctx: JobContext) -> EpisodeResult:
    raise ContainerError("sandbox create failed: the daemon said no (disk full)")


async def test_summary_says_why_nothing_finished(tmp_path: Path) -> None:
    tasks = [Task(name=f"t{i}", path=str(tmp_path), instruction="-") for i in range(3)]
    jobs = [Job.episode(EpisodeSpec(key=JobKey(stage="discover", task=t.name, harness="terminus2"), task=t))
            for t in tasks]
    config = Config(run=RunConfig(concurrency=2),
                    engine=EngineConfig(progress="none", infra_retries=0, store_batch_ms=10.0))
    async with Engine(config, runner=_broken_docker, run_dir=tmp_path / "run") as engine:
        results = [r async for r in engine.run(jobs, stage="discover")]
        summary = summarise(engine.store, stage="discover", model="m", scripted_model=False,
                            tasks=[t.name for t in tasks], attempts=1, wall_s=1.0,
                            episodes_this_run=3, peak_sandboxes=0)
    assert [r.status for r in results] == ["infra_error"] * 3
    assert summary.nothing_finished is not None
    assert summary.nothing_finished.startswith("no episode finished: 3 infra errors (first: ")
    assert "disk full" in summary.nothing_finished
    table = render_summary(summary)
    cells = [str(c) for column in table.columns for c in column._cells]  # type: ignore[attr-defined]
    assert summary.nothing_finished in cells
    assert not any("over 0 tasks" in c for c in cells)
