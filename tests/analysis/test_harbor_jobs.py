"""Reading Harbor job directories (``analysis.harbor``) against Harbor's own figures.

``fixtures/harbor_jobs/`` (Harbor 0.25.0) and ``fixtures/harbor_jobs_026/`` (0.26.0) each
hold the same two jobs written by that version's own ``Job``/``Trial``/``Verifier``
code (0.26 also a third, ``steps-run``: multi-step tasks run by its ``MultiStepTrial``),
and ``expected.json`` what that Harbor computes from them
(``scripts/record_harbor_jobs.py``; the version is in ``expected.json``'s ``harbor``):
per trial its ``reward_valid``, its exceptions' policies, (0.25 only) failure cause and
(multi-step trials) the steps that ran with their rewards and exceptions,
per ``agent__model__dataset`` its ``JobStats`` (errors, exception stats, the mean
metric, pass@k) over all trials and, per task, over the trials that are samples. Both
recordings are kept: users analyze job directories from either version, and the two
grade some exceptions differently (``NonZeroAgentExitCodeError``, unknown types).
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import statistics
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

from rsr_async.analysis import pass_at_k
from rsr_async.analysis.harbor import (
    AGENT_CAUSES,
    FAILURE_CAUSES,
    HarborJobs,
    HarborTrial,
    failure_cause,
    read_harbor_jobs,
    scan_harbor_jobs,
)
from rsr_async.analysis.outcomes import outcomes
from rsr_async.errors import TaskError
from rsr_async.tasks.verifier import main_reward

HERE = Path(__file__).parent / "fixtures"


@dataclass(frozen=True)
class Recording:
    """One Harbor version's recording: its job directories and ``expected.json``."""

    path: Path

    @cached_property
    def expected(self) -> dict[str, Any]:
        return json.loads((self.path / "expected.json").read_text("utf-8"))

    @property
    def trials(self) -> dict[str, dict[str, Any]]:
        return self.expected["trials"]

    @property
    def harbor(self) -> str:
        return self.expected["harbor"]


RECORDINGS = {
    "0.25.0": Recording(HERE / "harbor_jobs"),
    "0.26.0": Recording(HERE / "harbor_jobs_026"),
}


@pytest.fixture(scope="module", params=sorted(RECORDINGS), ids=lambda v: f"harbor{v}")
def rec(request: pytest.FixtureRequest) -> Recording:
    recording = RECORDINGS[request.param]
    assert recording.harbor == request.param  # the version Harbor recorded in it
    return recording


@pytest.fixture(scope="module")
def jobs(rec: Recording) -> HarborJobs:
    return scan_harbor_jobs(rec.path)


def _by_name(jobs: HarborJobs) -> dict[str, HarborTrial]:
    return {f"{t.job}/{t.trial}": t for t in jobs.trials}


def _recorded_exceptions(harbor: dict[str, Any]) -> list[str]:
    """Harbor's ``recorded_exceptions`` of a recorded trial: its own, then its steps'."""
    steps = [s["exception"] for s in harbor.get("steps", []) if s["exception"] is not None]
    return [harbor["exception_type"], *steps] if harbor["exception_type"] else steps


def _single_step(jobs: HarborJobs, rec: Recording) -> list[HarborTrial]:
    return [t for t in jobs.trials if "steps" not in rec.trials[f"{t.job}/{t.trial}"]]


def _evals_key(trial: HarborTrial, jobs: HarborJobs) -> str:
    """Harbor's group (``JobStats.format_agent_evals_key``) of one of our trials."""
    agent, _, model = trial.rollout.harness.partition(":")
    dataset = jobs.tasks[trial.rollout.task].subset or "adhoc"
    return "__".join(x for x in (agent, model, dataset) if x)


# -- what is read ------------------------------------------------------------------------


