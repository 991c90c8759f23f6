"""Record how Harbor 0.26.0 runs a multi-step task (``[[steps]]``).

Runs on demand, not in CI: Harbor needs Python >= 3.12.

    python3.12 -m venv /tmp/harbor026 && /tmp/harbor026/bin/pip install harbor==0.26.0
    /tmp/harbor026/bin/python scripts/record_harbor_steps.py

Harbor's own code runs every trial: ``Job.create(JobConfig(...))`` then ``Job.run()``,
whose ``MultiStepTrial`` (``harbor/trial/multi_step.py``) runs the steps in order in one
environment: each step's ``workdir/`` upload and ``setup.sh``, the agent on the step's
instruction, the step's verifier (the task's ``tests/`` with the step's over them), the
``min_reward`` gate, and the trial's reward by ``multi_step_reward_strategy``. Docker is
not needed: a host directory plays the container (:class:`HostDirEnvironment`; container
paths are mapped under it, and the tasks' scripts read ``$ROOT``, empty in a container),
and :class:`PlannedAgent` runs what its plan says for the step it is given, recording
each instruction it receives.

A step whose verifier is ``separate`` (``steps-separate``) takes Harbor's own path too:
after the step's agent, ``ArtifactHandler`` downloads the task's and the step's
``artifacts`` and ``/logs/artifacts`` from the agent's environment, Harbor creates a
*second* environment through the same factory (session ``<trial>__verifier__<step>``:
here a fresh, empty host directory, as the tasks' images hold nothing but ``WORKDIR /app``),
uploads the artifacts and runs the verifier there; the agent's environment stops only
after the last step. Harbor's default is no bind mounts (``auto_mounting`` off), so
``/logs/artifacts`` is downloaded from the environment as it is here.

The tasks are ``tests/tasks/harbor_steps/<task>/``. Output, replaced on every run:
``tests/tasks/harbor_steps/expected.json``: per (task, plan) the instructions the agent
got, in order, each step's rewards and exception, and the trial's rewards.
``tests/rsr/test_steps_harbor.py`` replays each plan through our episode runner (the
Terminus 2 harness typing the plan, in real Docker sandboxes) and compares (a crashed
step's verifier is the one deliberate difference: a permanent error here).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for _harbor_recording, and MODULE
# when Harbor imports it by name

import _harbor_recording as recording  # noqa: E402  (first: it sets Harbor's environment)
from harbor.environments.base import BaseEnvironment, ExecResult  # noqa: E402
from harbor.models.agent.context import AgentContext  # noqa: E402
from harbor.models.job.config import DatasetConfig  # noqa: E402
from harbor.models.trial.config import AgentConfig  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TASKS = REPO / "tests" / "tasks" / "harbor_steps"
WORK = Path("/tmp/harbor-record-steps")
MODULE = "record_harbor_steps"
WORKDIR = "/app"
"""The containers' working directory (the tasks' Dockerfiles say ``WORKDIR /app``)."""

# What the agent types at each step, per plan (container paths). Step names are unique
# across the tasks, so one plan covers all of them.
STALL = "#stall"
"""Not a command: the agent keeps working (never ends its turn) until its timeout."""
RIGHT = {
    "create": ["mkdir -p /app/data", "echo alpha > /app/data/a.txt"],
    "extend": ["cp /app/seeded /app/data/b.txt"],
    "finish": ["echo gamma > /app/data/c.txt", "echo 'wrote c.txt' > /app/data/notes.md"],
    "one": ["echo 1 > /app/one.txt"],
    "two": ["echo 2 > /app/two.txt"],
    # steps-separate: each step also leaves what its verifiers may or may not see.
    "draft": ["mkdir -p /logs/artifacts", "echo drafted > /logs/artifacts/log.txt",
              "echo draft > /app/draft.txt", "echo notes > /app/scratch.txt"],
    "review": ["mkdir -p /app/report", "echo reviewed > /app/report/review.txt"],
    "publish": ["cp /app/draft.txt /app/report/final.txt"],
}
PLANS: dict[str, dict[str, list[str]]] = {
    "all": RIGHT,
    # The gated step fails: the last step of steps-gated never runs.
    "second-wrong": {**RIGHT, "extend": ["echo wrong > /app/data/b.txt"], "two": ["echo 3 > /app/two.txt"],
                     "review": ["mkdir -p /app/report", "echo wrong > /app/report/review.txt"]},
    # An ungated first step fails: the rest still run; the last leaves no notes (style 0).
    # steps-separate: the answer is written outside the artifact path (/app/scratch.txt,
    # /app/draft.txt missing), which its separate verifier cannot see; the shared second
    # step sees it, and the last step's answer, copied from it into the artifact, counts.
    "first-wrong": {**RIGHT, "create": ["mkdir -p /app/data", "echo omega > /app/data/a.txt"],
                    "finish": ["echo gamma > /app/data/c.txt"], "one": ["echo 0 > /app/one.txt"],
                    "draft": ["echo draft > /app/scratch.txt"],
                    "publish": ["cp /app/scratch.txt /app/report/final.txt"]},
    # Nothing done: steps-gated's second setup.sh fails (no /app/data), ending the trial;
    # steps-separate's artifacts are all missing.
    "nothing": {name: [] for name in RIGHT},
    # The second step's verifier writes no reward: Harbor ends the trial and scores the
    # steps before it (steps-gated: 1.0 from its first step alone; steps-final: none).
    # steps-separate: its last step's separate verifier crashes on the artifact.
    "verifier-crash": {**RIGHT, "extend": ["echo crash > /app/data/b.txt"], "two": ["echo crash > /app/two.txt"],
                       "publish": ["echo crash > /app/report/final.txt"]},
    # The agent does the first step of steps-final, then never finishes: the step's 10 s
    # agent timeout ends its turn; Harbor still grades the step and runs the next.
    "agent-timeout": {**RIGHT, "one": [*RIGHT["one"], STALL]},
}


def step_instructions() -> dict[str, str]:
    """Each step's instruction text (stripped) → the step's name."""
    return {
        (step / "instruction.md").read_text().strip(): step.name
        for step in sorted(TASKS.glob("*/steps/*")) if (step / "instruction.md").is_file()
    }


class HostDirEnvironment(recording.HostDirEnvironment):
    """A host directory in place of the container (:mod:`_harbor_recording`), with the
    tasks' ``tests`` made at start, and ``pwd`` answering the container's ``WORKDIR``."""

    SANDBOXES = WORK / "sandboxes"
    DIRS = ("app", "logs/agent", "logs/verifier", "logs/artifacts", "tests")
    CWD = WORKDIR

    async def exec(self, command: str, *args: Any, **kwargs: Any) -> ExecResult:
        if command.strip() == "pwd":  # the container's working directory, not the host's
            return ExecResult(stdout=WORKDIR + "\n", stderr="", return_code=0)
        return await super().exec(command, *args, **kwargs)


RECEIVED: list[str] = []
"""Every instruction the agent was given, in order (one trial runs at a time). Harbor
imports the agent by name (``record_harbor_steps:PlannedAgent``): read it through that
module (:func:`received`), not ``__main__``."""


def received() -> list[str]:
    import record_harbor_steps  # the module Harbor imported the agent from

    return record_harbor_steps.RECEIVED


class PlannedAgent(recording.PlannedAgent):
    """Runs, for the step whose instruction it is given, what the plan says."""

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        RECEIVED.append(instruction)
        step = step_instructions()[instruction.strip()]
        for command in PLANS[os.environ["RSR_RECORD_PLAN"]][step]:
            if command == STALL:
                await asyncio.sleep(3600)  # Harbor's step timeout cancels it
            result = await environment.exec(command)
            assert result.return_code == 0, (command, result.stderr)


async def run_plan(plan: str) -> dict[str, dict[str, Any]]:
    os.environ["RSR_RECORD_PLAN"] = plan
    out: dict[str, dict[str, Any]] = {}
    for task in sorted(p for p in TASKS.iterdir() if (p / "task.toml").is_file()):
        received().clear()
        name = f"steps-{plan}-{task.name}"
        await recording.run_job(
            WORK, MODULE, name,
            agents=[AgentConfig(import_path=f"{MODULE}:PlannedAgent")],
            datasets=[DatasetConfig(path=TASKS, task_names=[task.name])],
        )
        results = recording.trial_results(WORK, name)
        assert len(results) == 1, results
        result = results[0]
        steps = [
            {"name": step.step_name, **recording.outcome(step)}
            for step in result.step_results or []
        ]
        out[task.name] = {"instructions": list(received()), "steps": steps, **recording.outcome(result)}
    return out


def main() -> int:
    recording.record_plans(WORK, PLANS, run_plan, "trials", TASKS / "expected.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
