"""Harbor job directories as rollouts (``analyze --harbor-jobs DIR``).

What Harbor 0.25.0 and 0.26.0 write (``harbor/job.py``, ``harbor/models/trial/paths.py``)::

    jobs/<job>/config.json          JobConfig, when the job starts
               result.json          JobResult: progress and stats, rewritten as trials end
               <trial>/config.json  TrialConfig, when the trial starts
                       result.json  TrialResult, written once, when the trial has ended
                       trial.log, agent/, verifier/, artifacts/ …

Only the trials' ``result.json`` files are read (``harbor/models/trial/result.py``):
``task_name``, ``trial_name``, ``agent_info`` (name, ``model_info.name``), ``source`` (the
dataset), ``started_at``, ``verifier_result.rewards`` and ``exception_info`` (plus the
steps' exceptions of multi-step trials; from 0.26 each carries the ``policy`` Harbor
applied to it). A trial directory without a ``result.json``, or
with an empty one (Harbor is writing it), is still running: skipped and counted in
:attr:`HarborJobs.unfinished`. Directories whose names start with a dot (Harbor's
``.sources`` cache) are not trials.

Rules:

- **harness**: the agent's name, with ``:`` and the model's name when the trial records a
  model (``terminus-2:gpt-5``, ``oracle``): the same job gives the same names whether it
  is read alone or with others.
- **attempt**: the trial's index among the trials of the same (task, harness) in
  everything read, ordered by ``started_at``, then trial name, then job directory.
- **reward**: ``rewards["reward"]`` when present, else the mean of the reward map (the
  engine's :func:`~rsr_async.tasks.verifier.main_reward`); ``rewards`` is the whole map.
- **status**, from Harbor's own error policy (``harbor/models/trial/error_policy.py``):
  a reward counts only when every recorded exception leaves it valid, as
  ``TrialResult.reward_valid``. Harbor 0.26 writes the policy it applied with each
  exception (``exception_info.policy.has_valid_reward``, after the job's
  ``override_error_policy``), and that is what is used; files without it (0.25) are read
  with 0.25's table (:data:`FAILURE_CAUSES`). The two versions differ:
  0.26 keeps the reward of ``NonZeroAgentExitCodeError`` and of unknown exception
  types, and verifies after ``ContextLengthExceededError`` (a reward of 0). The rules
  below say 0.25's causes; in 0.26 files "the agent's own" is every exception whose
  recorded policy keeps the reward valid:

  - no exception, or only the agent's own (``AgentTimeoutError``, context or output
    limits: *agent exhausted budget*; safety refusals: *agent refused task*), and a
    reward map: graded by the reward, passed at full marks;
  - the agent's own exception and no reward (the verifier never ran, e.g. a
    ``ContextLengthExceededError`` escaping the agent): ``failed`` with reward 0, the
    outcome this engine records when an agent runs out of context;
  - ``CancelledError``: ``cancelled``;
  - anything else is ``infra_error``, never a sample, even with a reward: sandbox
    (build, start, out of memory), model provider (rate limits, 5xx, auth; Harbor
    verifies after these and records 0), Harbor, verifier (no or unparseable reward
    file, verifier timeout), and, in 0.25 files, unclassified types such as
    ``NonZeroAgentExitCodeError`` (0.25 retries them as transient); so is a trial
    with no exception and no reward (verification disabled).

- **subset**: the trial's ``source`` (the dataset's name), "" when none; **domain** is
  "" (a ``TrialResult`` does not carry the task's ``[metadata]``).

Nothing of Harbor is imported: the records below are the fields of its pydantic models
that the tables use; every other field is skipped.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from ..errors import TaskError
from ..tasks.verifier import main_reward
from .rollouts import Rollout, RolloutStatus, TaskInfo, rollout_from_reward

__all__ = [
    "AGENT_CAUSES",
    "FAILURE_CAUSES",
    "HarborJobs",
    "HarborTrial",
    "failure_cause",
    "read_harbor_jobs",
    "scan_harbor_jobs",
]

log = logging.getLogger(__name__)

_CAUSE_GROUPS: dict[str, tuple[str, ...]] = {
    "sandbox_failed": (
        "EnvironmentStartTimeoutError", "SandboxBuildFailedError", "AgentSetupTimeoutError",
        "HealthcheckError", "SandboxLikelyOutOfMemoryError", "MemoryLimitExceededError",
        "SSHAccessError", "GKEExecStreamClosedError", "GKEPodNotFoundError",
        "RuntimeRequestError", "AddTestsDirError", "DownloadVerifierDirError",
    ),
    "model_provider_failed": (
        "ApiError", "ApiRateLimitError", "ApiInternalServerError", "ApiOverloadedError",
        "ApiConnectionClosedError", "ApiResponseStalledError", "UnknownApiError",
        "NetworkConnectionError", "ApiConnectionError", "ApiUsageLimitError",
        "RateLimitError", "InternalServerError", "ServiceUnavailableError",
        "APIConnectionError", "APIError", "Timeout", "BadRequestError",
        "UnprocessableEntityError", "UnsupportedParamsError", "APIResponseValidationError",
        "BudgetExceededError", "AgentAuthenticationError", "ModelNotFoundError",
        "ApiProviderResourceNotFoundError", "AuthenticationError", "PermissionDeniedError",
        "NotFoundError",
    ),
    "harbor_failed": (
        "ServiceOperationsUnsupportedError", "VercelScopeError", "DspyImportError",
        "MissingExtraError", "RegradeError",
    ),
    "unclassified": ("NonZeroAgentExitCodeError",),
    "agent_exhausted_budget": (
        "AgentTimeoutError", "ContextWindowExceededError", "OutputTokenExceededError",
        "ContextLengthExceededError", "OutputLengthExceededError",
    ),
    "agent_refused_task": ("AgentSafetyRefusalError", "ContentPolicyViolationError"),
    "verifier_failed": (
        "VerifierTimeoutError", "RewardFileNotFoundError", "RewardFileEmptyError",
        "VerifierOutputParseError",
    ),
    "cancelled": ("CancelledError",),
}
FAILURE_CAUSES: dict[str, str] = {
    name: cause for cause, names in _CAUSE_GROUPS.items() for name in names
}
"""Exception type name → Harbor's failure cause (harbor 0.25.0's ``ERROR_POLICIES``);
any other name is ``unclassified``, as in Harbor 0.25. Harbor 0.26 has no failure
causes (its policies are only retry / grade / valid reward); the label stays 0.25's."""
AGENT_CAUSES: frozenset[str] = frozenset({"agent_exhausted_budget", "agent_refused_task"})
"""The causes that are the agent's own doing: its reward (or its failure) is a valid
measurement (Harbor's ``ErrorPolicy.reward_valid``)."""