def test_every_finished_trial_is_read_and_the_running_one_skipped(
    rec: Recording, jobs: HarborJobs
) -> None:
    assert set(_by_name(jobs)) == set(rec.trials)
    assert list(jobs.unfinished) == rec.expected["running_trials"]
    assert jobs.jobs == tuple(sorted(rec.expected["jobs"]))
    assert set(jobs.jobs) - {"sec-rerun", "tb-sweep"} == (
        set() if rec.harbor.startswith("0.25") else {"steps-run"}
    )
    for name, job in rec.expected["jobs"].items():
        stats = job["stats"]
        mine = [t for t in jobs.trials if t.job == name]
        assert len(mine) == stats["n_completed_trials"], name
        assert sum(u.startswith(f"{name}/") for u in jobs.unfinished) == stats["n_running_trials"]
        assert sum(t.exception is not None for t in mine) == stats["n_errored_trials"]
        assert sum(t.rollout.status == "cancelled" for t in mine) == stats["n_cancelled_trials"]
    assert not rec.expected["jobs"]["sec-rerun"]["finished"]  # killed: a live result.json


def test_one_job_directory_reads_alone(rec: Recording) -> None:
    jobs = scan_harbor_jobs(rec.path / "tb-sweep")
    assert jobs.jobs == ("tb-sweep",)
    assert len(jobs.trials) == rec.expected["jobs"]["tb-sweep"]["stats"]["n_completed_trials"]
    assert jobs.unfinished == ()


def test_harness_names_and_attempt_order(rec: Recording, jobs: HarborJobs) -> None:
    # The agent's name, with the model's when the trial records one.
    assert {t.rollout.harness for t in jobs.trials} == {
        "oracle", "terminus-2:gpt-a", "terminus-2:gpt-b"
    }
    # Attempts number the trials of one (task, harness) across both jobs by start time.
    groups: dict[tuple[str, str], list[HarborTrial]] = {}
    for trial in jobs.trials:
        groups.setdefault((trial.rollout.task, trial.rollout.harness), []).append(trial)
    for members in groups.values():
        assert [t.rollout.attempt for t in members] == list(range(len(members)))
        starts = [rec.trials[f"{t.job}/{t.trial}"]["started_at"] for t in members]
        assert starts == sorted(starts)
    fix_git = groups[("fix-git", "terminus-2:gpt-a")]
    assert [t.job for t in fix_git] == ["tb-sweep"] * 3 + ["sec-rerun"] * 2


def test_tasks_carry_the_dataset_as_subset(rec: Recording, jobs: HarborJobs) -> None:
    subsets = {t["task_name"]: t["evals_key"].rsplit("__", 1)[1] for t in rec.trials.values()}
    assert {name: info.subset for name, info in jobs.tasks.items()} == subsets
    assert {info.domain for info in jobs.tasks.values()} == {""}
    assert "sec/crack-hash" in jobs.tasks  # a [task] name in org/name form is kept whole


# -- against Harbor's verdicts and figures ------------------------------------------------


def test_each_trial_is_graded_as_harbors_error_policy_says(
    rec: Recording, jobs: HarborJobs
) -> None:
    for name, trial in _by_name(jobs).items():
        harbor = rec.trials[name]
        rollout = trial.rollout
        recorded = _recorded_exceptions(harbor)
        assert list(trial.exceptions) == recorded, name
        assert trial.exception == (recorded[0] if recorded else None), name
        if "failure_cause" in harbor:  # 0.25 only: 0.26 has no failure causes
            assert trial.cause == harbor["failure_cause"], name
        assert rollout.graded == harbor["sample"], name
        if harbor["reward_valid"]:
            assert rollout.rewards == harbor["rewards"], name
            assert rollout.reward == main_reward(harbor["rewards"]), name
            assert rollout.passed == (main_reward(harbor["rewards"]) >= 1.0), name
        elif harbor["sample"]:  # the agent ended the trial itself, before any verifier
            assert harbor["rewards"] is None, name
            if "failure_cause" in harbor:
                assert harbor["failure_cause"] in AGENT_CAUSES, name
            else:
                assert all(p["reward_valid"] for p in harbor["policies"]), name
            assert (rollout.status, rollout.reward) == ("failed", 0.0), name
        elif harbor["exception_type"] == "CancelledError":
            assert rollout.status == "cancelled", name
        else:
            assert (rollout.status, rollout.reward) == ("infra_error", None), name


