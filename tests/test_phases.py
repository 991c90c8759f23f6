"""The phase recorder (rsr_async.phases) on its own: sums, counts, the verification's
split, child tasks, summaries, and results stored before timing existed."""

from __future__ import annotations

import json
import time

import anyio
import msgspec

from rsr_async import phases
from rsr_async.schema import EpisodeResult, EpisodeTiming


def test_phases_add_up_per_episode_and_nothing_is_recorded_outside_one() -> None:
    with phases.phase("model"):  # no episode: a no-op
        pass
    phases.note_call(10.0, 1.0)
    with phases.recording() as recorder:
        assert phases.current() is recorder
        for _ in range(3):
            with phases.phase("model"):
                time.sleep(0.01)
        with phases.phase("commands"):
            time.sleep(0.02)
        recorder.add("teardown", 0.5)
        timing = recorder.timing()
    assert phases.current() is None
    assert timing.model_calls == 3 and timing.commands == 1
    assert 0.03 <= timing.model_s < timing.wall_s and timing.commands_s >= 0.02
    assert timing.teardown_s == 0.5
    rest = timing.wall_s - timing.model_s - timing.commands_s - 0.5
    assert abs(timing.other_s - max(0.0, rest)) < 1e-3


def test_a_verification_splits_at_the_first_exec_after_the_last_upload() -> None:
    with phases.recording() as recorder:
        with phases.phase("verify"):
            phases.note_call(120.0, 0.3)  # clear the way
            phases.note_call(0.0, 0.1)  # upload the tests
            phases.note_call(30.0, 2.0)  # the tests (a shorter limit than the control commands')
            phases.note_call(120.0, 0.2)  # logs
            phases.note_call(120.0, 0.1)  # reward
        with phases.phase("verify"):  # a second verification (RSRT) is split on its own
            phases.note_call(120.0, 1.0)  # nothing uploaded: the longest exec is the tests'
            phases.note_call(120.0, 0.5)
        with phases.phase("verify"):  # a verifier that says which call ran the tests
            phases.note_call(120.0, 0.25)
            phases.note_call(600.0, 0.5, tests=True)  # not the longest: said
            phases.note_call(120.0, 0.75)
        phases.note_call(5.0, 9.0)  # outside a verification: not counted
        timing = recorder.timing()
    assert (timing.verify_prepare_s, timing.verify_tests_s, timing.verify_reward_s) == (0.65, 3.5, 1.55)


async def test_a_child_task_records_into_its_own_episode() -> None:
    totals: dict[str, float] = {}

    async def episode(name: str, seconds: float) -> None:
        with phases.recording() as recorder:
            async with anyio.create_task_group() as tg:  # a reader task, as the shell starts
                tg.start_soon(child, seconds)
            totals[name] = recorder.timing().shell_s

    async def child(seconds: float) -> None:
        with phases.phase("shell"):
            await anyio.sleep(seconds)

    async with anyio.create_task_group() as tg:
        tg.start_soon(episode, "a", 0.05)
        tg.start_soon(episode, "b", 0.2)
    assert 0.05 <= totals["a"] < 0.2 <= totals["b"]


def test_summaries_skip_untimed_results_and_old_results_decode() -> None:
    timings = [EpisodeTiming(wall_s=w, verify_s=w / 2, prewarmed=w > 2, model_calls=4) for w in (1.0, 2.0, 3.0)]
    summary = phases.summarise_timings([*timings, EpisodeTiming()])
    assert summary is not None and (summary.episodes, summary.prewarmed, summary.model_calls) == (3, 1, 4)
    assert (summary.mean_s["wall"], summary.p50_s["verify"], summary.p90_s["wall"]) == (2.0, 1.0, 3.0)
    assert "verify" in phases.render_phases(summary) and "claim" not in phases.render_phases(summary)
    assert phases.summarise_timings([EpisodeTiming()]) is None
    old = {"key": {"stage": "discover", "task": "t"}, "status": "succeeded", "reward": 1.0}
    result = msgspec.json.decode(json.dumps(old).encode(), type=EpisodeResult)
    assert result.timing == EpisodeTiming() and result.timing.wall_s == 0
