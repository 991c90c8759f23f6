"""Multi-step tasks run as Harbor 0.26.0 runs them.

``scripts/record_harbor_steps.py`` ran Harbor's own ``Job`` (its ``MultiStepTrial``) on
the tasks in ``tests/tasks/harbor_steps/`` under six plans of the agent and recorded, per
task and plan, the instructions the agent got in order, each step's rewards, which steps
ran, and the trial's rewards. Here the same plans are typed by a model stand-in through
our engine (Engine, EpisodeRunner, the Terminus 2 harness, real Docker sandboxes and the
real verifier) and must come out the same. ``steps-separate`` mixes verifier modes by
step (separate, shared, separate, with task and step artifacts); its rewards record
which of the agent's files each step's verifier could see, so a separate verifier that
saw more (or less) than Harbor's fresh environment with the artifacts fails here.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
from anyio.lowlevel import checkpoint

from rsr_async.config import Config, EngineConfig, RunConfig, SandboxConfig
from rsr_async.engine import Engine, Job
from rsr_async.errors import is_permanent_error
from rsr_async.llm.base import ChatMessage, Completion
from rsr_async.rsr.episode import EpisodeRunner
from rsr_async.sandbox import SandboxPool
from rsr_async.schema import EpisodeResult, EpisodeSpec, JobKey, Usage
from rsr_async.tasks import load_task

pytestmark = pytest.mark.docker

STEPS = Path(__file__).resolve().parents[1] / "tasks" / "harbor_steps"
RECORDED = json.loads((STEPS / "expected.json").read_text())
PLANS: dict[str, dict[str, list[str]]] = RECORDED["plans"]
PLAN_NAMES = sorted(PLANS)
STALL = "#stall"
"""In a plan (scripts/record_harbor_steps.py): the agent never ends its turn at that step."""


def _reply(commands: Sequence[str], done: bool) -> str:
    keys = [{"keystrokes": f"{c}\n", "duration": 1.0} for c in commands]
    return json.dumps({"analysis": "a", "plan": "p", "commands": keys, "task_complete": done})


class PlanModel:
    """A model stand-in that types a recorded plan: in each fresh chat (one per step) it
    finds the step by its instruction, types that step's commands of the episode's plan
    (named by the job's attempt) and claims completion, then confirms it."""

    def __init__(self, instructions: dict[str, str]) -> None:
        self._instructions = instructions  # instruction → step name
        self.first_prompts: dict[str, list[str]] = {}  # episode → each chat's first prompt
        self.fresh: dict[str, list[bool]] = {}

    @property
    def model_name(self) -> str:
        return "plan-typist"

    @property
    def context_length(self) -> int:
        return 32768

    async def chat(
        self, messages: Sequence[ChatMessage], *, affinity: str, max_tokens: int | None = None,
        temperature: float | None = None, seed: int | None = None,
    ) -> Completion:
        await checkpoint()
        first = messages[0]["content"]
        step = next(name for text, name in self._instructions.items() if text in first)
        plan = PLAN_NAMES[int(affinity.split("/a")[1].split("/")[0])]
        commands = [c for c in PLANS[plan][step] if c != STALL]
        stall = STALL in PLANS[plan][step]  # never claim completion: the step's timeout ends it
        if len(messages) == 1:
            self.first_prompts.setdefault(affinity, []).append(first)
            text = _reply(commands, done=not stall)
        elif stall:  # keep working: real time passes on the terminal
            text = json.dumps({"analysis": "a", "plan": "p", "task_complete": False,
                               "commands": [{"keystrokes": "sleep 1\n", "duration": 1.5}]})
        else:
            text = _reply([], done=True)
        return Completion(text=text, finish_reason="stop", usage=Usage(requests=1))


@pytest.mark.timeout(900)
async def test_recorded_plans_run_as_harbor_ran_them(tmp_path: Path) -> None:
    assert RECORDED["harbor"] == "0.26.0"
    tasks = {name: load_task(STEPS / name) for name in sorted(RECORDED["trials"])}
    instructions = {s.instruction: s.name for t in tasks.values() for s in t.steps}
    model = PlanModel(instructions)
    specs = [
        EpisodeSpec(key=JobKey(stage="discover", task=name, harness="terminus2", attempt=index), task=task)
        for name, task in tasks.items() for index, _ in enumerate(PLAN_NAMES)
    ]
    config = Config(run=RunConfig(concurrency=4),
                    engine=EngineConfig(progress="none", infra_retries=1, store_batch_ms=10.0))
    async with SandboxPool(SandboxConfig(api_timeout_s=60.0), run_id=f"test-steps-{uuid.uuid4().hex[:8]}") as pool:
        runner = EpisodeRunner(pool=pool, model=model, harness=config.harness, scripted=False)
        async with Engine(config, runner=runner, run_dir=tmp_path / "run") as engine:
            results = [r async for r in engine.run([Job.episode(s) for s in specs], stage="discover")]
        assert await pool.containers() == []
    assert len(results) == len(specs)
    for result in sorted(results, key=lambda r: str(r.key)):
        assert isinstance(result, EpisodeResult)
        plan = PLAN_NAMES[result.key.attempt]
        harbor = RECORDED["trials"][result.key.task][plan]
        where = f"{result.key.task} under plan {plan!r}"
        assert result.status in ("succeeded", "failed"), (where, result.error)
        crashed = [s["name"] for s in harbor["steps"] if s["exception"] == "RewardFileNotFoundError"]
        if crashed:
            # Our deliberate difference: a step's verifier that leaves no reward is the task's
            # permanent error, never graded (Harbor ends the trial and scores the steps before
            # it: steps-gated passes with 1.0 from its first step alone).
            assert result.status == "failed" and is_permanent_error(result.error), (where, result.error)
            assert f"step {crashed[0]!r}: " in (result.error or "") and result.reward is None, where
            assert [s["name"] for s in harbor["steps"]][-1] == crashed[0]  # Harbor ran no step after it
            continue
        # The steps that ran, and each one's rewards (None: not graded, its setup failed).
        assert [s.name for s in result.steps] == [s["name"] for s in harbor["steps"]], where
        for ours, theirs in zip(result.steps, harbor["steps"], strict=True):
            # Harbor's AgentTimeoutError on a step: graded all the same, the next step runs.
            assert (ours.end_reason == "timeout") is (theirs["exception"] == "AgentTimeoutError"), (where, ours)
            if theirs["rewards"] is None:
                assert ours.reward is None and "setup.sh exited" in (ours.error or ""), (where, ours)
            else:
                expected = {k: float(v) for k, v in theirs["rewards"].items()}
                assert ours.rewards == expected, (where, ours.name, ours.verifier_output)
        assert result.rewards == {k: float(v) for k, v in harbor["rewards"].items()}, where
        assert result.status == ("succeeded" if harbor["rewards"]["reward"] == 1.0 else "failed")
        # The instructions, in order, each at the start of a fresh chat.
        prompts = model.first_prompts[str(result.key)]
        assert len(prompts) == len(harbor["instructions"]), where
        for prompt, instruction in zip(prompts, harbor["instructions"], strict=True):
            assert f"Task Description:\n{instruction.strip()}\n" in prompt, where
        # The first step's chat opens on a fresh terminal's screen; later steps' on the same
        # terminal, showing what is new since the previous step's last observation (Harbor's
        # get_incremental_output on its one TmuxSession: the prompt line at least).
        assert "Current terminal state:\nCurrent Terminal Screen:" in prompts[0], where
        for prompt in prompts[1:]:
            assert "Current terminal state:\nNew Terminal Output:\n" in prompt, (where, prompt[-300:])
        # Each step's fresh chat begins in the trajectory where the step says.
        assert result.trajectory is not None
        by_name = {s.name: s for s in tasks[result.key.task].steps}
        for step in result.steps[: len(prompts)]:
            opening = result.trajectory.messages[step.first_message]
            assert opening.origin == "task" and by_name[step.name].instruction in opening.content, where


@pytest.mark.timeout(900)
async def test_rsrt_checks_each_step_against_the_steps_own_tests(tmp_path: Path) -> None:
    """RSRT's hidden check at a step's completion claim grades that step's tests (the
    task's shared ``tests/`` with the step's over them) on a copy of the sandbox (a
    separate step's: in a fresh sandbox with the artifacts): with every step done right,
    each claim passes at once and the rewards are Harbor's."""
    tasks = {name: load_task(STEPS / name) for name in sorted(RECORDED["trials"])}
    model = PlanModel({s.instruction: s.name for t in tasks.values() for s in t.steps})
    plan = PLAN_NAMES.index("all")
    specs = [EpisodeSpec(key=JobKey(stage="discover", task=name, harness="rsrt", attempt=plan),
                         task=task, harness="rsrt") for name, task in tasks.items()]
    config = Config(run=RunConfig(concurrency=2),
                    engine=EngineConfig(progress="none", infra_retries=1, store_batch_ms=10.0))
    async with SandboxPool(SandboxConfig(api_timeout_s=60.0), run_id=f"test-steps-{uuid.uuid4().hex[:8]}") as pool:
        runner = EpisodeRunner(pool=pool, model=model, harness=config.harness, scripted=False)
        async with Engine(config, runner=runner, run_dir=tmp_path / "run") as engine:
            results = [r async for r in engine.run([Job.episode(s) for s in specs], stage="discover")]
        assert await pool.containers() == []
    assert len(results) == len(specs)
    for result in results:
        assert isinstance(result, EpisodeResult) and result.trajectory is not None
        harbor = RECORDED["trials"][result.key.task]["all"]
        assert result.rewards == {k: float(v) for k, v in harbor["rewards"].items()}, (result.key, result.error)
        claims = [m.content for m in result.trajectory.messages if m.content.startswith("[rsrt] completion claim")]
        assert len(claims) == len(harbor["steps"]) and all("hidden tests passed" in c for c in claims), claims