def test_the_fixtures_cover_every_kind_of_trial(rec: Recording, jobs: HarborJobs) -> None:
    single = _single_step(jobs, rec)  # multi-step trials: test_multi_step_trials_...
    kinds = Counter(
        (t.rollout.status, t.cause, len(t.rollout.rewards or {}) > 1) for t in single
    )
    assert kinds[("succeeded", None, False)] and kinds[("failed", None, False)]
    assert kinds[("failed", None, True)]  # partial credit: several keys
    assert any(0 < (t.rollout.reward or 0) < 1 for t in single)  # a fractional reward
    assert kinds[("failed", "agent_exhausted_budget", True)]  # AgentTimeoutError, verified
    # ContextLengthExceededError: 0.25 never verifies (a 0 for the agent's own end),
    # 0.26 verifies (a reward of 0)
    assert kinds[("failed", "agent_exhausted_budget", False)]
    assert kinds[("cancelled", "cancelled", False)]
    causes = {t.cause for t in single if t.rollout.status == "infra_error"}
    infra = {"sandbox_failed", "model_provider_failed", "verifier_failed"}
    exit_code = [t for t in single if t.exception == "NonZeroAgentExitCodeError"]
    assert len(exit_code) == 1
    if rec.harbor.startswith("0.25"):  # an unclassified failure, retried as transient
        assert causes == infra | {"unclassified"}
        assert exit_code[0].rollout.status == "infra_error"
        verified_infra = 2  # the exit code's and the rate limit's: Harbor recorded 0
    else:  # 0.26: the agent's own, its reward (0) is valid
        assert causes == infra
        assert (exit_code[0].rollout.status, exit_code[0].rollout.reward) == ("failed", 0.0)
        verified_infra = 1  # the rate limit's
    assert sum(
        rec.trials[f"{t.job}/{t.trial}"]["rewards"] is not None
        for t in single if t.rollout.status == "infra_error"
    ) == verified_infra


def test_errors_per_group_equal_harbors_exception_stats(rec: Recording, jobs: HarborJobs) -> None:
    for key, harbor in rec.expected["evals"].items():
        mine = [t for t in jobs.trials if _evals_key(t, jobs) == key]
        assert len(mine) == harbor["n_results"], key
        assert sum(t.exception is not None for t in mine) == harbor["n_errors"], key
        by_type: dict[str, list[str]] = {}
        for trial in mine:  # a trial under each type it (or a step of it) recorded
            for exception in set(trial.exceptions):
                by_type.setdefault(exception, []).append(trial.trial)
        assert {k: sorted(v) for k, v in by_type.items()} == {
            k: sorted(v) for k, v in harbor["exception_stats"].items()
        }, key


def test_exception_counts_per_harness_sum_harbors(rec: Recording, jobs: HarborJobs) -> None:
    expected: dict[str, Counter[str]] = {}
    for key, harbor in rec.expected["evals"].items():
        agent, *rest = key.split("__")
        harness = f"{agent}:{rest[0]}" if len(rest) == 2 else agent
        for name, trials in harbor["exception_stats"].items():
            expected.setdefault(harness, Counter())[name] += len(trials)
    assert jobs.exception_counts() == {h: dict(c) for h, c in expected.items()}


def _harbor_mean(maps: list[dict[str, float] | None]) -> dict[str, float]:
    """Harbor's ``Mean`` metric (``harbor/metrics/base.py``): per key, missing as 0;
    a single key is reported as ``mean``."""
    keys = sorted({k for m in maps if m for k in m})
    if len(keys) <= 1:
        return {"mean": statistics.fmean(next(iter(m.values()), 0) if m else 0 for m in maps)}
    return {k: statistics.fmean((m or {}).get(k, 0) for m in maps) for k in keys}


def test_the_recorded_metrics_are_what_harbors_job_wrote(rec: Recording) -> None:
    """The recording computes each evals key's metrics as Harbor's ``Job`` does (0.26: valid
    rewards only): where all of a key's trials come from one job that finished, they
    equal what that job wrote in its own ``result.json``."""
    owners: dict[str, list[str]] = {}
    for job, info in rec.expected["jobs"].items():
        for key in info["stats"]["evals"]:
            owners.setdefault(key, []).append(job)
    checked = 0
    for key, (job, *others) in owners.items():
        if others or not rec.expected["jobs"][job]["finished"]:
            continue
        written = rec.expected["jobs"][job]["stats"]["evals"][key]["metrics"]
        ours = rec.expected["evals"][key]["metrics"]
        assert len(ours) == len(written), (key, job)
        for computed, wrote in zip(ours, written, strict=True):
            assert computed == pytest.approx(wrote), (key, job)
        checked += 1
    assert checked >= 1


