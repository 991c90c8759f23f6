"""Record Harbor job directories for ``analysis.harbor`` (``analyze --harbor-jobs``),
with Harbor 0.25.0 or 0.26.0, each into its own directory (:data:`FIXTURE_DIRS`):
users analyze job directories of either version, so both recordings are kept and tested.

Runs on demand, not in CI: Harbor needs Python >= 3.12.

    python3.12 -m venv /tmp/harbor-venv && /tmp/harbor-venv/bin/pip install harbor==0.26.0
    /tmp/harbor-venv/bin/python scripts/record_harbor_jobs.py

What differs between the versions, as recorded: 0.26 made
``TrialResult.recorded_exceptions`` public (0.25: ``_recorded_exceptions``), renamed
``ErrorPolicy``'s fields to ``should_retry``/``should_grade``/``has_valid_reward`` and
dropped failure causes (``ErrorPolicy.cause``, ``TrialResult.failure_cause``); its
``result.json`` carries ``schema_version``, each exception's resolved ``policy`` and
``reward_valid``. 0.26 keeps the reward of ``NonZeroAgentExitCodeError`` and of unknown
exception types (0.25 does not), and verifies after ``ContextLengthExceededError``
(0.25 does not). The script reads whichever API the installed Harbor has and refuses
other versions until they are added to :data:`FIXTURE_DIRS`.

Harbor's own code writes every file: ``Job.create(JobConfig(...))`` then ``Job.run()``
(``harbor/job.py``) with the ``TrialQueue``, ``SingleStepTrial`` and ``Verifier`` of the
wheel, so each trial's ``config.json``/``result.json`` and each job's
``config.json``/``lock.json``/``result.json`` are what ``harbor run`` leaves. Docker is
not needed; two stand-ins take its place, both named in the recorded configs:

- :class:`HostDirEnvironment` (the environment's ``import_path``): a directory on the host
  plays the container (container paths ``/logs``, ``/tests``, ``/solution``, ``/app`` are
  mapped under it); ``exec`` runs the command with bash there. A plan can make ``start``
  raise Harbor's ``SandboxBuildFailedError``.
- :class:`ScriptedTerminus` (the agent's ``import_path``) reports itself as
  ``terminus-2`` with the configured model and does what a plan says: solve the task,
  leave it half done, do nothing, hang past its timeout (Harbor raises
  ``AgentTimeoutError`` and still verifies), exit non-zero (Harbor's
  ``NonZeroAgentExitCodeError``: verified; ``reward_valid`` is false in 0.25, true in
  0.26), or raise Harbor's ``ApiRateLimitError`` (verified, ``reward_valid`` false) or
  ``ContextLengthExceededError`` (not verified in 0.25; 0.26 verifies, and the reward
  is valid). The ``oracle`` agent is Harbor's own ``OracleAgent`` running
  ``solution/solve.sh``.

A task's ``tests/test.sh`` is a stand-in grader: it turns the answer the agent left in
``/app`` into ``reward.txt`` or ``reward.json`` (so partial credit is a real reward map read
by Harbor's verifier), writes nothing when told to (Harbor raises
``RewardFileNotFoundError``) and gives 0 when the agent left nothing.

Output, replaced on every run, under ``tests/analysis/fixtures/<dir>/`` where ``<dir>`` is
``harbor_jobs`` (0.25) or ``harbor_jobs_026`` (0.26):

- ``<dir>/<job>/…``: the job directories (two; three from 0.26), keeping
  the ``config.json`` and ``result.json`` files of the job and its trials (``lock.json``,
  logs, agent and verifier output are dropped); the work root's absolute path becomes
  ``/work/harbor-record`` and the repository's ``<repo>``. ``tb-sweep`` (terminus-2 with
  two models and the oracle, 3 tasks, 3 attempts) runs to its end. ``sec-rerun``
  (terminus-2 with one model, 2 tasks from 2 datasets, 3 attempts) has a cancelled
  trial, and its process is killed (SIGKILL) while its last trial runs: that trial's
  directory holds only its ``config.json`` (Harbor writes ``result.json`` when a trial
  ends) and the job's ``result.json`` is the live one, without ``finished_at``.
  ``steps-run`` (0.26 only: ``[[steps]]`` came with it; terminus-2 with one model, 3
  attempts) runs the multi-step tasks ``steps-gated`` and ``steps-final`` of
  ``tests/tasks/harbor_steps/`` (copied as the ``steps-mini`` dataset) through Harbor's
  ``MultiStepTrial``, with ``record_harbor_steps.py``'s per-step plans: every step
  passing, the gated step failing (the last step never runs), a step's verifier
  crashing (the trial ends there; the steps before it still make steps-gated's reward),
  and on steps-final the agent timing out on the first step, then the second step's
  verifier crashing (two exceptions, on two steps). Harbor records these failures on
  the steps (``step_results``), none on the trial.
- ``<dir>/expected.json``: the Harbor version (``harbor``) and Harbor's own figures:
  each job's ``JobResult.stats`` (n_trials, n_errors, the mean metric, pass@k, reward and
  exception stats per ``agent__model__dataset``), and per trial Harbor's
  ``reward_valid``, its recorded exceptions' policies (``policies``) and, 0.25 only, its
  ``failure_cause`` (``harbor/models/trial/result.py``) and, for a multi-step trial,
  its ``steps`` (each step that ran: name, rewards, exception type and policy), plus
  Harbor's whole error-policy table (``harbor/models/trial/error_policy.py``; ``retry``/``grade``/
  ``reward_valid``, and ``cause`` in 0.25), which ``tests/analysis/test_harbor_jobs.py``
  checks our classification against.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for _harbor_recording, and MODULE
# when Harbor imports it by name

import _harbor_recording as recording  # noqa: E402  (first: it sets Harbor's environment)
import record_harbor_steps as steps  # noqa: E402  (the multi-step tasks' plans)
from harbor.agents.installed.base import (  # noqa: E402
    ApiRateLimitError,
    NonZeroAgentExitCodeError,
)
from harbor.environments.base import (  # noqa: E402
    BaseEnvironment,
    ExecResult,
    SandboxBuildFailedError,
)
from harbor.llms.base import ContextLengthExceededError  # noqa: E402
from harbor.metrics.mean import Mean  # noqa: E402
from harbor.models.agent.context import AgentContext  # noqa: E402
from harbor.models.job.config import DatasetConfig  # noqa: E402
from harbor.models.job.result import JobResult, JobStats  # noqa: E402
from harbor.models.trial.config import AgentConfig, TrialConfig  # noqa: E402
from harbor.models.trial.error_policy import ERROR_POLICIES, UNKNOWN_ERROR_POLICY  # noqa: E402
from harbor.models.trial.result import TrialResult  # noqa: E402
from harbor.utils.pass_at_k import compute_pass_at_k_by_evals  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
HARBOR = version("harbor")
FIXTURE_DIRS = {"0.25": "harbor_jobs", "0.26": "harbor_jobs_026"}
"""Harbor's minor version -> where its recording goes: each version's recording is kept
(and tested), since users analyze job directories written by either."""
FIXTURES = REPO / "tests" / "analysis" / "fixtures" / FIXTURE_DIRS.get(
    ".".join(HARBOR.split(".")[:2]), "harbor_jobs_unknown"
)
WORK = Path("/tmp/harbor-record")
"""Where Harbor runs; its absolute path, in the recorded files, becomes ``STABLE``."""
STABLE = "/work/harbor-record"
MODULE = "record_harbor_jobs"
STEP_TASKS = REPO / "tests" / "tasks" / "harbor_steps"
"""The multi-step tasks (``[[steps]]``) of ``record_harbor_steps.py``, whose plans they
reuse; copied into the ``steps-mini`` dataset."""

# -- the tasks --------------------------------------------------------------------------

# dataset (Harbor's `source`) -> task dir -> (task.toml, kind of reward file)
DATASETS: dict[str, dict[str, tuple[str, str]]] = {
    "tb-mini": {
        "fix-git": ('[metadata]\ncategory = "software-engineering"\n', "txt"),
        "sort-logs": ('[metadata]\ncategory = "data-processing"\n', "json"),
        "build-cache": ('[metadata]\ncategory = "system-administration"\n', "json-reward"),
    },
    "sec-mini": {
        "crack-hash": (
            '[task]\nname = "sec/crack-hash"\n\n[metadata]\ncategory = "security"\n',
            "txt",
        ),
    },
}

# What a solved / half-done answer looks like per kind of reward file (the grader
# copies it to /logs/verifier).
ANSWERS: dict[str, dict[str, tuple[str, str]]] = {
    "txt": {"solve": ("answer.txt", "1"), "partial": ("answer.txt", "0")},
    "json": {  # several keys, no "reward": the main reward is their mean
        "solve": ("answer.json", '{"tests": 1.0, "format": 1.0}'),
        "partial": ("answer.json", '{"tests": 0.5, "format": 1.0}'),
    },
    "json-reward": {  # a "reward" key besides the others
        "solve": ("answer.json", '{"reward": 1.0, "unit": 1.0, "lint": 1.0}'),
        "partial": ("answer.json", '{"reward": 0.4, "unit": 0.6, "lint": 0.2}'),
    },
}

GRADER = """#!/bin/bash
# Stand-in grader (scripts/record_harbor_jobs.py): the agent's answer becomes the reward.
mkdir -p "$ROOT/logs/verifier"
if [ -f "$ROOT/app/no-reward" ]; then
  echo "the test harness crashed before writing a reward"
