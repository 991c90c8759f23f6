"""Recursive Self-Rewrite as a job graph: discover → plan → critique → execute → audit.

The engine runs keyed jobs and asks :class:`RewriteGraph` for the jobs that follow each
finished one, so every stage starts the moment its input exists::

    discover/<task>/<harness>/a<n>            an episode; on success, K planner jobs:
    plan/<task>/<harness>/a<n>/r<i>d<d>       runbook i, draft d; parsed → a critique job
    critique/<task>/<harness>/a<n>/r<i>d<d>   rules, then the judge; accepted → M executions,
                                              rejected → plan r<i>d<d+1> with the critique
                                              (up to ``rsr.critic_max_retries`` regenerations)
    execute/<task>/<harness>/a<n>/r<i>d<d>/e<j>  Terminus 2 with the runbook as private
                                              guidance; verifier passed → an audit job
    audit/<task>/<harness>/a<n>/r<i>d<d>/e<j>    leak audit; accepted → kept for export

Keys are a function of the source and the draft chain, so a rerun recreates exactly the
jobs still to do. The CLI's stages map onto job stages (:data:`JOB_STAGES`): ``rewrite``
is plan + critique + execute, ``verify`` is audit; ``export`` reads the store afterwards.
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any

import anyio

from .._native import SandboxKnowledge
from ..config import Config
from ..engine import Job, JobContext
from ..errors import ContextLengthError, ReplyFormatError
from ..llm.base import ChatModel, Completion
from ..schema import (
    AuditResult,
    AuditSpec,
    CritiqueResult,
    CritiqueSpec,
    EpisodeResult,
    EpisodeSpec,
    ImageFiles,
    JobKey,
    JobResult,
    PlanResult,
    PlanSpec,
    Runbook,
    Trajectory,
    Verdict,
)
from .audit import auditor_messages, flag_values, parse_audit, sandbox_knowledge
from .critic import judge_messages, parse_judgement, rule_checks
from .planner import compress_source, parse_runbook, planner_messages, render_runbook

__all__ = [
    "JOB_STAGES",
    "AuditRunner",
    "CritiqueRunner",
    "PlanRunner",
    "RewriteGraph",
    "job_stages",
    "stage_settings",
]

JOB_STAGES: dict[str, tuple[str, ...]] = {
    "discover": ("discover",),
    "rewrite": ("plan", "critique", "execute"),
    "verify": ("audit",),
    "export": (),
}
"""CLI stage → the job stages it runs."""


def job_stages(stages: Iterable[str]) -> frozenset[str]:
    """The job stages that ``run --stages ...`` (or a stage command) runs."""
    return frozenset(s for stage in stages for s in JOB_STAGES[stage])


def stage_settings(config: Config) -> dict[str, dict[str, Any]]:
    """Per job stage, the settings its results depend on (checked on every rerun).

    Discovery's settings are the run-wide ones (the store checks them on open); these
    are the ``rsr`` settings, so changing K or M never invalidates discovery, and
    changing M never invalidates the runbooks already planned and critiqued.
    """
    rsr = config.rsr
    return {
        "plan": {
            "rsr.runbooks_per_source": rsr.runbooks_per_source,
            "rsr.observation_bytes_for_planner": rsr.observation_bytes_for_planner,
            "rsr.critic_max_retries": rsr.critic_max_retries,
        },
        "critique": {
            "rsr.critic_ngram": rsr.critic_ngram,
            "rsr.critic_overlap_threshold": rsr.critic_overlap_threshold,
        },
        "execute": {
            "rsr.executions_per_runbook": rsr.executions_per_runbook,
            "rsr.executor_temperature": rsr.executor_temperature,
            "rsr.executor_harness": rsr.executor_harness,
        },
        "audit": {},
    }


def _seed(base: int, key: JobKey) -> int:
    return (zlib.crc32(str(key).encode()) ^ (base * 0x9E3779B1)) & 0x7FFFFFFF


def _next_key(key: JobKey, stage: str, *, runbook: str | None = None, execution: int | None = None) -> JobKey:
    """``key`` moved to ``stage``: the same source (task, harness, attempt) and runbook."""
    return JobKey(
        stage=stage,
        task=key.task,
        harness=key.harness,
        attempt=key.attempt,
        runbook=key.runbook if runbook is None else runbook,
        execution=key.execution if execution is None else execution,
    )


def _source_id(key: JobKey) -> str:
    return f"{key.task}:{key.harness}#a{key.attempt}"


class RewriteGraph:
    """The pipeline's :class:`~rsr_async.engine.JobGraph` (a pure function of results)."""

    def __init__(self, config: Config) -> None:
        self._config = config
        rsr = config.rsr
        self._k = rsr.runbooks_per_source
        self._m = rsr.executions_per_runbook
        self._retries = rsr.critic_max_retries
        self._next = {
            "discover": self._after_discover,
            "plan": self._after_plan,
            "critique": self._after_critique,
            "execute": self._after_execute,
        }

    def successors(self, job: Job, result: JobResult) -> list[Job]:
        step = self._next.get(job.key.stage)
        return [] if step is None else step(job, result)

    # ------------------------------------------------------------------ per stage

    def _after_discover(self, job: Job, result: JobResult) -> list[Job]:
        if result.status != "succeeded" or not isinstance(result, EpisodeResult):
            return []
        if result.trajectory is None or not isinstance(job.spec, EpisodeSpec):
            return []
        if job.spec.task.steps:  # one runbook per multi-step episode is not defined yet (README)
            return []
        source = compress_source(
            result.trajectory, observation_bytes=self._config.rsr.observation_bytes_for_planner
        )
        return [
            self._plan(job.key, job.spec, result.trajectory, source, index=i, draft=0)
            for i in range(self._k)
        ]

    def _plan(
        self,
        source_key: JobKey,
        source_spec: EpisodeSpec | PlanSpec,
        trajectory: Trajectory,
        source: str,
        *,
        index: int,
        draft: int,
        rejected: str | None = None,
        critique: str | None = None,
    ) -> Job:
        key = _next_key(source_key, "plan", runbook=f"r{index}d{draft}", execution=-1)
        return Job.of(
            PlanSpec(
                key=key,
                task=source_spec.task,
                source_key=str(_discover_key(source_key)),
                source=source,
                source_trajectory=trajectory,
                index=index,
                count=self._k,
                draft=draft,
                rejected=rejected,
                critique=critique,
                # the K drafts of one source share its prefix on one server
                affinity=f"plan:{_source_id(source_key)}#r{index}",
                temperature=self._config.llm.temperature,
                seed=_seed(self._config.run.seed, key),
            )
        )

    def _after_plan(self, job: Job, result: JobResult) -> list[Job]:
        spec = job.spec
        if not isinstance(spec, PlanSpec) or not isinstance(result, PlanResult):
            return []
        if result.status == "succeeded" and result.runbook is not None:
            key = _next_key(job.key, "critique")
            return [
                Job.of(
                    CritiqueSpec(
                        key=key,
                        task=spec.task,
                        runbook=result.runbook,
                        plan=spec,
                        affinity=f"critique:{_source_id(key)}#{key.runbook}",
                        seed=_seed(self._config.run.seed, key),
                    )
                )
            ]
        # An unusable reply is the model's failure: regenerate, telling it why.
        return self._regenerate(spec, result.reply, f"Your reply could not be used: {result.error}")

    def _regenerate(self, plan: PlanSpec, rejected: str, critique: str) -> list[Job]:
        if plan.draft >= self._retries:
            return []
        return [
            self._plan(
                plan.key,
                plan,
                plan.source_trajectory,
                plan.source,
                index=plan.index,
                draft=plan.draft + 1,
                rejected=rejected,
                critique=critique,
            )
        ]

    def _after_critique(self, job: Job, result: JobResult) -> list[Job]:
        spec = job.spec
        if not isinstance(spec, CritiqueSpec) or not isinstance(result, CritiqueResult):
            return []
        if result.status != "succeeded" or result.verdict is None:
            return []  # the critic's reply was unusable: the draft is dropped, with its reason
        if not result.verdict.accepted:
            return self._regenerate(spec.plan, spec.runbook.text, "\n".join(result.verdict.reasons))
        rsr = self._config.rsr
        jobs = []
        for execution in range(self._m):
            key = _next_key(job.key, "execute", execution=execution)
            jobs.append(
                Job.episode(
                    EpisodeSpec(
                        key=key,
                        task=spec.task,
                        harness=rsr.executor_harness,
                        guidance=spec.runbook.text,
                        temperature=rsr.executor_temperature,
                        seed=_seed(self._config.run.seed, key),
                        max_turns=self._config.harness.max_turns,
                        # the M executions of one runbook share its prefix on one server
                        affinity=f"execute:{_source_id(key)}:{key.runbook}#e{execution}",
                    )
                )
            )
        return jobs

    def _after_execute(self, job: Job, result: JobResult) -> list[Job]:
        if result.status != "succeeded" or not isinstance(result, EpisodeResult):
            return []
        if result.trajectory is None:
            return []
        key = _next_key(job.key, "audit")
        return [
            Job.of(
                AuditSpec(
                    key=key,
                    task=job.spec.task,
                    execution_key=str(job.key),
                    trajectory=result.trajectory,
                    # what the task image holds, listed where the execution ran (on a
                    # remote actor too: it came back with the result)
                    image_files=result.image_files,
                    affinity=f"audit:{_source_id(key)}:{key.runbook}#e{key.execution}",
                    seed=_seed(self._config.run.seed, key),
                )
            )
        ]


