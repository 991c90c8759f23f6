"""The RSR graph with its real model-job runners and the scripted stand-in in process:
keys, regeneration after a critique, executions per accepted runbook, audits, per-stage
settings. Episodes are typed solutions (no Docker here; the end-to-end test has it)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from rsr_async.config import Config, EngineConfig, RsrConfig, RunConfig
from rsr_async.engine import Engine, Job, JobContext, Store
from rsr_async.errors import ConfigMismatchError
from rsr_async.llm.scripted import ScriptedModel, split_blocks
from rsr_async.rsr.commands import default_run_dir
from rsr_async.rsr.discover import discover_jobs
from rsr_async.rsr.pipeline import RewriteGraph, model_runners, stage_settings
from rsr_async.schema import (
    AuditResult,
    Command,
    CritiqueResult,
    CritiqueSpec,
    EpisodeResult,
    EpisodeSpec,
    Message,
    PlanResult,
    PlanSpec,
    Trajectory,
)
from rsr_async.tasks import BUNDLED_SUITE, load_dataset

TASKS = load_dataset([str(BUNDLED_SUITE)]).tasks[:12]
SOLUTIONS = {t.name: Path(t.solution_path).read_text() for t in TASKS if t.solution_path}


def config(k: int = 2, m: int = 2, retries: int = 2) -> Config:
    return Config(
        run=RunConfig(concurrency=16, model_concurrency=16),
        engine=EngineConfig(progress="none", store_batch_ms=5.0),
        rsr=RsrConfig(runbooks_per_source=k, executions_per_runbook=m, critic_max_retries=retries),
    )


class TypedSolution:
    """An episode runner that types the task's reference solution: a plausible source."""

    def __init__(self) -> None:
        self.executed: list[str] = []

    async def __call__(self, job: Job, ctx: JobContext) -> EpisodeResult:
        spec = job.spec
        assert isinstance(spec, EpisodeSpec)
        self.executed.append(str(job.key))
        trajectory = Trajectory(task=spec.task.name, harness=spec.harness, model="scripted-stand-in")
        if spec.guidance is not None:
            trajectory.messages.append(Message(role="system", content=spec.guidance, origin="private"))
        trajectory.messages.append(Message(role="user", content=spec.task.instruction, origin="task"))
        script = SOLUTIONS.get(spec.task.name, "ls\n")
        for turn, block in enumerate(split_blocks(script)[:4], start=1):
            trajectory.messages.append(Message(
                role="assistant", content=json.dumps({"commands": [block]}), origin="model", turn=turn,
                commands=(Command(keystrokes=block + "\n", duration=0.1),),
            ))
            trajectory.messages.append(Message(role="user", content="$ ", origin="env", turn=turn))
        return EpisodeResult(key=job.key, status="succeeded", end_reason="completed", reward=1.0,
                             trajectory=trajectory, turns=4)


async def run_pipeline(run_dir: Path, cfg: Config, stages: set[str] | None = None) -> tuple[list, TypedSolution]:
    model = ScriptedModel.from_tasks_dir(BUNDLED_SUITE)
    episodes = TypedSolution()
    runners = {"episode": episodes, **model_runners(model, cfg, scripted=True)}
    async with Engine(cfg, runner=runners, run_dir=run_dir) as engine:
        results = [r async for r in engine.run(discover_jobs(TASKS, cfg), graph=RewriteGraph(cfg),
                                               only_stages=stages)]
    return results, episodes


async def test_the_graph_plans_critiques_regenerates_executes_and_audits(tmp_path: Path) -> None:
    results, episodes = await run_pipeline(tmp_path, config())
    by_stage = Counter(r.key.stage for r in results)
    assert by_stage["discover"] == len(TASKS)
    with Store.open_readonly(tmp_path) as store:
        plans = {str(p.key): p for p in store.outputs(PlanResult, stage="plan")}
        critiques = {str(c.key): c for c in store.outputs(CritiqueResult, stage="critique")}
        audits = list(store.outputs(AuditResult, stage="audit"))
        for stage in ("plan", "critique", "execute", "audit"):
            assert store.counts(stage=stage)["infra_error"] == 0
        first_drafts = [p for p in plans.values() if p.key.runbook.endswith("d0")]
        assert len(first_drafts) == 2 * len(TASKS)  # K per source
        # every parsed draft was critiqued, under the same runbook id
        assert {k.replace("plan/", "critique/") for k, p in plans.items() if p.runbook} == set(critiques)
        rejected = [c for c in critiques.values() if c.verdict and not c.verdict.accepted]
        assert rejected, "the scripted planner leaks a seeded share; none was caught"
        for critique in rejected:  # regenerated with the critique, as the next draft
            index, draft = critique.key.runbook[1:].split("d")
            regenerated = store.spec(f"plan/{critique.key.task}/{critique.key.harness}/a0/r{index}d{int(draft) + 1}/e-1")
            assert isinstance(regenerated, PlanSpec)
            assert regenerated.rejected and regenerated.critique == "\n".join(critique.verdict.reasons)
            spec = store.spec(critique.key)
            assert isinstance(spec, CritiqueSpec) and regenerated.rejected == spec.runbook.text
        accepted = [c for c in critiques.values() if c.verdict and c.verdict.accepted]
        executions = [k for k in episodes.executed if k.startswith("execute/")]
        assert len(executions) == 2 * len(accepted)  # M per accepted runbook
        guided = [r for r in store.results(stage="execute")]
        assert all(r.trajectory and r.trajectory.messages[0].origin == "private" for r in guided)
        assert len(audits) == len(executions)  # every verified execution is audited
        assert all(a.verdict is not None and a.verdict.subject.startswith("execute/") for a in audits)