def failure_cause(exception_type: str) -> str:
    """Harbor's failure cause of an exception type name (``unclassified`` if unknown)."""
    return FAILURE_CAUSES.get(exception_type, "unclassified")


# -- the fields read of Harbor's records ---------------------------------------------


class _ModelInfo(msgspec.Struct):
    name: str | None = None


class _AgentInfo(msgspec.Struct):
    name: str
    model_info: _ModelInfo | None = None


class _Policy(msgspec.Struct):
    has_valid_reward: bool


class _ExceptionInfo(msgspec.Struct):
    exception_type: str
    policy: _Policy | None = None
    """The policy Harbor applied (0.26 on; 0.25 does not write it)."""


class _VerifierResult(msgspec.Struct):
    rewards: dict[str, float] | None = None


class _StepResult(msgspec.Struct):
    exception_info: _ExceptionInfo | None = None


class _TrialResult(msgspec.Struct):
    task_name: str
    trial_name: str
    agent_info: _AgentInfo
    id: object = None
    """Harbor's trial UUID; only used to catch a job read twice."""
    source: str | None = None
    verifier_result: _VerifierResult | None = None
    exception_info: _ExceptionInfo | None = None
    started_at: datetime | None = None
    step_results: list[_StepResult] | None = None


class _Probe(msgspec.Struct):
    trial_name: object = None


_trial_decoder = msgspec.json.Decoder(_TrialResult)
_probe_decoder = msgspec.json.Decoder(_Probe)


# -- what comes out --------------------------------------------------------------------


class HarborTrial(msgspec.Struct, frozen=True, kw_only=True):
    """One finished trial and the rollout it became."""

    job: str
    """The job directory's name."""
    trial: str
    """The trial's name (its directory's name)."""
    rollout: Rollout
    exception: str | None = None
    """The first recorded exception's type (Harbor's ``exception_type``), if any."""
    cause: str | None = None
    """Harbor 0.25's failure cause of that exception (:data:`FAILURE_CAUSES`)."""
    exceptions: tuple[str, ...] = ()
    """Every recorded exception's type, the trial's then its steps' in step order
    (Harbor's ``TrialResult.recorded_exceptions``); a multi-step trial records its
    failures on the steps, so it may have several, and no trial-level one."""
    infra_exception: str | None = None
    """For an ``infra_error``, the first recorded exception whose policy voids the
    reward (what kept the trial from being graded); ``None`` otherwise."""