def test_samples_per_task_equal_harbors_figures(rec: Recording, jobs: HarborJobs) -> None:
    for key, harbor in rec.expected["evals"].items():
        for task, figures in harbor["samples_by_task"].items():
            graded = sorted(
                (t for t in jobs.trials
                 if _evals_key(t, jobs) == key and t.rollout.task == task and t.rollout.graded),
                key=lambda t: t.rollout.attempt,
            )
            where = f"{key} {task}"
            assert len(graded) == figures["n_samples"], where
            # Harbor's mean metric over the same samples, from our reward maps
            (harbor_mean,) = figures["metrics"]
            maps = [t.rollout.rewards for t in graded]
            assert _harbor_mean(maps) == pytest.approx(harbor_mean), where
            # our main reward's mean: Harbor's `reward` (or single key), else the keys' mean
            mean = statistics.fmean(t.rollout.reward or 0.0 for t in graded)
            harbor_main = harbor_mean.get("reward", harbor_mean.get("mean"))
            if harbor_main is None:
                harbor_main = statistics.fmean(harbor_mean.values())
            assert mean == pytest.approx(harbor_main), where
            # pass counts: Harbor lists the trials per value of `reward`
            full = figures["reward_stats"].get("reward", {}).get("1.0")
            if "reward" in figures["reward_stats"]:
                assert sorted(t.trial for t in graded if t.rollout.passed) == sorted(full or [])
            # pass@k where Harbor computes it (binary single-key rewards)
            passed = sum(t.rollout.passed for t in graded)
            for k, value in figures["pass_at_k"].items():
                assert pass_at_k(len(graded), passed, int(k)) == pytest.approx(value), where


def test_outcomes_count_harbors_infrastructure_errors_apart(
    rec: Recording, jobs: HarborJobs
) -> None:
    rollouts, tasks = read_harbor_jobs(rec.path)
    table = {o.group: o for o in outcomes(rollouts, sorted(tasks), k=2)}
    infra = Counter(t.rollout.harness for t in jobs.trials if t.rollout.status == "infra_error")
    for harness, outcome in table.items():
        assert outcome.infra_errors == infra[harness]
        assert outcome.rollouts == sum(
            t.rollout.graded for t in jobs.trials if t.rollout.harness == harness
        )
    assert table["terminus-2:gpt-a"].cancelled == 1
    assert table["oracle"].partial_credit_tasks == 2


def test_our_error_table_is_harbor_025s() -> None:
    """Files without a recorded policy (0.25) are read with 0.25's table."""
    policies = RECORDINGS["0.25.0"].expected["error_policies"]
    assert set(FAILURE_CAUSES) == set(policies["by_type"])
    for name, policy in policies["by_type"].items():
        assert failure_cause(name) == policy["cause"], name
        assert (policy["cause"] in AGENT_CAUSES) == policy["reward_valid"], name
    assert failure_cause("SomethingNew") == policies["unknown"]["cause"]
    assert AGENT_CAUSES == {p["cause"] for p in policies["by_type"].values() if p["reward_valid"]}


def test_harbor_026s_table_differs_from_025s_only_where_the_policy_is_recorded() -> None:
    """0.26 writes each exception's policy (its ``has_valid_reward`` is what we read);
    where its table differs from 0.25's, only the recorded policy can say."""
    old = RECORDINGS["0.25.0"].expected["error_policies"]
    new = RECORDINGS["0.26.0"].expected["error_policies"]
    changed = {
        name for name, p in new["by_type"].items()
        if name not in old["by_type"] or old["by_type"][name]["reward_valid"] != p["reward_valid"]
    }
    assert changed == {"NonZeroAgentExitCodeError", "UnsupportedModelParametersError"}
    assert new["by_type"]["NonZeroAgentExitCodeError"]["reward_valid"]
    assert (old["unknown"]["reward_valid"], new["unknown"]["reward_valid"]) == (False, True)
    assert "cause" not in new["unknown"]  # no failure causes in 0.26
    recorded = {}
    for path in RECORDINGS["0.26.0"].path.glob("*/*/result.json"):
        result = json.loads(path.read_text())
        steps = [s["exception_info"] for s in result.get("step_results") or []]
        for info in [result["exception_info"], *steps]:
            if info is not None:
                recorded[info["exception_type"]] = info["policy"]["has_valid_reward"]
    assert recorded == {name: new["by_type"][name]["reward_valid"] for name in recorded}