async def test_a_rerun_does_nothing_and_one_stage_alone_runs_only_its_jobs(tmp_path: Path) -> None:
    await run_pipeline(tmp_path, config(), stages={"discover"})
    with Store.open_readonly(tmp_path) as store:
        assert store.counts(stage="plan")["succeeded"] == 0
    results, episodes = await run_pipeline(tmp_path, config(), stages={"plan", "critique"})
    assert {r.key.stage for r in results} == {"plan", "critique"}
    assert episodes.executed == []
    again, episodes = await run_pipeline(tmp_path, config())
    assert {r.key.stage for r in again} <= {"execute", "audit"}
    assert episodes.executed and all(k.startswith("execute/") for k in episodes.executed)
    final, episodes = await run_pipeline(tmp_path, config())
    assert final == [] and episodes.executed == []


async def test_stage_settings_are_checked_per_stage(tmp_path: Path) -> None:
    await run_pipeline(tmp_path, config(k=1, m=1), stages={"discover"})
    changed = config(k=3, m=1)
    # a later stage's settings neither invalidate discovery nor move the default run dir
    assert default_run_dir(changed, ["x"]) == default_run_dir(config(k=1, m=1), ["x"])
    async with Engine(changed, runner={}, run_dir=tmp_path) as engine:
        store = engine.store
        settings = stage_settings(config(k=1, m=1))
        store.check_stage_config("plan", settings["plan"])
        store.check_stage_config("execute", settings["execute"])
        with pytest.raises(ConfigMismatchError, match=r"'plan' stage.*rsr.runbooks_per_source: 1 -> 3"):
            store.check_stage_config("plan", stage_settings(changed)["plan"])
        store.check_stage_config("execute", stage_settings(changed)["execute"])  # M unchanged
        store.check_stage_config("plan", stage_settings(changed)["plan"], force=True)
        assert store.stage_config("plan") == stage_settings(changed)["plan"]


async def test_an_execution_with_a_planted_leak_is_audited_out_and_not_exported(tmp_path: Path) -> None:
    """The audit job, through the engine and the store, drops a trajectory that typed the
    answer before anything showed it; the export then leaves it out."""
    from rsr_async.export import collect_records
    from rsr_async.schema import AuditSpec, JobKey, Task
    from tests.rsr.test_audit import INSTRUCTION, _env, _model, execution

    def clean_execution() -> Trajectory:  # every value typed was shown first
        return Trajectory(task="ledger", harness="terminus2", messages=[
            Message(role="user", origin="task", content=f"Task Description:\n{INSTRUCTION}"),
            _model(0, "head -n 3 /app/ledger.csv\n"),
            _env(1, "id,amount\n1,1200.25\n2,3210.25\n"),
            _model(1, "python3 -c 'print(1200.25 + 3210.25)'\n"),
            _env(2, "4410.5\n"),
            _model(2, "echo 4410.5 > /app/total.txt\n"),
        ])

    task = Task(name="ledger", path="", instruction=INSTRUCTION)
    jobs = []
    for planted in (True, False):
        key = JobKey(stage="audit", task="ledger", harness="terminus2", runbook="r0d0", execution=int(planted))
        jobs.append(Job.of(AuditSpec(key=key, task=task, execution_key=f"execute/ledger/e{int(planted)}",
                                     trajectory=execution(planted=True) if planted else clean_execution())))
    cfg = config()
    model = ScriptedModel({})
    async with Engine(cfg, runner=dict(model_runners(model, cfg, scripted=True)), run_dir=tmp_path) as engine:
        results = {r.key.execution: r async for r in engine.run(jobs)}
    planted, clean = results[1], results[0]
    assert isinstance(planted, AuditResult) and planted.verdict is not None
    assert not planted.verdict.accepted
    assert "73519.25" in [leak.value for leak in planted.verdict.leaks]
    assert isinstance(clean, AuditResult) and clean.verdict is not None and clean.verdict.accepted
    with Store.open_readonly(tmp_path) as store:
        stored = store.get(planted.key)
        assert isinstance(stored, AuditResult) and stored.verdict == planted.verdict
        assert collect_records(store) == []  # no verified execution of these is in the store
