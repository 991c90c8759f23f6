"""The leak audit knows the task image: a path the image holds is no leak when typed unseen.

The listing comes from the sandbox pool where the execution ran, travels in the
execution's result (to the head too, from a remote actor) and reaches the audit job
through its spec; without it the audit knows only the base image.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import msgspec
import pytest

from rsr_async.cluster.wire import Finished, decode_outcomes, encode_outcomes
from rsr_async.config import Config, EngineConfig, RsrConfig, RunConfig, SandboxConfig
from rsr_async.engine import Engine, Job, Store
from rsr_async.llm.scripted import ScriptedModel
from rsr_async.rsr.pipeline import RewriteGraph, model_runners
from rsr_async.schema import (
    AuditResult,
    AuditSpec,
    EpisodeResult,
    EpisodeSpec,
    ImageFiles,
    JobKey,
    Message,
    Task,
    Trajectory,
    decode,
    encode,
)
from tests.rsr.test_audit import _env, _model

INSTRUCTION = "Count the rows of the input data and write the count to /app/count.txt."
TYPED = "/app/data/input.csv"
FILES = ImageFiles(image="sha256:" + "ab" * 32, base="sha256:" + "cd" * 32,
                   paths=("/app", "/app/data", TYPED, "/usr/local/bin/ledgertool2"),
                   commands=("ledgertool2",))


def counted() -> Trajectory:
    """The model types the task image's data file and tool before anything showed them."""
    return Trajectory(task="ledger", harness="terminus2", messages=[
        Message(role="user", origin="task", content=f"Task Description:\n{INSTRUCTION}\n\n"
                "Current terminal state:\nroot@sandbox:/app# "),
        _model(0, f"wc -l < {TYPED} > /app/count.txt\n"),
        _env(1, "root@sandbox:/app# "),
        _model(1, "cat /app/count.txt\n", "ledgertool2 --check data/input.csv\n"),
        _env(2, "2\n"),
    ])


def config() -> Config:
    return Config(run=RunConfig(concurrency=2, model_concurrency=4),
                  engine=EngineConfig(progress="none", store_batch_ms=5.0, infra_retries=0),
                  rsr=RsrConfig(runbooks_per_source=1, executions_per_runbook=1))


def audit_job(image_files: ImageFiles | None, execution: int) -> Job:
    task = Task(name="ledger", path="", instruction=INSTRUCTION)
    key = JobKey(stage="audit", task="ledger", harness="terminus2", runbook="r0d0", execution=execution)
    return Job.of(AuditSpec(key=key, task=task, execution_key=f"execute/ledger/e{execution}",
                            trajectory=counted(), image_files=image_files))


async def test_a_path_the_task_image_holds_is_flagged_only_without_its_listing(tmp_path: Path) -> None:
    cfg = config()
    model = ScriptedModel({})
    runners = dict(model_runners(model, cfg, scripted=True))
    async with Engine(cfg, runner=runners, run_dir=tmp_path) as engine:
        results = {r.key.execution: r async for r in engine.run([audit_job(FILES, 0), audit_job(None, 1)])}
    known, unknown = results[0], results[1]
    assert isinstance(known, AuditResult) and known.verdict is not None
    assert known.flagged == () and known.verdict.accepted and known.reply == ""  # no model call
    assert isinstance(unknown, AuditResult) and unknown.verdict is not None
    flagged = {leak.value: leak.rule for leak in unknown.flagged}
    assert flagged == {TYPED: "unseen-path", "ledgertool2": "unseen-token",
                       "data/input.csv": "unseen-path"}
    assert unknown.reply  # the auditor model ruled on them
    with Store.open_readonly(tmp_path) as store:  # a later `verify` reads the spec back whole
        spec = store.spec(known.key)
        assert isinstance(spec, AuditSpec) and spec.image_files == FILES


def test_the_audit_job_carries_what_the_execution_listed() -> None:
    cfg = config()
    task = Task(name="ledger", path="", instruction=INSTRUCTION)
    key = JobKey(stage="execute", task="ledger", harness="terminus2", runbook="r0d0", execution=0)
    job = Job.episode(EpisodeSpec(key=key, task=task, guidance="runbook"))
    for files in (FILES, None):  # None: a result stored before listings, or a failed listing
        result = EpisodeResult(key=key, status="succeeded", reward=1.0, trajectory=counted(),
                               image_files=files)
        (audit,) = RewriteGraph(cfg).successors(job, result)
        assert isinstance(audit.spec, AuditSpec) and audit.spec.image_files == files
    # The listing is heavy: analyses reading every job's light result skip it.
    assert EpisodeResult(key=key, status="succeeded", image_files=FILES).light().image_files is None


