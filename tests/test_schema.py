from __future__ import annotations

import msgspec
import pytest

from rsr_async.schema import (
    Command,
    EpisodeResult,
    JobKey,
    Message,
    Task,
    Trajectory,
    Usage,
    decode,
    encode,
)


def _trajectory() -> Trajectory:
    use = Usage(prompt_tokens=100, completion_tokens=20, cached_tokens=80, latency_s=0.5, requests=1)
    return Trajectory(
        task="t",
        harness="terminus2",
        messages=[
            Message(role="user", content="do it", origin="task"),
            Message(
                role="assistant",
                content="{}",
                origin="model",
                turn=1,
                usage=use,
                commands=(Command(keystrokes="ls\n", duration=0.1), Command(keystrokes="pwd\n")),
            ),
            Message(role="user", content="a b", origin="env", turn=1),
            Message(role="user", content="Are you sure?", origin="harness", turn=1),
            Message(role="assistant", content="{}", origin="model", turn=2, usage=use,
                    commands=(Command(keystrokes="cat x\n"),)),
        ],
    )


def test_round_trip_result() -> None:
    result = EpisodeResult(
        key=JobKey(stage="discover", task="t", harness="terminus2", attempt=2),
        status="succeeded",
        end_reason="completed",
        reward=1.0,
        rewards={"reward": 1.0},
        trajectory=_trajectory(),
    )
    assert decode(encode(result), EpisodeResult) == result


def test_trajectory_helpers() -> None:
    traj = _trajectory()
    assert traj.commands() == ["ls\n", "pwd\n", "cat x\n"]
    assert traj.commands(skip_first=1) == ["cat x\n"]
    total = traj.usage()
    assert (total.prompt_tokens, total.cached_tokens, total.requests) == (200, 160, 2)
    assert total.cached_share == pytest.approx(0.8)


def test_job_key_is_deterministic_text() -> None:
    key = JobKey(stage="execute", task="fix-git", harness="terminus2", attempt=0, runbook="r1", execution=3)
    assert str(key) == "execute/fix-git/terminus2/a0/r1/e3"
    assert key == JobKey(stage="execute", task="fix-git", harness="terminus2", runbook="r1", execution=3)


def test_bad_origin_rejected() -> None:
    raw = b'{"role": "user", "content": "x", "origin": "secret"}'
    with pytest.raises(msgspec.ValidationError, match="origin"):
        decode(raw, Message)


def test_task_defaults() -> None:
    task = Task(name="t", path="/x", instruction="hi")
    assert task.verifier_timeout_s == 600 and not task.allow_internet