elif [ -f "$ROOT/app/answer.json" ]; then
  cp "$ROOT/app/answer.json" "$ROOT/logs/verifier/reward.json"
elif [ -f "$ROOT/app/answer.txt" ]; then
  cp "$ROOT/app/answer.txt" "$ROOT/logs/verifier/reward.txt"
else
  echo 0 > "$ROOT/logs/verifier/reward.txt"
fi
"""


STEP_DATASET = "steps-mini"
STEP_TASK_DIRS = ("steps-gated", "steps-final")
"""The multi-step tasks run (``MultiStepTrial``): ``steps-gated`` (three steps, the
second gated by ``min_reward``, the trial's reward the mean of the steps graded) and
``steps-final`` (two steps, the trial's reward the last step's)."""


def write_tasks(root: Path) -> None:
    """One directory per dataset (Harbor names a local dataset after its directory); the
    multi-step tasks are copied as they are."""
    for name in STEP_TASK_DIRS:
        shutil.copytree(STEP_TASKS / name, root / "datasets" / STEP_DATASET / name)
    for dataset, tasks in DATASETS.items():
        dataset_dir = root / "datasets" / dataset
        for name, (toml, kind) in tasks.items():
            task = dataset_dir / name
            (task / "environment").mkdir(parents=True)
            (task / "tests").mkdir()
            (task / "solution").mkdir()
            (task / "task.toml").write_text(
                'schema_version = "1.4"\n\n' + toml
                + "\n[verifier]\ntimeout_sec = 60.0\n\n[agent]\ntimeout_sec = 60.0\n"
            )
            (task / "instruction.md").write_text(f"Solve {name}.\n")
            (task / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\n")
            (task / "tests" / "test.sh").write_text(GRADER)
            file, content = ANSWERS[kind]["solve"]
            if name == "build-cache":  # the reference solution of this one is broken
                file, content = ANSWERS[kind]["partial"]
            (task / "solution" / "solve.sh").write_text(
                f"#!/bin/bash\necho '{content}' > \"$ROOT/app/{file}\"\n"
            )


# -- the plans: what each trial does ----------------------------------------------------

# (job, agent label, task dir) -> one action per attempt, in the order Harbor runs them.
# An action may be a sandbox one (`sandbox`: the environment never starts) or an agent
# one (the rest).
PLANS: dict[tuple[str, str, str], list[str]] = {
    # job 1: terminus-2 with two models and the oracle, 3 attempts
    ("tb-sweep", "terminus-2:gpt-a", "fix-git"): ["solve", "nothing", "solve"],
    ("tb-sweep", "terminus-2:gpt-a", "sort-logs"): ["partial", "solve", "timeout"],
    ("tb-sweep", "terminus-2:gpt-a", "build-cache"): ["partial", "ratelimit", "solve"],
    ("tb-sweep", "terminus-2:gpt-b", "fix-git"): ["nothing", "sandbox", "solve"],
    ("tb-sweep", "terminus-2:gpt-b", "sort-logs"): ["partial", "no-reward", "partial"],
    ("tb-sweep", "terminus-2:gpt-b", "build-cache"): ["context", "partial", "exit"],
    # job 2: one model on the security set and a re-run of fix-git, 3 attempts; one
    # trial is cancelled, and the job's process is killed while its last trial runs
    ("sec-rerun", "terminus-2:gpt-a", "crack-hash"): ["solve", "nothing", "solve"],
    ("sec-rerun", "terminus-2:gpt-a", "fix-git"): ["solve", "cancel", "hang"],
    # job 3: the multi-step tasks, one model, 3 attempts; an action is a plan of
    # record_harbor_steps.py (commands per step), or one of STEP_PLANS
    ("steps-run", "terminus-2:gpt-a", "steps-gated"): ["all", "second-wrong", "verifier-crash"],
    ("steps-run", "terminus-2:gpt-a", "steps-final"): ["all", "verifier-crash", "timeout-crash"],
}
STEP_PLANS: dict[str, dict[str, list[str]]] = {
    **steps.PLANS,
    # steps-final: the agent times out on the first step (graded, the next step runs),
    # then the second step's verifier crashes: two exceptions on two steps
    "timeout-crash": {**steps.RIGHT, "one": [*steps.RIGHT["one"], steps.STALL],
                      "two": ["echo crash > /app/two.txt"]},
}
ORACLE = "oracle"
_seen: Counter[tuple[str, str, str]] = Counter()
_actions: dict[str, str] = {}  # trial name -> action


def _plan_action(job: str, agent: str, task: str) -> str:
    if agent == ORACLE:
        return "oracle"
    key = (job, agent, task)
    attempt = _seen[key]
    _seen[key] += 1
    return PLANS[key][attempt]


class HostDirEnvironment(recording.HostDirEnvironment):
    """A host directory in place of the container (see the module docstring); ``start``
    acts out the sandbox part of the trial's plan."""

    SANDBOXES = WORK / "sandboxes"
    DIRS = (*recording.HostDirEnvironment.DIRS, "tests")  # the steps' verifiers empty it

    def __init__(self, *args: Any, job: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._job = job

    async def start(self, force_build: bool) -> None:
        config = TrialConfig.model_validate_json(self.trial_paths.config_path.read_text())
        agent = config.agent.name or "terminus-2"
        if config.agent.model_name:
            agent += ":" + config.agent.model_name.split("/")[-1]
        action = _plan_action(self._job, agent, self.environment_name)
        _actions[self.trial_paths.trial_dir.name] = action
        if action == "sandbox":
            raise SandboxBuildFailedError(
                f"docker build failed for {self.environment_name}: "
                "E: Unable to locate package libssl1.1"
            )
        await super().start(force_build)

    async def exec(self, command: str, *args: Any, **kwargs: Any) -> ExecResult:
        if command.strip() == "pwd":  # MultiStepTrial uploads each step's workdir/ there
            return ExecResult(stdout=self.CWD + "\n", stderr="", return_code=0)
        return await super().exec(command, *args, **kwargs)


class ScriptedTerminus(recording.PlannedAgent):
    """Reports itself as ``terminus-2``; acts out its trial's planned action."""

    @staticmethod
    def name() -> str:
        return "terminus-2"

    def version(self) -> str:
        return "2.0.0"

    async def run(
        self, instruction: str, environment: BaseEnvironment, context: AgentContext
    ) -> None:
        action = _actions[self.logs_dir.parent.name]
        context.n_input_tokens, context.n_output_tokens = 1200, 300
        if environment.environment_name in STEP_TASK_DIRS:  # this step's commands
            step = steps.step_instructions()[instruction.strip()]
            for command in STEP_PLANS[action][step]:
                if command == steps.STALL:
                    await asyncio.sleep(3600)  # the step's agent timeout cancels it
                result = await environment.exec(command)
                assert result.return_code == 0, (command, result.stderr)
            return
        kind = DATASETS_KIND[environment.environment_name]
        if action in ("solve", "partial"):
            file, content = ANSWERS[kind][action]
            await environment.exec(f"echo '{content}' > /app/{file}")
        elif action == "timeout":
            file, content = ANSWERS[kind]["partial"]
            await environment.exec(f"echo '{content}' > /app/{file}")
            await asyncio.sleep(30)  # past override_timeout_sec: Harbor cancels the run
        elif action == "no-reward":
            await environment.exec("touch /app/no-reward")
        elif action == "exit":
            raise NonZeroAgentExitCodeError("terminus-2 exited with code 137")
        elif action == "ratelimit":
            raise ApiRateLimitError("429 Too Many Requests: rate limit reached for gpt-a")
        elif action == "hang":  # until the recording kills the job's process
            (WORK / "hanging").write_text(self.logs_dir.parent.name)
            await asyncio.sleep(600)
        elif action == "cancel":  # what a Ctrl-C does to a running trial
            raise asyncio.CancelledError()
        elif action == "context":
            raise ContextLengthExceededError(
                "the conversation no longer fits the model's context window"
            )
        elif action != "nothing":
            raise AssertionError(f"unknown planned action {action!r}")


DATASETS_KIND = {task: kind for tasks in DATASETS.values() for task, (_, kind) in tasks.items()}


# -- running the jobs -------------------------------------------------------------------


def terminus(model: str, timeout_s: float | None = 3.0) -> AgentConfig:
    return AgentConfig(
        import_path=f"{MODULE}:ScriptedTerminus",
        model_name=f"openai/{model}",
        override_timeout_sec=timeout_s,
    )


def fixture_copy(job_dir: Path, out: Path) -> None:
    """The files a reader needs (``config.json``, ``result.json``; logs dropped), with
    the work root's path made stable."""
    for source in sorted(job_dir.rglob("*.json")):
        relative = source.relative_to(job_dir)
        if source.name not in ("config.json", "result.json") or len(relative.parts) > 2:
            continue
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            source.read_text().replace(str(WORK), STABLE).replace(str(REPO), "<repo>")
        )


def evals_key(result: TrialResult) -> str:
    """Harbor's group of a trial: ``agent__model__dataset`` (``JobStats.increment``)."""
    model = result.agent_info.model_info.name if result.agent_info.model_info else None
    return JobStats.format_agent_evals_key(result.agent_info.name, model, result.source or "adhoc")


VALID_REWARDS_ONLY = FIXTURES.name != FIXTURE_DIRS["0.25"]
"""0.26's ``Job`` gives its metrics only valid rewards (``_live_rewards``: a verifier
result and ``reward_valid``), the others left out, and no metric when none is left
(``_refresh_metrics_for_eval``); 0.25's gave every trial's, a missing one as None."""


def eval_figures(results: list[TrialResult]) -> dict[str, dict[str, Any]]:
    """Per evals key, what ``Job.run()`` computes at the end of a job: ``JobStats`` from
    the trial results, then each key's ``Mean`` metric and pass@k."""
    stats = JobStats.from_trial_results(results)
    rewards: dict[str, list[Any]] = {}
    for result in results:
        counted = result.verifier_result is not None and (result.reward_valid or not VALID_REWARDS_ONLY)
        rewards.setdefault(evals_key(result), []).append(
            result.verifier_result.rewards if counted and result.verifier_result is not None else None
        )
    for key, values in rewards.items():
        if VALID_REWARDS_ONLY:
            values = [v for v in values if v is not None]
            if not values:
                continue
        stats.evals[key].metrics.append(Mean().compute(values))
    for key, pass_at_k in compute_pass_at_k_by_evals(results).items():
        stats.evals[key].pass_at_k = pass_at_k
    return stats.model_dump(mode="json")["evals"]


def recorded_exceptions(result: TrialResult) -> list[Any]:
    """The trial's exception, then its steps' (``TrialResult.recorded_exceptions``: public
    in 0.26, ``_recorded_exceptions`` in 0.25)."""
    method = getattr(result, "recorded_exceptions", None) or result._recorded_exceptions
    return list(method())


def policy_figures(p: Any) -> dict[str, Any]:
    """An ``ErrorPolicy``: 0.25's ``cause``/``retry``/``grade``/``reward_valid``, 0.26's
    ``should_retry``/``should_grade``/``has_valid_reward`` (no cause), under the keys
    ``retry``/``grade``/``reward_valid`` (plus ``cause`` where Harbor has one)."""
    if hasattr(p, "has_valid_reward"):  # 0.26
        return {"retry": p.should_retry, "grade": p.should_grade,
                "reward_valid": p.has_valid_reward}
    return {"cause": p.cause.value, "retry": p.retry, "grade": p.grade,
            "reward_valid": p.reward_valid}


def is_sample(result: TrialResult) -> bool:
    """A measurement of the agent under Harbor's error policy: ``reward_valid``, or a
    trial its agent ended itself (only exceptions whose policy keeps the reward valid)
    before any verifier ran (Harbor's metrics count its missing reward as 0)."""
    if result.reward_valid:
        return True
    policies = [policy_figures(e.policy) for e in recorded_exceptions(result)]
    return (
        bool(policies)
        and all(p["reward_valid"] for p in policies)
        and not (result.verifier_result and result.verifier_result.rewards)
    )


def harbor_figures(job_dirs: list[Path]) -> dict[str, Any]:
    """What Harbor computes from the recorded files (read back with Harbor's models)."""
    trials: list[tuple[str, TrialResult]] = []
    jobs = {}
    for job_dir in job_dirs:
        job = JobResult.model_validate_json((job_dir / "result.json").read_text())
        jobs[job_dir.name] = {
            "finished": job.finished_at is not None,
            "n_total_trials": job.n_total_trials,
            "stats": job.stats.model_dump(mode="json"),
        }
        trials.extend(
            (job_dir.name, TrialResult.model_validate_json(path.read_text()))
            for path in sorted(job_dir.glob("*/result.json"))
        )
    results = [result for _, result in trials]
    evals = eval_figures(results)
    for key, figures in evals.items():
        figures["n_results"] = sum(evals_key(r) == key for r in results)
        samples = [r for r in results if evals_key(r) == key and is_sample(r)]
        figures["samples_by_task"] = {
            task: {"n_samples": len(group), **eval_figures(group)[key]}
            for task in sorted({r.task_name for r in samples})
            for group in [[r for r in samples if r.task_name == task]]
        }
    return {
        "jobs": jobs,
        "evals": evals,
        "trials": {
            f"{job}/{result.trial_name}": {
                "evals_key": evals_key(result),
                "task_name": result.task_name,
                "started_at": result.started_at.isoformat() if result.started_at else None,
                "rewards": result.verifier_result.rewards if result.verifier_result else None,
                "exception_type": (
                    result.exception_info.exception_type if result.exception_info else None
                ),
                # 0.25 only: 0.26 has no failure cause (see policies)
                **({"failure_cause": result.failure_cause.value if result.failure_cause
                    else None} if hasattr(result, "failure_cause") else {}),
                "policies": [policy_figures(e.policy) for e in recorded_exceptions(result)],
                "reward_valid": result.reward_valid,
                "sample": is_sample(result),
                # multi-step trials only: the steps that ran, in order
                **({"steps": [step_figures(step) for step in result.step_results]}
                   if result.step_results is not None else {}),
            }
            for job, result in trials
        },
    }


def step_figures(step: Any) -> dict[str, Any]:
    """A step that ran (``StepResult``): its name, rewards, exception type and policy."""
    info = step.exception_info
    return {
        "name": step.step_name,
        **recording.outcome(step),
        "policy": policy_figures(info.policy) if info is not None else None,
    }


def error_policies() -> dict[str, Any]:
    return {
        "unknown": policy_figures(UNKNOWN_ERROR_POLICY),
        "by_type": {name: policy_figures(p) for name, p in sorted(ERROR_POLICIES.items())},
    }


JOBS = {
    "tb-sweep": lambda datasets: ([terminus("gpt-a"), terminus("gpt-b"), AgentConfig(name=ORACLE)],
                                  [DatasetConfig(path=datasets / "tb-mini")], 3),
    "sec-rerun": lambda datasets: (
        [terminus("gpt-a", timeout_s=None)],
        [
            DatasetConfig(path=datasets / "sec-mini"),
            DatasetConfig(path=datasets / "tb-mini", task_names=["fix-git"]),
        ],
        3,
    ),
    "steps-run": lambda datasets: (
        [terminus("gpt-a")], [DatasetConfig(path=datasets / STEP_DATASET)], 3
    ),
}


def run_job_process(name: str) -> None:
    """One job in this process (``--job NAME``): how ``harbor run`` runs one."""
    sys.modules.setdefault(MODULE, sys.modules[__name__])  # one module for import_path
    agents, datasets, n_attempts = JOBS[name](WORK / "datasets")
    asyncio.run(recording.run_job(
        WORK, MODULE, name, agents, datasets, n_attempts, environment_kwargs={"job": name}
    ))


def kill_while_running(name: str) -> str:
    """Run a job in a child process and kill it (SIGKILL: no clean-up) once its last
    trial is under way: Harbor has written that trial's ``config.json`` but no
    ``result.json`` (``Trial._init_result`` / ``Trial._finalize``), and the job's
    ``result.json`` holds the live figures with the trial counted as running."""
    child = subprocess.Popen([sys.executable, __file__, "--job", name], cwd=Path(__file__).parent)
    marker = WORK / "hanging"
    deadline = time.monotonic() + 120
    while not marker.exists():
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            raise SystemExit(f"{name}: the job ended before its last trial hung")
        time.sleep(0.1)
    time.sleep(0.5)  # let the job's live result.json record the running trial
    child.kill()
    child.wait()
    return marker.read_text()


def main() -> None:
    if sys.argv[1:2] == ["--job"]:
        run_job_process(sys.argv[2])
        return
    if FIXTURES.name == "harbor_jobs_unknown":
        raise SystemExit(
            f"harbor {HARBOR}: not a version recorded here ({sorted(FIXTURE_DIRS)}); "
            "read what changed in its job files, then add it to FIXTURE_DIRS"
        )
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    write_tasks(WORK)
    subprocess.run([sys.executable, __file__, "--job", "tb-sweep"], check=True)
    if FIXTURES.name != FIXTURE_DIRS["0.25"]:  # [[steps]] came with 0.26
        subprocess.run([sys.executable, __file__, "--job", "steps-run"], check=True)
    running = kill_while_running("sec-rerun")
    jobs = WORK / "jobs"
    shutil.rmtree(FIXTURES, ignore_errors=True)
    for job_dir in sorted(jobs.iterdir()):
        fixture_copy(job_dir, FIXTURES / job_dir.name)
    record = {
        "harbor": HARBOR,
        "python": sys.version.split()[0],
        "sources": [
            "harbor/job.py (Job.run: the job's result.json, metrics, pass@k)",
            "harbor/models/job/result.py (JobStats.from_trial_results, increment)",
            "harbor/models/trial/result.py (TrialResult.reward_valid, recorded_exceptions; "
            "failure_cause in 0.25)",
            "harbor/models/trial/error_policy.py (ERROR_POLICIES)",
            "harbor/metrics/mean.py, harbor/utils/pass_at_k.py",
        ],
        "running_trials": [f"sec-rerun/{running}"],
        **harbor_figures(sorted(FIXTURES.iterdir())),
        "error_policies": error_policies(),
    }
    out = FIXTURES / "expected.json"
    out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(record['trials'])} trials in {len(record['jobs'])} jobs recorded to {FIXTURES}")


if __name__ == "__main__":
    main()