def test_a_recorded_policy_wins_over_025s_table(tmp_path: Path) -> None:
    """A job's ``override_error_policy`` (0.26) changes the recorded policy; an unknown
    exception type keeps its reward in 0.26 and not in 0.25 (no policy recorded)."""
    rec = RECORDINGS["0.26.0"]
    job = _copy_job(rec, tmp_path)
    (result,) = [p for p in job.glob("*/result.json")
                 if "NonZeroAgentExitCodeError" in p.read_text()]
    name = json.loads(result.read_text())["trial_name"]

    def status() -> tuple[str, float | None]:
        (trial,) = [t for t in scan_harbor_jobs(job).trials if t.trial == name]
        return trial.rollout.status, trial.rollout.reward

    assert status() == ("failed", 0.0)
    override = {"should_retry": False, "should_grade": True, "has_valid_reward": False}
    _edit(result, lambda d: d["exception_info"].update(
        policy_override={"has_valid_reward": False}, policy=override))
    assert status() == ("infra_error", None)
    _edit(result, lambda d: d["exception_info"].update(
        exception_type="SomethingNew", policy={**override, "has_valid_reward": True}))
    assert status() == ("failed", 0.0)
    _edit(result, lambda d: d["exception_info"].pop("policy"))  # as 0.25 writes it
    assert status() == ("infra_error", None)


def test_multi_step_trials_read_as_harbor_recorded_them() -> None:
    """0.26's ``steps-run``: ``MultiStepTrial`` writes the trial's reward (the steps'
    mean, or the last step's with ``multi_step_reward_strategy = "final"``) and records
    failures on the steps, none on the trial; a reward counts only when no step's
    exception voids it (``reward_valid``), even where earlier steps left one."""
    rec = RECORDINGS["0.26.0"]
    jobs = scan_harbor_jobs(rec.path / "steps-run")
    trials = {t.trial: t for t in jobs.trials}
    recorded = {name: {**t, "name": name} for job_trial, t in rec.trials.items()
                for job, name in [job_trial.split("/", 1)] if job == "steps-run"}
    assert set(trials) == set(recorded) and len(trials) == 6
    for name, harbor in recorded.items():
        trial = trials[name]
        steps = harbor["steps"]
        assert harbor["exception_type"] is None, name  # failures are the steps'
        assert list(trial.exceptions) == [s["exception"] for s in steps if s["exception"]], name
        if harbor["reward_valid"]:  # the reward Harbor wrote for the trial
            assert trial.rollout.rewards == harbor["rewards"], name
            assert trial.rollout.reward == main_reward(harbor["rewards"]), name
        else:
            assert (trial.rollout.status, trial.rollout.reward) == ("infra_error", None), name
            assert trial.infra_exception == "RewardFileNotFoundError", name
    # every step ran and passed (steps-gated's 3, steps-final's 2): the trial's reward is
    # what Harbor wrote (steps-gated: the mean of the steps' maps, a missing key as 0,
    # as `style` is only the last step's)
    passed = {t["task_name"]: t for t in recorded.values()
              if all((s["rewards"] or {}).get("reward") == 1 and s["exception"] is None
                     for s in t["steps"])}
    assert {task: len(t["steps"]) for task, t in passed.items()} == {
        "rsr-async/steps-gated": 3, "rsr-async/steps-final": 2}
    assert passed["rsr-async/steps-gated"]["rewards"] == {
        "reward": 1.0, "style": pytest.approx(1 / 3)}
    assert all(trials[t["name"]].rollout.status == "succeeded" for t in passed.values())
    # the gated step failed (below min_reward): the last step never ran, and the mean of
    # the two that did is a valid fractional reward
    (gated,) = [t for t in recorded.values()
                if [s["name"] for s in t["steps"]] == ["create", "extend"]
                and t["steps"][1]["exception"] is None]
    assert (gated["steps"][1]["rewards"], gated["rewards"]) == ({"reward": 0.0}, {"reward": 0.5})
    assert trials[gated["name"]].rollout.status == "failed"
    # a step's verifier crashed: the trial ended there. steps-gated's reward is the
    # steps' before it (1.0), steps-final's none; neither is graded
    crashed = [t for t in recorded.values()
               if t["steps"][-1]["exception"] == "RewardFileNotFoundError"]
    assert sorted((t["task_name"], t["rewards"] is not None) for t in crashed) == [
        ("rsr-async/steps-final", False), ("rsr-async/steps-final", False),
        ("rsr-async/steps-gated", True)]
    assert all(t["steps"][-1]["rewards"] is None for t in crashed)
    # the agent's own timeout on a step, then a later step's crash: two exceptions, the
    # trial listed under both (Harbor's exception_stats); the crash is what voids it
    (both,) = [t for t in crashed if t["steps"][0]["exception"] == "AgentTimeoutError"]
    assert trials[both["name"]].exceptions == ("AgentTimeoutError", "RewardFileNotFoundError")
    assert "RewardFileNotFoundError 3" in jobs.note() and "AgentTimeoutError" not in jobs.note()


