"""summary.json's time by stage, from job rows (the store's started_at/finished_at)."""

from __future__ import annotations

import pytest

from rsr_async.engine.store import JobRow
from rsr_async.rsr.summary import stage_times


def _row(stage: str, started: float | None, finished: float | None, n: int = 0) -> JobRow:
    return JobRow(
        key=f"{stage}/t/terminus2/a{n}/-/e-1", stage=stage, task="t", harness="terminus2", attempt=n,
        runbook="-", execution=-1, kind="episode", status="succeeded", tries=1, reward=1.0,
        end_reason=None, turns=1, error=None, created_at=0.0, started_at=started, finished_at=finished,
    )


def test_stages_in_pipeline_order_relative_to_the_start() -> None:
    since = 1000.0
    rows = [
        _row("execute", 1010.0, 1014.0),
        _row("discover", 1001.0, 1003.0, 0),
        _row("discover", 1002.0, 1007.0, 1),
        _row("discover", 1002.5, 1003.5, 2),
        _row("plan", 1004.0, 1005.0),
        _row("discover", 990.0, 995.0, 3),  # an earlier invocation's job: not this run's
        _row("audit", 1011.0, None),  # never ended
    ]
    times = stage_times(rows, since=since)
    assert list(times) == ["discover", "plan", "execute"]
    d = times["discover"]
    assert (d.jobs, d.first_start_s, d.last_end_s, d.span_s) == (3, 1.0, 7.0, 6.0)
    assert d.busy_s == pytest.approx(2.0 + 5.0 + 1.0)
    assert d.median_s == 2.0
    assert times["execute"].median_s == 4.0


def test_median_of_an_even_count_and_no_rows() -> None:
    rows = [_row("plan", 0.0, 1.0, 0), _row("plan", 0.0, 3.0, 1)]
    assert stage_times(rows, since=0.0)["plan"].median_s == 2.0
    assert stage_times([], since=0.0) == {}