def _discover_key(key: JobKey) -> JobKey:
    return _next_key(key, "discover", runbook="-", execution=-1)


# ---------------------------------------------------------------------- runners


class _ModelRunner:
    """Shared by the model-only runners: one chat call, usage reported to the engine."""

    def __init__(self, model: ChatModel, *, scripted: bool, max_tokens: int | None = None) -> None:
        self._model = model
        self._scripted = scripted
        self._max_tokens = max_tokens

    async def _ask(
        self, ctx: JobContext, messages: list[Any], *, affinity: str, temperature: float | None, seed: int
    ) -> Completion:
        completion = await self._model.chat(
            messages,
            affinity=affinity,
            max_tokens=self._max_tokens,
            temperature=temperature,
            seed=seed,
        )
        ctx.step(completion.usage)
        return completion

    def _provenance(self) -> dict[str, Any]:
        return {"model": self._model.model_name, "scripted": self._scripted}


class PlanRunner(_ModelRunner):
    """Runs a :class:`PlanSpec`: the planner writes one runbook draft."""

    async def __call__(self, job: Job, ctx: JobContext) -> PlanResult:
        spec = job.spec
        if not isinstance(spec, PlanSpec):
            raise TypeError(f"{job.key}: PlanRunner runs plan jobs, got {type(spec).__name__}")
        messages = planner_messages(
            instruction=spec.task.instruction,
            source=spec.source,
            index=spec.index,
            count=spec.count,
            rejected=spec.rejected,
            critique=spec.critique,
        )
        try:
            completion = await self._ask(
                ctx, messages, affinity=spec.affinity, temperature=spec.temperature, seed=spec.seed
            )
        except ContextLengthError as exc:  # the source does not fit: the model's limit, not infra
            return PlanResult(key=job.key, status="failed", end_reason="context", error=str(exc),
                              **self._provenance())
        common = {"key": job.key, "usage": completion.usage, "reply": completion.text, **self._provenance()}
        try:
            sections = parse_runbook(completion.text)
        except ReplyFormatError as exc:
            return PlanResult(status="failed", end_reason="error", error=str(exc), **common)
        runbook = Runbook(
            id=job.key.runbook,
            task=spec.task.name,
            source_key=spec.source_key,
            index=spec.index,
            text=render_runbook(sections),
            revision=spec.draft,
            sections=dict(sections),
        )
        return PlanResult(status="succeeded", runbook=runbook, **common)