def test_read_logs_a_note(rec: Recording, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="rsr_async.analysis.harbor"):
        rollouts, _ = read_harbor_jobs(rec.path)
    assert len(rollouts) == len(rec.trials)
    (message,) = [r.getMessage() for r in caplog.records]
    assert "1 still running" in message
    assert "SandboxBuildFailedError 1" in message and "ApiRateLimitError 1" in message


# -- odd and broken inputs ---------------------------------------------------------------


def _copy_job(rec: Recording, tmp_path: Path, job: str = "tb-sweep") -> Path:
    target = tmp_path / "jobs" / job
    shutil.copytree(rec.path / job, target)
    return target


def _a_trial(job_dir: Path, prefix: str = "fix-git__") -> Path:
    return next(p for p in sorted(job_dir.iterdir()) if p.name.startswith(prefix)) / "result.json"


def _edit(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="does not exist"):
        read_harbor_jobs(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(TaskError, match="is not a directory"):
        read_harbor_jobs(tmp_path / "file")


def test_empty_directories(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="no Harbor job directories"):
        read_harbor_jobs(tmp_path)
    job = tmp_path / "job"
    job.mkdir()
    (job / "config.json").write_text("{}")
    with pytest.raises(TaskError, match="no finished Harbor trials"):
        read_harbor_jobs(job)
    (job / "trial__abc").mkdir()
    (job / "trial__abc" / "config.json").write_text('{"trial_name": "trial__abc"}')
    with pytest.raises(TaskError, match=r"no finished Harbor trials \(1 still running"):
        read_harbor_jobs(tmp_path)


def test_broken_json_names_the_file(rec: Recording, tmp_path: Path) -> None:
    job = _copy_job(rec, tmp_path)
    result = _a_trial(job)
    result.write_text(result.read_text()[:200])
    with pytest.raises(TaskError, match="not valid JSON") as caught:
        read_harbor_jobs(tmp_path / "jobs")
    assert str(result) in str(caught.value)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.pop("task_name"), "task_name"),
        (lambda d: d["agent_info"].pop("name"), r"`name` - at `\$.agent_info`"),
        (lambda d: d.update(verifier_result={"rewards": {"reward": "yes"}}), "rewards"),
        (lambda d: d.update(started_at="last tuesday"), "started_at"),
        (lambda d: d.update(exception_info={"exception_message": "?"}), "exception_type"),
        (lambda d: d.update(task_name=""), "`task_name` is empty"),
        (lambda d: d.update(exception_info={"exception_type": "X", "policy": {}}),
         "has_valid_reward"),
    ],
    ids=["no-task", "no-agent-name", "reward-not-number", "bad-time", "no-type", "empty-task",
         "policy-without-verdict"],
)
def test_bad_fields_name_the_file_and_field(
    rec: Recording, tmp_path: Path, change: Any, field: str
) -> None:
    job = _copy_job(rec, tmp_path)
    result = _a_trial(job)
    _edit(result, change)
    with pytest.raises(TaskError, match=field) as caught:
        read_harbor_jobs(job)
    assert str(result) in str(caught.value)


