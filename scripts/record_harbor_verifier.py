"""Record how Harbor 0.26.0 grades a task in its ``separate`` verifier mode with a collect hook.

Runs on demand, not in CI: Harbor needs Python >= 3.12.

    python3.12 -m venv /tmp/harbor026 && /tmp/harbor026/bin/pip install harbor==0.26.0
    /tmp/harbor026/bin/python scripts/record_harbor_verifier.py

Harbor's own code grades: ``Job.create(JobConfig(...))`` then ``Job.run()``, whose trial
runs ``[[verifier.collect]]`` in the agent's environment, collects the task's
``artifacts`` and ``/logs/artifacts`` (``ArtifactHandler``), starts a *second*
environment for the verifier, uploads the artifacts there, and runs Harbor's
``Verifier`` (tests upload, ``test.sh``, reward parsing). Docker is not needed: a host
directory plays each container (:class:`HostDirEnvironment`; container paths are mapped
under it), and :class:`PlannedAgent` does what its trial's plan says (write the agent's
files, or not).

The tasks are ``tests/tasks/harbor_separate/<task>/`` (their ``test.sh`` runs
under Harbor's host directory, ``$ROOT``, and in a container, where ``$ROOT`` is empty).
Output, replaced on every run: ``tests/tasks/harbor_separate/expected.json``,
the rewards Harbor recorded per (task, plan). ``tests/tasks/test_verifier_modes.py``
replays each plan in real Docker sandboxes through :func:`rsr_async.tasks.grade` and
compares.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for _harbor_recording, and MODULE
# when Harbor imports it by name

import _harbor_recording as recording  # noqa: E402  (first: it sets Harbor's environment)
from harbor.environments.base import BaseEnvironment  # noqa: E402
from harbor.models.agent.context import AgentContext  # noqa: E402
from harbor.models.job.config import DatasetConfig  # noqa: E402
from harbor.models.trial.config import AgentConfig  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TASKS = REPO / "tests" / "tasks" / "harbor_separate"
WORK = Path("/tmp/harbor-record-verifier")
MODULE = "record_harbor_verifier"

# What the agent does, per plan: shell commands in its environment (container paths).
PLANS: dict[str, list[str]] = {
    "all": ["mkdir -p /var/lib/app /app", "echo 42 > /var/lib/app/counter", "echo done > /app/out.txt"],
    "counter-only": ["mkdir -p /var/lib/app", "echo 42 > /var/lib/app/counter"],
    "output-only": ["mkdir -p /app", "echo done > /app/out.txt"],
    "wrong": ["mkdir -p /var/lib/app /app", "echo 41 > /var/lib/app/counter", "echo done > /app/out.txt"],
    "nothing": [],
}


class HostDirEnvironment(recording.HostDirEnvironment):
    """A host directory in place of the container (:mod:`_harbor_recording`), with
    ``/var`` mapped under it too (the agent writes ``/var/lib/app``), and commands run at
    its root when no ``cwd`` is given."""

    SANDBOXES = WORK / "sandboxes"
    MOUNTS = ("logs", "tests", "solution", "app", "var")
    CWD = "/"


class PlannedAgent(recording.PlannedAgent):
    """Runs its plan's commands (the plan is named by the job)."""

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        plan = os.environ["RSR_RECORD_PLAN"]
        for command in PLANS[plan]:
            result = await environment.exec(command)
            assert result.return_code == 0, (command, result.stderr)


async def grade(plan: str) -> dict[str, dict[str, Any]]:
    os.environ["RSR_RECORD_PLAN"] = plan
    name = f"separate-{plan}"
    await recording.run_job(
        WORK, MODULE, name,
        agents=[AgentConfig(import_path=f"{MODULE}:PlannedAgent", override_timeout_sec=30)],
        datasets=[DatasetConfig(path=TASKS)],
    )
    return {
        result.task_name.split("/")[-1]: recording.outcome(result)
        for result in recording.trial_results(WORK, name)
    }


def main() -> int:
    recording.record_plans(WORK, PLANS, grade, "rewards", TASKS / "expected.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