class HarborJobs(msgspec.Struct, frozen=True, kw_only=True):
    """Everything read from Harbor job directories."""

    jobs: tuple[str, ...]
    """The job directories read."""
    trials: tuple[HarborTrial, ...]
    """Every finished trial, ordered by task, harness and attempt."""
    tasks: dict[str, TaskInfo]
    unfinished: tuple[str, ...] = ()
    """``job/trial`` directories skipped because their trial has not ended (no
    ``result.json`` yet)."""

    @property
    def rollouts(self) -> list[Rollout]:
        return [trial.rollout for trial in self.trials]

    def exception_counts(self) -> dict[str, dict[str, int]]:
        """Harness → exception type → trials that recorded it (graded or not; a trial
        counts once per type it recorded on itself or its steps, as Harbor's
        ``JobStats.exception_stats``)."""
        counts: dict[str, Counter[str]] = {}
        for trial in self.trials:
            if trial.exceptions:
                counts.setdefault(trial.rollout.harness, Counter()).update(set(trial.exceptions))
        return {harness: dict(sorted(c.items())) for harness, c in sorted(counts.items())}

    def note(self) -> str:
        """One line for the report: what was read, skipped and why trials were not graded."""
        parts = [f"{len(self.trials)} Harbor trials from {len(self.jobs)} job(s)"]
        if self.unfinished:
            parts.append(f"{len(self.unfinished)} still running (no result.json) skipped")
        errors = Counter(
            t.infra_exception or "no reward"
            for t in self.trials if t.rollout.status == "infra_error"
        )
        if errors:
            listed = ", ".join(f"{name} {n}" for name, n in sorted(errors.items()))
            parts.append(f"infrastructure errors: {listed}")
        return "; ".join(parts)


# -- reading ----------------------------------------------------------------------------


def read_harbor_jobs(path: str | Path) -> tuple[list[Rollout], dict[str, TaskInfo]]:
    """Rollouts and task facts from one Harbor job directory or a directory of them.

    Trials still running are skipped and counted in the logged note (see
    :func:`scan_harbor_jobs` for the full record). Raises
    :class:`~rsr_async.errors.TaskError` naming the file (and field) on a missing
    directory, a ``result.json`` that is not JSON or lacks a field, or no trials."""
    jobs = scan_harbor_jobs(path)
    log.info("%s", jobs.note())
    return jobs.rollouts, jobs.tasks


def scan_harbor_jobs(path: str | Path) -> HarborJobs:
    """Everything :func:`read_harbor_jobs` reads, with each trial's exception type and
    the unfinished trials (module docstring: the rules)."""
    root = Path(path)
    job_dirs = _job_dirs(root)
    found: list[tuple[str, Path, _TrialResult]] = []
    unfinished: list[str] = []
    for job_dir in job_dirs:
        for trial_dir in _subdirs(job_dir):
            result_path = trial_dir / "result.json"
            raw = _read(result_path) if result_path.exists() else b""
            if not raw.strip():
                unfinished.append(f"{job_dir.name}/{trial_dir.name}")
                continue
            found.append((job_dir.name, result_path, _decode_trial(raw, result_path)))
    if not found:
        running = f" ({len(unfinished)} still running, without a result.json)" if unfinished else ""
        raise TaskError(
            f"{root}: no finished Harbor trials{running}; a job directory holds one "
            "directory per trial with its result.json"
        )
    _check_unique(found)
    return HarborJobs(
        jobs=tuple(d.name for d in job_dirs),
        trials=tuple(_trials(found)),
        tasks=_tasks(found),
        unfinished=tuple(unfinished),
    )


def _job_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise TaskError(f"{root}: {what} (expected a Harbor job directory or a directory of them)")
    kind = _kind(root)
    if kind == "trial":
        raise TaskError(
            f"{root}: this is a trial directory (its files are a trial's); "
            "pass the job directory above it"
        )
    if kind == "job":
        return [root]
    subdirs = {d: _kind(d) for d in _subdirs(root)}
    if "trial" in subdirs.values():  # a job directory that lost its own files
        return [root]
    jobs = [d for d, k in subdirs.items() if k == "job"]
    if not jobs:
        raise TaskError(
            f"{root}: no Harbor job directories here (a job directory holds config.json "
            "and result.json, and one directory per trial)"
        )
    return jobs


def _kind(path: Path) -> str | None:
    """``job``, ``trial`` (a trial's config.json/result.json name the trial) or None."""
    files = [f for f in (path / "result.json", path / "config.json") if f.is_file()]
    for file in files:
        try:
            probe = _probe_decoder.decode(_read(file))
        except (msgspec.DecodeError, TaskError):
            continue  # a job's result.json is rewritten as trials end: it may be torn
        if isinstance(probe.trial_name, str):
            return "trial"
    return "job" if files else None


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as exc:
        raise TaskError(f"{path}: cannot list the directory: {exc}") from exc


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TaskError(f"{path}: cannot read: {exc}") from exc


