"""What the recorders that run Harbor's own ``Job`` share (``record_harbor_steps.py``,
``record_harbor_verifier.py``, ``record_harbor_jobs.py``; each says what it records).

Docker is not needed to run Harbor's trials: a directory on the host plays each container
(:class:`HostDirEnvironment`), and an agent acts out a plan (:class:`PlannedAgent`).
Harbor imports both by an import path string (``"<module>:HostDirEnvironment"``), so each
recorder subclasses them in its own module, saying where its sandboxes live and what
differs, and names its own module to Harbor (:func:`run_job`). Import this module before
Harbor: it sets the environment Harbor reads when it loads.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any, ClassVar

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at import
os.environ["HARBOR_TELEMETRY"] = "0"  # harbor/telemetry.py: no PostHog events

from harbor.agents.base import BaseAgent  # noqa: E402
from harbor.environments.base import BaseEnvironment, ExecResult  # noqa: E402
from harbor.job import Job  # noqa: E402
from harbor.models.job.config import DatasetConfig, JobConfig  # noqa: E402
from harbor.models.job.result import JobResult  # noqa: E402
from harbor.models.trial.config import AgentConfig, EnvironmentConfig  # noqa: E402
from harbor.models.trial.result import TrialResult  # noqa: E402


class HostDirEnvironment(BaseEnvironment):
    """A host directory in place of the container; ``exec`` runs bash there with the
    container paths rewritten under it (``ROOT`` names the directory).

    A recorder's subclass sets :attr:`SANDBOXES` and, where its tasks need it, the
    container paths mapped under the directory (:attr:`MOUNTS`), the directories
    ``start`` makes (:attr:`DIRS`) and where ``exec`` runs without a ``cwd`` (:attr:`CWD`).
    """

    SANDBOXES: ClassVar[Path]
    """One directory per session (``<SANDBOXES>/<session_id>``)."""
    MOUNTS: ClassVar[tuple[str, ...]] = ("logs", "tests", "solution", "app")
    DIRS: ClassVar[tuple[str, ...]] = ("app", "logs/agent", "logs/verifier", "logs/artifacts")
    CWD: ClassVar[str] = "/app"
    _PATHS: ClassVar[re.Pattern[str]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        mounts = "|".join(cls.MOUNTS)
        cls._PATHS = re.compile(rf"(?<![\w.$/-])/(?=(?:{mounts})(?:/|\b))")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._root = self.SANDBOXES / self.session_id

    @staticmethod
    def type() -> str:
        return "host-dir"

    def _validate_definition(self) -> None:
        pass

    def _host(self, path: str) -> Path:
        return self._root / path.lstrip("/")

    async def start(self, force_build: bool) -> None:
        for sub in self.DIRS:
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
        where = self._host(cwd or self.CWD)
        where.mkdir(parents=True, exist_ok=True)
        process = await asyncio.create_subprocess_exec(
            "bash", "-c", command, cwd=where,
            env={**os.environ, **(env or {}), "ROOT": str(self._root)},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout_sec)
        return ExecResult(
            stdout=stdout.decode(), stderr=stderr.decode(), return_code=process.returncode or 0
        )


class PlannedAgent(BaseAgent):
    """An agent with nothing to set up; a recorder's subclass says in ``run`` what its
    plan does (and may report another name and version)."""

    @staticmethod
    def name() -> str:
        return "planned"

    def version(self) -> str:
        return "1.0.0"

    async def setup(self, environment: BaseEnvironment) -> None:
        return


async def run_job(
    work: Path,
    module: str,
    name: str,
    agents: list[AgentConfig],
    datasets: list[DatasetConfig],
    n_attempts: int = 1,
    environment_kwargs: dict[str, Any] | None = None,
) -> JobResult:
    """Harbor's ``Job.create(JobConfig(...))`` then ``Job.run()``, one trial at a time, in
    ``<work>/jobs/<name>``, with ``module``'s ``HostDirEnvironment`` as the environment."""
    config = JobConfig(
        job_name=name,
        jobs_dir=work / "jobs",
        n_attempts=n_attempts,
        n_concurrent_trials=1,  # the plans are in run order
        quiet=True,
        skip_credential_checks=True,
        agents=agents,
        datasets=datasets,
        environment=EnvironmentConfig(
            import_path=f"{module}:HostDirEnvironment", kwargs=environment_kwargs or {}
        ),
    )
    job = await Job.create(config)
    return await job.run()


def trial_results(work: Path, name: str) -> list[TrialResult]:
    """The ``result.json`` of each trial of job ``name`` (:func:`run_job`), by directory."""
    return [
        TrialResult.model_validate_json(path.read_text())
        for path in sorted((work / "jobs" / name).glob("*/result.json"))
    ]


def outcome(result: Any) -> dict[str, Any]:
    """A trial's or a step's rewards and the type of its exception (``None`` for none)."""
    return {
        "rewards": result.verifier_result.rewards if result.verifier_result else None,
        "exception": result.exception_info.exception_type if result.exception_info else None,
    }


def record_plans(
    work: Path,
    plans: dict[str, Any],
    run_plan: Callable[[str], Awaitable[dict[str, Any]]],
    key: str,
    out: Path,
) -> None:
    """Run each plan (``run_plan(plan)``: each task's outcome) from an empty ``work``, write
    ``{"harbor": <version>, "plans": plans, key: {task: {plan: outcome}}}`` to ``out``,
    and print the outcomes."""
    shutil.rmtree(work, ignore_errors=True)
    recorded: dict[str, Any] = {"harbor": version("harbor"), "plans": plans, key: {}}
    for plan in plans:
        for task, result in asyncio.run(run_plan(plan)).items():
            recorded[key].setdefault(task, {})[plan] = result
    out.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
    print(json.dumps(recorded[key], indent=2, sort_keys=True))