def test_not_an_object(rec: Recording, tmp_path: Path) -> None:
    job = _copy_job(rec, tmp_path)
    _a_trial(job).write_text("[1, 2]")
    with pytest.raises(TaskError, match="not a Harbor trial result: Expected `object`"):
        read_harbor_jobs(job)


def test_a_result_that_cannot_be_read(rec: Recording, tmp_path: Path) -> None:
    job = _copy_job(rec, tmp_path)
    result = _a_trial(job)
    result.unlink()
    result.mkdir()  # a directory where the file should be
    with pytest.raises(TaskError, match="cannot read"):
        read_harbor_jobs(job)


def test_a_trial_directory_is_refused_by_name(rec: Recording, tmp_path: Path) -> None:
    trial = _a_trial(_copy_job(rec, tmp_path)).parent
    with pytest.raises(TaskError, match="trial directory"):
        read_harbor_jobs(trial)


def test_a_job_without_its_own_files_still_reads(rec: Recording, tmp_path: Path) -> None:
    job = _copy_job(rec, tmp_path)
    (job / "result.json").unlink()
    (job / "config.json").unlink()
    assert len(scan_harbor_jobs(job).trials) == rec.expected["jobs"]["tb-sweep"]["stats"]["n_completed_trials"]


def test_a_torn_job_result_and_stray_entries_are_ignored(rec: Recording, tmp_path: Path) -> None:
    job = _copy_job(rec, tmp_path)
    (job / "result.json").write_text('{"id": "3f')  # Harbor rewrites it as trials end
    (job / "job.log").write_text("log\n")
    (job / ".sources").mkdir()  # Harbor's cache of hub source trials
    (job / ".sources" / "result.json").write_text("not json")
    empty = job / "sort-logs__writing"
    empty.mkdir()
    (empty / "result.json").write_text("")  # Harbor is writing it
    jobs = scan_harbor_jobs(tmp_path / "jobs")
    assert len(jobs.trials) == rec.expected["jobs"]["tb-sweep"]["stats"]["n_completed_trials"]
    assert jobs.unfinished == ("tb-sweep/sort-logs__writing",)


def test_a_copied_job_is_not_counted_twice(rec: Recording, tmp_path: Path) -> None:
    _copy_job(rec, tmp_path)
    shutil.copytree(tmp_path / "jobs" / "tb-sweep", tmp_path / "jobs" / "tb-sweep-copy")
    with pytest.raises(TaskError, match="the same trial"):
        read_harbor_jobs(tmp_path / "jobs")


def test_one_task_in_two_datasets_is_refused(rec: Recording, tmp_path: Path) -> None:
    job = _copy_job(rec, tmp_path)
    result = _a_trial(job)
    _edit(result, lambda d: d.update(source="other-set"))
    with pytest.raises(TaskError, match="task 'fix-git' comes from dataset") as caught:
        read_harbor_jobs(job)
    assert "'other-set'" in str(caught.value) and "'tb-mini'" in str(caught.value)


def test_no_verifier_result_and_no_exception_is_not_a_sample(
    rec: Recording, tmp_path: Path
) -> None:
    job = _copy_job(rec, tmp_path)
    result = _a_trial(job)
    _edit(result, lambda d: d.update(verifier_result=None, exception_info=None))
    name = json.loads(result.read_text())["trial_name"]
    (trial,) = [t for t in scan_harbor_jobs(job).trials if t.trial == name]
    assert (trial.rollout.status, trial.exception) == ("infra_error", None)
    _edit(result, lambda d: d.update(verifier_result={"rewards": None}))
    (trial,) = [t for t in scan_harbor_jobs(job).trials if t.trial == name]
    assert trial.rollout.status == "infra_error"