class CritiqueRunner(_ModelRunner):
    """Runs a :class:`CritiqueSpec`: deterministic rules first, then the model judge,
    which sees only the public instruction and the runbook."""

    def __init__(
        self,
        model: ChatModel,
        *,
        scripted: bool,
        ngram: int = 8,
        overlap_threshold: float = 0.2,
        max_tokens: int | None = None,
    ) -> None:
        super().__init__(model, scripted=scripted, max_tokens=max_tokens)
        self._ngram = ngram
        self._overlap = overlap_threshold

    async def __call__(self, job: Job, ctx: JobContext) -> CritiqueResult:
        spec = job.spec
        if not isinstance(spec, CritiqueSpec):
            raise TypeError(f"{job.key}: CritiqueRunner runs critique jobs, got {type(spec).__name__}")
        runbook = spec.runbook
        # Reads the task's solution/ and tests/ files: off the event loop.
        reasons = await anyio.to_thread.run_sync(
            partial(
                rule_checks,
                runbook.text,
                task=spec.task,
                source=spec.plan.source_trajectory,
                ngram=self._ngram,
                overlap_threshold=self._overlap,
            )
        )
        if reasons:
            verdict = Verdict(subject=runbook.id, accepted=False, stage="deterministic",
                              reasons=tuple(reasons))
            return CritiqueResult(key=job.key, status="succeeded", verdict=verdict, **self._provenance())
        messages = judge_messages(instruction=spec.task.instruction, runbook=runbook.text)
        completion = await self._ask(
            ctx, messages, affinity=spec.affinity, temperature=spec.temperature, seed=spec.seed
        )
        common = {"key": job.key, "usage": completion.usage, "reply": completion.text, **self._provenance()}
        try:
            accepted, critique = parse_judgement(completion.text)
        except ReplyFormatError as exc:
            return CritiqueResult(status="failed", end_reason="error", error=str(exc), **common)
        verdict = Verdict(subject=runbook.id, accepted=accepted, stage="judge",
                          reasons=(critique,) if critique else ())
        return CritiqueResult(status="succeeded", verdict=verdict, **common)


