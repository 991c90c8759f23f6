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

import asyncio
import json
import os
import re
import shutil
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at import
os.environ["HARBOR_TELEMETRY"] = "0"

from harbor.agents.base import BaseAgent  # noqa: E402
from harbor.environments.base import BaseEnvironment, ExecResult  # noqa: E402
from harbor.job import Job  # noqa: E402
from harbor.models.agent.context import AgentContext  # noqa: E402
from harbor.models.job.config import DatasetConfig, JobConfig  # noqa: E402
from harbor.models.trial.config import AgentConfig, EnvironmentConfig  # noqa: E402
from harbor.models.trial.result import TrialResult  # noqa: E402

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


class HostDirEnvironment(BaseEnvironment):
    """A host directory in place of the container; ``exec`` runs bash there with the
    container paths rewritten under it (``ROOT`` names the directory)."""

    _PATHS = re.compile(r"(?<![\w.$/-])/(?=(?:logs|tests|solution|app|var)(?:/|\b))")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._root = WORK / "sandboxes" / self.session_id

    @staticmethod
    def type() -> str:
        return "host-dir"

    def _validate_definition(self) -> None:
        pass

    def _host(self, path: str) -> Path:
        return self._root / path.lstrip("/")

    async def start(self, force_build: bool) -> None:
        for sub in ("app", "logs/agent", "logs/verifier", "logs/artifacts"):
            (self._root / sub).mkdir(parents=True, exist_ok=True)

    async def stop(self, delete: bool) -> None:
        shutil.rmtree(self._root, ignore_errors=True)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        target = self._host(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source_path, target)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        shutil.copytree(source_dir, self._host(target_dir), dirs_exist_ok=True)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self._host(source_path), target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        source = self._host(source_dir)
        if source.is_dir():
            shutil.copytree(source, target_dir, dirs_exist_ok=True)

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        command = self._PATHS.sub(str(self._root) + "/", command)
        where = self._host(cwd) if cwd else self._root
        where.mkdir(parents=True, exist_ok=True)
        process = await asyncio.create_subprocess_exec(
            "bash", "-c", command, cwd=where,
            env={**os.environ, **(env or {}), "ROOT": str(self._root)},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout_sec)
        return ExecResult(stdout=stdout.decode(), stderr=stderr.decode(), return_code=process.returncode or 0)


class PlannedAgent(BaseAgent):
    """Runs its plan's commands (the plan is named by the job)."""

    @staticmethod
    def name() -> str:
        return "planned"

    def version(self) -> str:
        return "1.0.0"

    async def setup(self, environment: BaseEnvironment) -> None:
        return

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        plan = os.environ["RSR_RECORD_PLAN"]
        for command in PLANS[plan]:
            result = await environment.exec(command)
            assert result.return_code == 0, (command, result.stderr)


async def grade(plan: str) -> dict[str, dict[str, Any]]:
    os.environ["RSR_RECORD_PLAN"] = plan
    config = JobConfig(
        job_name=f"separate-{plan}",
        jobs_dir=WORK / "jobs",
        n_attempts=1,
        n_concurrent_trials=1,
        quiet=True,
        skip_credential_checks=True,
        agents=[AgentConfig(import_path=f"{MODULE}:PlannedAgent", override_timeout_sec=30)],
        datasets=[DatasetConfig(path=TASKS)],
        environment=EnvironmentConfig(import_path=f"{MODULE}:HostDirEnvironment"),
    )
    job = await Job.create(config)
    await job.run()
    out: dict[str, dict[str, Any]] = {}
    for path in sorted((WORK / "jobs" / config.job_name).glob("*/result.json")):
        result = TrialResult.model_validate_json(path.read_text())
        out[result.task_name.split("/")[-1]] = {
            "rewards": result.verifier_result.rewards if result.verifier_result else None,
            "exception": result.exception_info.exception_type if result.exception_info else None,
        }
    return out


def main() -> int:
    shutil.rmtree(WORK, ignore_errors=True)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    recorded: dict[str, Any] = {"harbor": version("harbor"), "plans": PLANS, "rewards": {}}
    for plan in PLANS:
        for task, outcome in asyncio.run(grade(plan)).items():
            recorded["rewards"].setdefault(task, {})[plan] = outcome
    (TASKS / "expected.json").write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
    print(json.dumps(recorded["rewards"], indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