def test_step_exceptions_count_as_harbors_do(rec: Recording, tmp_path: Path) -> None:
    """Multi-step trials record handled failures on the steps; a reward is valid only
    when every recorded exception is the agent's own (``TrialResult.reward_valid``)."""
    job = _copy_job(rec, tmp_path)
    result = _a_trial(job)
    step = {"step_name": "one", "exception_info": {
        "exception_type": "AgentTimeoutError", "exception_message": "",
        "exception_traceback": "", "occurred_at": "2025-01-01T00:00:00Z"}}
    _edit(result, lambda d: d.update(verifier_result={"rewards": {"reward": 1}},
                                     exception_info=None, step_results=[step]))
    name = json.loads(result.read_text())["trial_name"]
    (trial,) = [t for t in scan_harbor_jobs(job).trials if t.trial == name]
    assert (trial.rollout.status, trial.exception) == ("succeeded", "AgentTimeoutError")
    step["exception_info"]["exception_type"] = "SandboxLikelyOutOfMemoryError"
    _edit(result, lambda d: d.update(step_results=[step]))
    (trial,) = [t for t in scan_harbor_jobs(job).trials if t.trial == name]
    assert (trial.rollout.status, trial.cause) == ("infra_error", "sandbox_failed")
    # Two steps, two types: counted once each, as Harbor's exception_stats; the note
    # names the one that voided the reward, not the agent's own timeout before it
    timeout = {**step, "exception_info": {**step["exception_info"],
                                          "exception_type": "AgentTimeoutError"}}
    _edit(result, lambda d: d.update(step_results=[timeout, step]))
    jobs = scan_harbor_jobs(job)
    (trial,) = [t for t in jobs.trials if t.trial == name]
    assert trial.exceptions == ("AgentTimeoutError", "SandboxLikelyOutOfMemoryError")
    assert (trial.exception, trial.infra_exception) == (
        "AgentTimeoutError", "SandboxLikelyOutOfMemoryError")
    counts = jobs.exception_counts()[trial.rollout.harness]
    assert counts["AgentTimeoutError"] == 1 + sum(  # the trials that already had one
        t.exception == "AgentTimeoutError" and t.rollout.harness == trial.rollout.harness
        for t in jobs.trials if t.trial != name)
    assert counts["SandboxLikelyOutOfMemoryError"] == 1
    assert "SandboxLikelyOutOfMemoryError 1" in jobs.note()
    assert "AgentTimeoutError" not in jobs.note()


def test_naive_and_missing_start_times_still_order(rec: Recording, tmp_path: Path) -> None:
    job = _copy_job(rec, tmp_path)
    paths = sorted(job.glob("fix-git__*/result.json"))
    _edit(paths[0], lambda d: d.update(started_at="2000-01-01T00:00:00"))  # naive: earliest
    _edit(paths[1], lambda d: d.update(started_at=None))  # unknown: last
    names = [json.loads(p.read_text())["trial_name"] for p in paths[:2]]
    jobs = scan_harbor_jobs(job)
    harness = {t.trial: t.rollout.harness for t in jobs.trials}
    for name, where in zip(names, (0, -1), strict=True):
        group = [t.trial for t in jobs.trials
                 if t.rollout.task == "fix-git" and t.rollout.harness == harness[name]]
        assert group[where] == name


def test_mangled_files_raise_task_errors_only(rec: Recording, tmp_path: Path) -> None:
    """Truncated, bit-flipped and reshaped JSON anywhere: a TaskError or a reading,
    never another exception."""
    rnd = random.Random(14)
    shutil.copytree(rec.path, tmp_path / "jobs")
    files = sorted((tmp_path / "jobs").rglob("*.json"))
    for _ in range(60):
        path = rnd.choice(files)
        original = path.read_bytes()
        data = bytearray(original)
        if rnd.random() < 0.5:
            data = data[: rnd.randrange(len(data))]
        else:
            for _ in range(3):
                data[rnd.randrange(len(data))] = rnd.randrange(256)
        path.write_bytes(bytes(data))
        try:
            scan_harbor_jobs(tmp_path / "jobs")
        except TaskError as exc:
            assert str(path) in str(exc) or "trial" in str(exc)
        finally:
            path.write_bytes(original)
