"""A multi-step episode is exported one conversation per step: each step was a fresh chat
(as Harbor runs Terminus 2 anew per step), so joining them would teach a context the
model never had. Only steps with full marks are kept."""

from __future__ import annotations

from pathlib import Path

from rsr_async.engine import Job, Store
from rsr_async.export import collect_records
from rsr_async.schema import (
    EpisodeResult,
    EpisodeSpec,
    JobKey,
    Message,
    StepResult,
    Task,
    TaskStep,
    Trajectory,
)


def _chat(instruction: str, reply: str) -> list[Message]:
    return [Message(role="user", origin="task", content=f"Task Description:\n{instruction}"),
            Message(role="assistant", origin="model", content=reply)]


def test_each_step_with_full_marks_is_its_own_conversation(tmp_path: Path) -> None:
    steps = (TaskStep(name="a", instruction="first"), TaskStep(name="b", instruction="second"),
             TaskStep(name="c", instruction="third"))
    task = Task(name="staged", path="", instruction="first", steps=steps)
    key = JobKey(stage="discover", task="staged", harness="terminus2")
    messages = [*_chat("first", "one"), *_chat("second", "two"), *_chat("third", "three")]
    result = EpisodeResult(
        key=key, status="succeeded", reward=1.0, rewards={"reward": 1.0}, turns=3,
        trajectory=Trajectory(task="staged", harness="terminus2", messages=messages),
        steps=(StepResult(name="a", first_message=0, reward=1.0, rewards={"reward": 1.0}),
               StepResult(name="b", first_message=2, reward=0.5, rewards={"reward": 0.5}),
               StepResult(name="c", first_message=4, reward=1.0, rewards={"reward": 1.0})),
    )
    with Store.open(tmp_path) as store:
        store.put_result(result, job=Job.episode(EpisodeSpec(key=key, task=task)), wait=False)
        store.flush()
    with Store.open_readonly(tmp_path) as store:
        records = collect_records(store)
    baseline = [r for r in records if r.set == "baseline"]
    assert [r.key for r in baseline] == [f"{key}#a", f"{key}#c"]  # b had half marks
    assert [[m.content for m in r.trajectory.messages] for r in baseline] == [
        ["Task Description:\nfirst", "one"], ["Task Description:\nthird", "three"]]
    assert {r.set for r in records} == {"baseline", "direct"}  # Terminus 2: the SFT set too