def _decode_trial(raw: bytes, path: Path) -> _TrialResult:
    try:
        result = _trial_decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise TaskError(f"{path}: not a Harbor trial result: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise TaskError(f"{path}: not valid JSON: {exc}") from exc
    for field, value in (("task_name", result.task_name), ("trial_name", result.trial_name),
                         ("agent_info.name", result.agent_info.name)):
        if not value:
            raise TaskError(f"{path}: `{field}` is empty")
    rewards = result.verifier_result.rewards if result.verifier_result else None
    for key, number in (rewards or {}).items():
        if not math.isfinite(number):
            raise TaskError(
                f"{path}: `verifier_result.rewards.{key}` must be a finite number, got {number}"
            )
    return result


def _check_unique(found: list[tuple[str, Path, _TrialResult]]) -> None:
    seen: dict[str, Path] = {}
    for _, path, result in found:
        if not isinstance(result.id, str):
            continue
        if result.id in seen:
            raise TaskError(
                f"{path}: the same trial (id {result.id}) as {seen[result.id]}; "
                "a copied job directory would count its trials twice: read each job once"
            )
        seen[result.id] = path


def _harness(result: _TrialResult) -> str:
    model = result.agent_info.model_info.name if result.agent_info.model_info else None
    return f"{result.agent_info.name}:{model}" if model else result.agent_info.name


def _exceptions(result: _TrialResult) -> list[_ExceptionInfo]:
    """Trial-level exception first, then the steps' (``TrialResult.recorded_exceptions``)."""
    infos = [result.exception_info, *(s.exception_info for s in result.step_results or [])]
    return [info for info in infos if info is not None]


def _keeps_reward(info: _ExceptionInfo) -> bool:
    """Whether Harbor counts a reward despite this exception (its policy's
    ``has_valid_reward``): as recorded (0.26), else by 0.25's table."""
    if info.policy is not None:
        return info.policy.has_valid_reward
    return failure_cause(info.exception_type) in AGENT_CAUSES


def _start_key(result: _TrialResult) -> tuple[bool, datetime]:
    started = result.started_at
    if started is None:
        return (True, datetime.min)
    if started.tzinfo is not None:  # Harbor writes UTC ("...Z"); older files may be naive
        started = started.astimezone(UTC).replace(tzinfo=None)
    return (False, started)


def _trials(found: list[tuple[str, Path, _TrialResult]]) -> list[HarborTrial]:
    groups: dict[tuple[str, str], list[tuple[str, _TrialResult]]] = {}
    for job, _, result in found:
        groups.setdefault((result.task_name, _harness(result)), []).append((job, result))
    trials: list[HarborTrial] = []
    for (task, harness), members in sorted(groups.items()):
        members.sort(key=lambda m: (_start_key(m[1]), m[1].trial_name, m[0]))
        for attempt, (job, result) in enumerate(members):
            exceptions = _exceptions(result)
            first = exceptions[0].exception_type if exceptions else None
            rollout = _rollout(result, task=task, harness=harness, attempt=attempt,
                               exceptions=exceptions)
            voiding = [i.exception_type for i in exceptions if not _keeps_reward(i)]
            trials.append(
                HarborTrial(
                    job=job,
                    trial=result.trial_name,
                    rollout=rollout,
                    exception=first,
                    cause=failure_cause(first) if first else None,
                    exceptions=tuple(i.exception_type for i in exceptions),
                    infra_exception=(
                        voiding[0] if voiding and rollout.status == "infra_error" else None
                    ),
                )
            )
    return trials


def _rollout(
    result: _TrialResult, *, task: str, harness: str, attempt: int,
    exceptions: list[_ExceptionInfo],
) -> Rollout:
    rewards = result.verifier_result.rewards if result.verifier_result else None
    agents_own = all(_keeps_reward(info) for info in exceptions)
    if rewards and agents_own:
        return rollout_from_reward(
            task=task, harness=harness, attempt=attempt,
            reward=main_reward(rewards), rewards=rewards,
        )
    status: RolloutStatus
    reward: float | None = None
    if exceptions and failure_cause(exceptions[0].exception_type) == "cancelled":
        status = "cancelled"
    elif exceptions and agents_own:  # the agent ended the trial before the verifier ran
        status, reward = "failed", 0.0
    else:
        status = "infra_error"
    return Rollout(task=task, harness=harness, attempt=attempt, status=status, reward=reward)


def _tasks(found: list[tuple[str, Path, _TrialResult]]) -> dict[str, TaskInfo]:
    subsets: dict[str, tuple[str, Path]] = {}
    for _, path, result in found:
        if not result.source:
            continue
        earlier = subsets.setdefault(result.task_name, (result.source, path))
        if earlier[0] != result.source:
            raise TaskError(
                f"{path}: task {result.task_name!r} comes from dataset {result.source!r} "
                f"here but {earlier[0]!r} in {earlier[1]}; read the jobs of each dataset apart"
            )
    names = sorted({result.task_name for _, _, result in found})
    return {
        name: TaskInfo(name=name, subset=subsets[name][0] if name in subsets else "")
        for name in names
    }