class AuditRunner(_ModelRunner):
    """Runs an :class:`AuditSpec`: the scanner flags values the model could not have seen;
    the auditor rules each one derivable or leaked. No flag: kept without a model call.

    The scanner knows the sandbox: the base image and, when the spec carries it, what
    the execution's task image holds beyond it (``AuditSpec.image_files``, listed by the
    pool where the execution ran and stored with its result, so a later ``verify`` or a
    resume on a head with no Docker reads it from the store). The knowledge of the last
    few images is kept, as the M executions of a runbook share one.
    """

    _KNOWLEDGE_KEPT = 32

    def __init__(self, model: ChatModel, *, scripted: bool, max_tokens: int | None = None) -> None:
        super().__init__(model, scripted=scripted, max_tokens=max_tokens)
        self._knowledge: OrderedDict[str, SandboxKnowledge] = OrderedDict()

    def _sandbox(self, image_files: ImageFiles | None) -> SandboxKnowledge:
        if image_files is None:
            return sandbox_knowledge(None)
        known = self._knowledge.get(image_files.image)
        if known is None:
            known = self._knowledge[image_files.image] = sandbox_knowledge(image_files)
            if len(self._knowledge) > self._KNOWLEDGE_KEPT:
                self._knowledge.popitem(last=False)
        else:
            self._knowledge.move_to_end(image_files.image)
        return known

    async def __call__(self, job: Job, ctx: JobContext) -> AuditResult:
        spec = job.spec
        if not isinstance(spec, AuditSpec):
            raise TypeError(f"{job.key}: AuditRunner runs audit jobs, got {type(spec).__name__}")
        instruction = spec.task.instruction
        flagged = tuple(flag_values(spec.trajectory, instruction=instruction,
                                    sandbox=self._sandbox(spec.image_files)))
        subject = spec.execution_key
        if not flagged:
            verdict = Verdict(subject=subject, accepted=True, stage="audit")
            return AuditResult(key=job.key, status="succeeded", verdict=verdict, **self._provenance())
        messages = auditor_messages(instruction=instruction, trajectory=spec.trajectory, leaks=flagged)
        completion = await self._ask(
            ctx, messages, affinity=spec.affinity, temperature=spec.temperature, seed=spec.seed
        )
        common = {"key": job.key, "usage": completion.usage, "reply": completion.text,
                  "flagged": flagged, **self._provenance()}
        try:
            rulings = parse_audit(completion.text, flagged)
        except ReplyFormatError as exc:
            return AuditResult(status="failed", end_reason="error", error=str(exc), **common)
        leaked = tuple(leak for leak, is_leak, _ in rulings if is_leak)
        reasons = tuple(
            f"{'leaked' if is_leak else 'derivable'}: {leak.value!r}: {why}" for leak, is_leak, why in rulings
        )
        verdict = Verdict(subject=subject, accepted=not leaked, stage="audit", reasons=reasons, leaks=leaked)
        return AuditResult(status="succeeded", verdict=verdict, **common)


def model_runners(
    model: ChatModel, config: Config, *, scripted: bool
) -> Mapping[str, PlanRunner | CritiqueRunner | AuditRunner]:
    """The runners of the model-only job kinds."""
    rsr = config.rsr
    return {
        "plan": PlanRunner(model, scripted=scripted),
        "critique": CritiqueRunner(
            model, scripted=scripted, ngram=rsr.critic_ngram, overlap_threshold=rsr.critic_overlap_threshold
        ),
        "audit": AuditRunner(model, scripted=scripted),
    }