def test_the_listing_travels_back_from_a_remote_actor_and_old_records_still_decode() -> None:
    key = JobKey(stage="execute", task="ledger", harness="terminus2", runbook="r0d0", execution=0)
    result = EpisodeResult(key=key, status="succeeded", reward=1.0, image_files=FILES)
    (back,) = decode_outcomes(encode_outcomes([Finished(key=str(key), result=result, steps=1)]))
    assert isinstance(back, Finished) and isinstance(back.result, EpisodeResult)
    assert back.result.image_files == FILES
    old_result = {"kind": "episode", "key": {"stage": "execute", "task": "t"}, "status": "succeeded"}
    assert decode(json.dumps(old_result), EpisodeResult).image_files is None
    spec = msgspec.to_builtins(audit_job(FILES, 0).spec)
    del spec["image_files"]
    assert decode(encode(spec), AuditSpec).image_files is None


DOCKERFILE = """\
ARG BASE_IMAGE=rsr-base:bookworm
FROM ${BASE_IMAGE}
COPY data/ /app/data/
COPY nonce.txt /app/
WORKDIR /app
"""


def act(keys: str = "", done: bool = False) -> str:
    commands = [{"keystrokes": keys, "duration": 0.5}] if keys else []
    return json.dumps({"analysis": "a", "plan": "p", "commands": commands, "task_complete": done})


@pytest.mark.docker
async def test_an_execution_in_docker_is_audited_with_its_image_files(tmp_path: Path) -> None:
    """End to end: a real sandbox episode (the execute stage) lists its task image; the
    graph hands the listing to the audit job, which then does not flag the data file the
    model typed unseen."""
    from rsr_async.harness.fakes import ReplayModel
    from rsr_async.rsr.episode import EpisodeRunner
    from rsr_async.sandbox import SandboxPool
    from tests.sandbox.conftest import remove_image

    root = tmp_path / "task"
    (root / "environment" / "data").mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text(DOCKERFILE)
    (root / "environment" / "data" / "input.csv").write_text("id,amount\n1,1200.25\n")
    (root / "environment" / "nonce.txt").write_text(uuid.uuid4().hex)
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text(
        "if [ \"$(cat /app/count.txt)\" = 2 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")
    task = Task(name="audit-image-files", path=str(root), instruction=INSTRUCTION,
                environment_dir=str(root / "environment"), tests_dir=str(root / "tests"),
                verifier_timeout_s=30, agent_timeout_s=60)
    cfg = config()
    key = JobKey(stage="execute", task=task.name, harness="terminus2", runbook="r0d0", execution=0)
    episode = Job.episode(EpisodeSpec(key=key, task=task, guidance="count input.csv", deadline_s=60))
    executor = ReplayModel([act(f"wc -l < {TYPED} > /app/count.txt\n"), act(done=True), act(done=True)])
    pool_config = SandboxConfig(api_timeout_s=60.0)
    tag = None
    try:
        async with SandboxPool(pool_config, run_id=f"test-audit-{uuid.uuid4().hex[:8]}",
                               run_dir=tmp_path / "run") as pool:
            tag = await pool.ensure_image(task)
            runners = {"episode": EpisodeRunner(pool=pool, model=executor, harness=cfg.harness,
                                                scripted=True),
                       **model_runners(ScriptedModel({}), cfg, scripted=True)}
            async with Engine(cfg, runner=runners, run_dir=tmp_path / "run") as engine:
                results = {r.key.stage: r async for r in engine.run([episode], graph=RewriteGraph(cfg))}
            assert await pool.containers() == []
        execution, audit = results["execute"], results["audit"]
        assert isinstance(execution, EpisodeResult) and execution.status == "succeeded", execution.error
        assert execution.image_files is not None and TYPED in execution.image_files.paths
        assert isinstance(audit, AuditResult) and audit.verdict is not None
        assert audit.verdict.accepted and TYPED not in [leak.value for leak in audit.flagged]
        # The same trajectory audited the old way (no listing) flags the file.
        assert execution.trajectory is not None
        from rsr_async.rsr.audit import flag_values
        assert TYPED in [leak.value for leak in flag_values(execution.trajectory, instruction=INSTRUCTION)]
    finally:
        if tag:
            await remove_image(tag)
