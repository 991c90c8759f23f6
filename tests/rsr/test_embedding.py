"""rsr_async.open_pipeline embedded in a plain asyncio program: real sandboxes, embedded
simulator, real store; cancelling the caller's scope leaves nothing behind."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

import rsr_async
from rsr_async.engine.store import Store
from rsr_async.rsr.discover import discover_jobs
from rsr_async.rsr.runtime import run_id_for
from rsr_async.tasks import BUNDLED_SUITE, load_task

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _leftovers(run_dir: Path) -> list[str]:
    return subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=rsr_async.run={run_id_for(run_dir)}"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()


async def test_engine_runs_real_episodes_inside_asyncio(tmp_path: Path) -> None:
    tasks = [load_task(BUNDLED_SUITE / "word-frequency"), load_task(BUNDLED_SUITE / "merge-intervals")]
    config = rsr_async.load_config(values={"run": {"attempts": 2, "concurrency": 4},
                                           "engine": {"progress": "none"}})
    run_dir = tmp_path / "run"
    async with rsr_async.open_pipeline(config, run_dir=run_dir) as pipeline:
        seen = [result async for result in pipeline.run(tasks)]
    assert all(isinstance(r, rsr_async.EpisodeResult) for r in seen)
    assert sorted(str(r.key) for r in seen) == sorted(str(j.key) for j in discover_jobs(tasks, config))
    assert all(r.status in ("succeeded", "failed") and r.reward is not None for r in seen)
    with Store.open_readonly(run_dir) as store:
        assert store.counts(stage="discover")["running"] == 0
        assert {str(r.key) for r in store.results(stage="discover")} == {str(r.key) for r in seen}
    assert _leftovers(run_dir) == []


async def test_cancelling_the_callers_scope_cleans_up(tmp_path: Path) -> None:
    tasks = [load_task(BUNDLED_SUITE / "build-order")]
    config = rsr_async.load_config(values={"run": {"attempts": 3, "concurrency": 3, "prewarm": False},
                                           "engine": {"progress": "none"},
                                           "sim": {"decode_us_per_token": 100000.0}})  # 0.1 s a token
    run_dir = tmp_path / "run"
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(8):
            async with rsr_async.open_pipeline(config, run_dir=run_dir) as pipeline:
                async for _ in pipeline.run(tasks):
                    pass
    with Store.open_readonly(run_dir) as store:
        counts = store.counts(stage="discover")
    assert counts["running"] == 0 and counts["cancelled"] >= 1
    assert _leftovers(run_dir) == []
