"""The records that flow through the engine.

Every record is a frozen, keyword-only ``msgspec.Struct`` so it is cheap to create,
cheap to encode and safe to share between tasks. Small, numerous, acyclic records are
``gc=False``. Encoders and decoders are built once, here, and reused everywhere
(``encode``, ``decode``).

Origins (``Message.origin``) decide what may be exported for SFT:

- ``task``: the public prompt (instruction and first terminal state)
- ``model``: what the model said
- ``env``: what the environment showed (terminal observations)
- ``harness``: control text (confirm-completion prompts, parse-error feedback,
  "failed, try again", state-machine commands and their output)
- ``private``: guidance the deployed model never sees (runbooks)
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeAlias, TypeVar

import msgspec

__all__ = [
    "RESULT_TYPES",
    "SPEC_TYPES",
    "AnyResult",
    "AuditResult",
    "AuditSpec",
    "CollectHook",
    "Command",
    "CritiqueResult",
    "CritiqueSpec",
    "EndReason",
    "EpisodeResult",
    "EpisodeSpec",
    "EpisodeStyle",
    "EpisodeTiming",
    "ImageFiles",
    "JobKey",
    "JobResult",
    "JobSpec",
    "JobSpecBase",
    "JobStatus",
    "Leak",
    "Message",
    "Origin",
    "PlanResult",
    "PlanSpec",
    "Role",
    "Runbook",
    "StepHealthcheck",
    "StepResult",
    "Task",
    "TaskStep",
    "Trajectory",
    "Usage",
    "Verdict",
    "decode",
    "encode",
    "kind_of",
]

Origin = Literal["task", "model", "env", "harness", "private"]
Role = Literal["system", "user", "assistant"]
JobStatus = Literal["pending", "running", "succeeded", "failed", "infra_error", "cancelled"]
EndReason = Literal[
    "completed",  # the model confirmed completion twice (or the harness's own end rule)
    "max_turns",
    "timeout",  # the episode's wall clock ran out
    "context",  # the context window ran out and could not be handed off
    "error",  # the harness or model failed in a way the protocol cannot recover from
    "infra",  # sandbox/model-server failure: not the model's fault
    "cancelled",
]


class Usage(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Token and latency accounting for one call, or summed over many."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    latency_s: float = 0.0
    requests: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            latency_s=self.latency_s + other.latency_s,
            requests=self.requests + other.requests,
        )

    @property
    def cached_share(self) -> float:
        """Fraction of prompt tokens served from the prefix cache."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


class CollectHook(msgspec.Struct, frozen=True, kw_only=True):
    """One ``[[verifier.collect]]`` entry of a Harbor 0.26 task (the main service only)."""

    command: str
    timeout_s: float = 60.0
    user: str | None = None


class StepHealthcheck(msgspec.Struct, frozen=True, kw_only=True):
    """A step's ``[steps.healthcheck]`` (Harbor 0.26's ``HealthcheckConfig``, Docker
    HEALTHCHECK semantics): run after the step's setup, before the agent."""

    command: str
    interval_s: float = 5.0
    timeout_s: float = 30.0
    start_period_s: float = 0.0
    start_interval_s: float = 5.0
    retries: int = 3


class TaskStep(msgspec.Struct, frozen=True, kw_only=True):
    """One ``[[steps]]`` entry of a multi-step Harbor 0.26 task (``steps/<name>/``).

    Every field is resolved at load as Harbor resolves it: the step's own value, else the
    task's (``[agent]``, ``[verifier]``), so the step loop needs no task.toml rules."""

    name: str
    instruction: str
    """``steps/<name>/instruction.md``, canary lines cut."""
    tests_dir: str | None = None
    """``steps/<name>/tests`` when present: put in ``/tests`` over the task's ``tests/``
    (a ``test.sh`` there replaces the task's)."""
    solution_path: str | None = None
    """``steps/<name>/solution/solve.sh``, else the task's ``solution/solve.sh`` (Harbor's
    oracle falls back to it), else None."""
    workdir_dir: str | None = None
    """``steps/<name>/workdir``: copied into the agent's working directory before the
    step, and its ``setup.sh`` run there (Harbor's step setup)."""
    agent_timeout_s: float = 600.0
    verifier_timeout_s: float = 600.0
    verifier_env: dict[str, str] = msgspec.field(default_factory=dict)
    """The task's ``[verifier].env`` with the step's over it."""
    verifier_user: str | None = None
    verifier_mode: Literal["shared", "separate"] = "shared"
    verifier_collect: tuple[CollectHook, ...] = ()
    """The task's collect hooks, then the step's."""
    artifacts: tuple[str, ...] = ()
    """The task's artifacts, then the step's."""
    healthcheck: StepHealthcheck | None = None
    min_reward: dict[str, float] | None = None
    """``min_reward``: the remaining steps are not run when a key's reward is below its
    threshold or missing (a number gates the ``reward`` key)."""


class Task(msgspec.Struct, frozen=True, kw_only=True):
    """One task, normalised from a Harbor or legacy terminal-bench directory."""

    name: str
    """The short name: job keys, image names, ``--task``. Harbor's ``org/name`` without
    the ``org/``; the directory's name when the task names none."""
    path: str
    instruction: str
    format: Literal["harbor", "terminal-bench"] = "harbor"
    qualified_name: str = ""
    """Harbor 0.25's package name (``org/name``) when task.toml gives one, else ``name``."""
    test_parser: str = "pytest"
    """Legacy terminal-bench only: the ``parser_name`` that reads the test output."""
    category: str = ""
    tags: tuple[str, ...] = ()
    difficulty: str = ""
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    agent_timeout_s: float = 600.0
    verifier_timeout_s: float = 600.0
    build_timeout_s: float = 600.0
    docker_image: str | None = None
    environment_dir: str | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    allow_internet: bool = False
    workdir: str | None = None
    env: dict[str, str] = msgspec.field(default_factory=dict)
    verifier_env: dict[str, str] = msgspec.field(default_factory=dict)
    verifier_user: str | None = None
    """``[verifier].user`` (Harbor 0.26): who the tests run as (None: root)."""
    verifier_mode: Literal["shared", "separate"] = "shared"
    """``[verifier].environment_mode`` (Harbor 0.26): ``shared`` grades in the agent's
    sandbox, its processes alive; ``separate`` in a fresh sandbox of the task's
    environment holding only the ``artifacts`` the agent's left behind."""
    verifier_collect: tuple[CollectHook, ...] = ()
    """``[[verifier.collect]]``: commands run in the agent's sandbox after its turn, before
    the artifacts are collected (best effort, as in Harbor)."""
    artifacts: tuple[str, ...] = ()
    """Task-level ``artifacts``: paths in the agent's sandbox copied into a separate
    verifier's (``/logs/artifacts`` always is)."""
    tests_dir: str = ""
    test_script: str = "test.sh"
    solution_path: str | None = None
    """The reference solution the oracle runs: Harbor's ``solution/solve.sh``; legacy
    terminal-bench's ``solution.sh``, else its ``solution.yaml`` (keystrokes typed into
    tmux, :mod:`rsr_async.tasks.keystrokes`); None when there is none."""
    steps: tuple[TaskStep, ...] = ()
    """A multi-step Harbor 0.26 task's ``[[steps]]``, in order (empty: a single-step
    task). Then :attr:`instruction` is the first step's (Harbor shows the agent each
    step's own, one after another) and :attr:`tests_dir` the task's shared ``tests/``
    (which may not exist when every step has its own)."""
    multi_step_reward: Literal["mean", "final"] = "mean"
    """``multi_step_reward_strategy``: the episode's rewards are the per-key mean over the
    steps that were graded (a key a step lacks counts 0), or the last run step's."""


class Command(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One Terminus keystroke batch: literal text and special keys, then a wait."""

    keystrokes: str
    duration: float = 1.0


class Message(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One message of a trajectory, tagged with where it came from."""

    role: Role
    content: str
    origin: Origin
    turn: int = 0
    at: float = 0.0
    """Seconds since the episode started."""
    usage: Usage | None = None
    """Model messages only: the call that produced it."""
    commands: tuple[Command, ...] = ()
    """Model messages only: the parsed commands that were run."""
    task_complete: bool = False


class Trajectory(msgspec.Struct, kw_only=True):
    """Every message of one episode, in order."""

    task: str
    harness: str
    model: str = ""
    messages: list[Message] = msgspec.field(default_factory=list)

    def commands(self, *, skip_first: int = 0) -> list[str]:
        """The keystrokes the model sent, in order, skipping its first ``skip_first`` turns."""
        out: list[str] = []
        seen = 0
        for message in self.messages:
            if message.origin != "model":
                continue
            seen += 1
            if seen > skip_first:
                out.extend(c.keystrokes for c in message.commands)
        return out

    def usage(self) -> Usage:
        total = Usage()
        for message in self.messages:
            if message.usage is not None:
                total = total + message.usage
        return total


class JobKey(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Deterministic identity of a job, so a rerun resumes instead of repeating work."""

    stage: str
    task: str
    harness: str = "-"
    attempt: int = 0
    runbook: str = "-"
    execution: int = -1

    def __str__(self) -> str:
        return (
            f"{self.stage}/{self.task}/{self.harness}/a{self.attempt}"
            f"/{self.runbook}/e{self.execution}"
        )


class JobResult(msgspec.Struct, kw_only=True, tag_field="kind"):
    """What any job produced: the envelope every kind of result shares.

    A tagged union (``kind``): :class:`EpisodeResult`, :class:`PlanResult`,
    :class:`CritiqueResult`, :class:`AuditResult`. The engine and the store handle only
    this envelope; the typed output is the subclass's fields.
    """

    key: JobKey
    status: JobStatus
    end_reason: EndReason = "completed"
    error: str | None = None
    usage: Usage = Usage()
    started_at: float = 0.0
    finished_at: float = 0.0
    model: str = ""
    """Name of the model that produced the result; "" when none answered (an infra error
    before the first call) or in stores written before this field existed."""
    scripted: bool = False
    """True when that model was the scripted stand-in (a test double): such a result is
    never a model's result. False in stores written before this field existed (then
    ``model`` is "" too: the provenance is unknown)."""

    @classmethod
    def ended(
        cls,
        *,
        key: JobKey,
        status: JobStatus,
        end_reason: EndReason,
        error: str | None,
        started_at: float,
        finished_at: float,
        partial: Trajectory | None,
    ) -> JobResult:
        """The result of a job the engine ended itself (infra error, deadline, cancel).

        ``partial`` is what the runner last checkpointed (see :meth:`partial_fields`)."""
        return cls(
            key=key,
            status=status,
            end_reason=end_reason,
            error=error,
            started_at=started_at,
            finished_at=finished_at,
            **cls.partial_fields(partial),
        )

    @classmethod
    def partial_fields(cls, partial: Trajectory | None) -> dict[str, Any]:
        """What a kind keeps of a checkpointed trajectory when the engine ends its job
        (episodes keep the trajectory; other kinds nothing)."""
        return {}

    def columns(self) -> tuple[float | None, int | None]:
        """``(reward, turns)`` for the store's queryable columns (episodes have both)."""
        return None, None

    heavy: ClassVar[tuple[str, ...]] = ()
    """Fields :meth:`light` leaves out: the bulky ones (trajectories, raw text)."""

    def light(self) -> JobResult:
        """This result without its :attr:`heavy` fields (set to their defaults): what the
        store keeps beside the full result for analyses that read every job."""
        if not self.heavy:
            return self
        return msgspec.structs.replace(
            self, **{name: _DEFAULTS[type(self)][name] for name in self.heavy}
        )


class EpisodeStyle(msgspec.Struct, frozen=True, kw_only=True):
    """How an episode went about its task (the paper's Table 3), from its trajectory by
    :func:`rsr_async.analysis.style.episode_style`. Defaults decode older stores."""

    model_turns: int = 0
    """Agent-loop model replies (handoff calls not counted)."""
    commands: int = 0
    """Commands the model sent (special keys such as ``C-c`` included)."""
    exploration_share: float = 0.0
    """Share of :attr:`commands` that only inspect (``ls``, ``cat``, ``grep`` ...)."""
    state_share: float = 0.0
    """Share of :attr:`commands` that are ``statem ...`` state management."""
    claims: int = 0
    """Confirmed completion claims (a ``task_complete`` reply right after another)."""
    rejected_claim: bool = False
    """A claim was rejected (the episode went on) before the final one."""


class ImageFiles(msgspec.Struct, frozen=True, kw_only=True):
    """What one task image holds beyond the base image: its files, directories and links
    (absolute paths) and the commands it adds, for the leak audit's sandbox knowledge.

    Listed once per image id by :meth:`rsr_async.sandbox.SandboxPool.image_files` and
    carried by every successful :class:`EpisodeResult` of the task, and from there by
    its :class:`AuditSpec`. Shallowest paths first, then by name; at most
    :data:`rsr_async.sandbox.images.IMAGE_FILES_MAX`.

    Why it rides in the result rather than in a store table or a file of the run
    directory keyed by image id: the audit runs on the head, with no sandbox, maybe in a
    later ``verify`` or after a resume; in a Ray run the episode ran on a remote actor
    whose Docker host and scratch directory the head cannot reach, and only the head
    writes the store, from results. The result is the one thing that always travels
    (over the wire unchanged, stored in the job's own transaction), and successors stay a
    pure function of stored results, so a rerun rebuilds the same audit job. The cost is
    a copy per successful episode and audit job: small, as only what the task added to
    the base is kept (2 to 40 paths, at most 1.4 KB, for the bundled tasks)."""

    image: str
    """The image id (``sha256:...``) the episode ran on (a compose task: its main service's)."""
    base: str = ""
    """Id of the base image subtracted from the listing ("" when the host lacked it)."""
    paths: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    """Names of the files in ``bin`` directories among :attr:`paths`."""
    truncated: bool = False
    """Not every path is here: over the cap (the deepest were dropped) or the listing hit
    its deadline. A path left out is flagged as before: the audit is stricter, never laxer."""
    listed_s: float = 0.0
    """Seconds this image's listing took (its container's start, ``find``, the copy out;
    the base image's, listed once per host, not included)."""


class EpisodeTiming(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Where one episode's wall time went, by phase, in seconds (see
    :mod:`rsr_async.phases`). Harbor reports environment setup, agent setup, agent,
    verifier and teardown per trial; these say at least as much. Every default is 0 so
    that results stored before timing existed decode; :attr:`wall_s` 0 means untimed."""

    wall_s: float = 0.0
    """The runner's whole attempt: from taking the job to returning its result."""
    sandbox_s: float = 0.0
    """Getting the sandbox: placement, the image check, and a container created and
    started (or a prewarmed one claimed); a compose task: its network and services."""
    create_s: float = 0.0
    """Of :attr:`sandbox_s`: Docker's container create calls (all services of a compose task)."""
    start_s: float = 0.0
    """Of :attr:`sandbox_s`: Docker's container start calls (waits for the host's start
    limiter included)."""
    claim_s: float = 0.0
    """Of :attr:`sandbox_s`: recording the claim of a prewarmed container."""
    prewarmed: bool = False
    """The episode got a container started ahead of demand (its start is not in
    :attr:`sandbox_s`: the prewarm wave paid it before the run's episodes began)."""
    shell_s: float = 0.0
    """Opening the terminal: tmux and its login bash up to the first prompt, the session
    probe, the first capture."""
    model_s: float = 0.0
    """Waiting on the model: every chat call of the agent (handoff calls included)."""
    model_calls: int = 0
    commands_s: float = 0.0
    """Typing the agent's keystrokes and waiting on them (the duration it asked for, or
    less when nothing more could come), with the pane capture after each."""
    commands: int = 0
    verify_wait_s: float = 0.0
    """Queued for one of ``sandbox.max_concurrent_verifiers`` verifier slots."""
    verify_s: float = 0.0
    """The hidden verification, timed around the verifier call (RSRT: every hidden
    verification, copies included)."""
    verify_prepare_s: float = 0.0
    """Of :attr:`verify_s`: the Docker calls before the tests' exec (clearing, uploads)."""
    verify_tests_s: float = 0.0
    """Of :attr:`verify_s`: the call that ran the tests (the one the verifier marks with
    ``phases.note_call(..., tests=True)``, else the first exec after the last upload)."""
    verify_reward_s: float = 0.0
    """Of :attr:`verify_s`: the Docker calls after the tests' exec (logs, reward, clean-up)."""
    snapshot_s: float = 0.0
    """RSRT: committing the agent's container and starting its copy, per hidden verification."""
    teardown_s: float = 0.0
    """Closing the shell and removing the container(s) (a compose task: its network too)."""
    image_files_s: float = 0.0
    """Listing the task image's files for the leak audit (a success, once per image)."""
    other_s: float = 0.0
    """:attr:`wall_s` less every phase above: the harness's own work (parsing, rendering,
    observations), the event loop's queue, anything not accounted for."""


class StepResult(msgspec.Struct, frozen=True, kw_only=True):
    """How one step of a multi-step task went (Harbor's ``StepResult``)."""

    name: str
    first_message: int = 0
    """Index in the episode's trajectory of the step's first message: each step is a
    fresh chat (Harbor runs Terminus 2 anew per step), so a conversation ends there."""
    reward: float | None = None
    """The step's main reward; None when it was not graded (its setup failed, or its
    verifier left no reward)."""
    rewards: dict[str, float] = msgspec.field(default_factory=dict)
    end_reason: EndReason = "completed"
    """How the agent's turn at this step ended."""
    turns: int = 0
    error: str | None = None
    """What went wrong in this step (setup, verifier), if anything."""
    verifier_output: str = ""


class EpisodeResult(JobResult, kw_only=True, tag="episode"):
    """What one episode produced. ``status`` and ``end_reason`` say how it ended."""

    reward: float | None = None
    """The verifier's main reward (``reward`` key, else the mean of all keys)."""
    rewards: dict[str, float] = msgspec.field(default_factory=dict)
    verifier_output: str = ""
    verifier_logs: dict[str, str] = msgspec.field(default_factory=dict)
    """What Harbor keeps of ``/logs/verifier`` (``ctrf.json``, ``test.log``, the reward,
    the script's output as ``test-stdout.txt``): relative path → text, each file capped
    at 64,000 characters and all at 256,000, cut with a marker. Empty in older stores."""
    trajectory: Trajectory | None = None
    turns: int = 0
    style: EpisodeStyle = EpisodeStyle()
    """Execution style; all defaults in stores written before this field existed."""
    image_files: ImageFiles | None = None
    """What the task image holds beyond the base (successful episodes in a Docker
    sandbox); None when unlisted, in older stores, or when the listing failed."""
    timing: EpisodeTiming = EpisodeTiming()
    """Where the episode's time went, by phase; all zero in stores written before it existed."""
    steps: tuple[StepResult, ...] = ()
    """A multi-step task: each step that ran, in order (steps after one that stopped the
    episode are absent); :attr:`rewards` is then their aggregate. Empty otherwise."""

    @classmethod
    def partial_fields(cls, partial: Trajectory | None) -> dict[str, Any]:
        if partial is None:
            return {}
        return {
            "trajectory": partial,
            "usage": partial.usage(),
            "turns": sum(1 for m in partial.messages if m.origin == "model"),
        }

    heavy: ClassVar[tuple[str, ...]] = ("trajectory", "verifier_output", "verifier_logs", "image_files")

    def columns(self) -> tuple[float | None, int | None]:
        return self.reward, self.turns


class Runbook(msgspec.Struct, frozen=True, kw_only=True):
    """A plan written from a successful trajectory; guidance, never the answer."""

    id: str
    """``r<index>d<draft>``: runbook index among the source's K, and its draft number."""
    task: str
    source_key: str
    index: int
    text: str
    revision: int = 0
    """How many times it was regenerated after a critique."""
    sections: dict[str, str] = msgspec.field(default_factory=dict)


class Leak(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A literal the model used that it could not have derived from what it saw."""

    value: str
    kind: str
    turn: int
    position: int
    rule: str = ""
    """The scanner rule that flagged it (``unseen-number``, ``unseen-part`` …; see
    ``rsr_async._native.leakrules.RULES``); empty in records written before rules had names."""
    why: str = ""
    """One sentence: which rule, which value (or part of it), where, and what was checked."""


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """A critic's or auditor's decision about a runbook or a trajectory."""

    subject: str
    accepted: bool
    stage: Literal["deterministic", "judge", "audit"]
    reasons: tuple[str, ...] = ()
    leaks: tuple[Leak, ...] = ()


class PlanResult(JobResult, kw_only=True, tag="plan"):
    """A planner job's output: one runbook draft (``None`` when the reply was unusable)."""

    heavy: ClassVar[tuple[str, ...]] = ("reply",)

    runbook: Runbook | None = None
    reply: str = ""
    """The planner's raw reply (kept for inspection)."""


class CritiqueResult(JobResult, kw_only=True, tag="critique"):
    """A critic job's output: the verdict on one runbook draft."""

    heavy: ClassVar[tuple[str, ...]] = ("reply",)

    verdict: Verdict | None = None
    reply: str = ""


class AuditResult(JobResult, kw_only=True, tag="audit"):
    """A leak audit of one execution: ``verdict.accepted`` means the trajectory is kept."""

    verdict: Verdict | None = None
    flagged: tuple[Leak, ...] = ()
    """Values the deterministic scanner flagged (the auditor ruled on each)."""
    reply: str = ""

    heavy: ClassVar[tuple[str, ...]] = ("reply",)


class JobSpecBase(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    """Shared by every job spec: the tagged union :data:`JobSpec`.

    ``resource`` names the capacity a job of this kind holds while it runs (sandbox jobs
    and model-only jobs have separate limits); ``result_type`` is the result it produces.
    """

    resource: ClassVar[str] = "sandbox"
    result_type: ClassVar[type[JobResult]] = JobResult

    key: JobKey
    task: Task
    affinity: str = ""
    """Routing key: calls sharing it start on the same model server (prefix reuse)."""
    temperature: float | None = None
    seed: int = 0
    deadline_s: float | None = None

    def budget_s(self, configured: float) -> float:
        """Wall clock the engine allows one attempt (``configured``: ``engine.job_deadline_s``)."""
        if self.deadline_s is not None:
            return self.deadline_s
        return configured if configured > 0 else 600.0


class EpisodeSpec(JobSpecBase, frozen=True, kw_only=True, tag="episode"):
    """Everything needed to run one agent episode."""

    result_type: ClassVar[type[JobResult]] = EpisodeResult

    harness: str = "terminus2"
    guidance: str | None = None
    """Private guidance (a runbook) shown to the executor; never exported."""
    max_turns: int = 200
    deadline_s: float | None = None
    """The agent's wall clock (the harness enforces it; RSRT's 180 min goes here); None
    means the task's agent timeout. The engine allows build, verifier and queueing time
    on top."""

    def budget_s(self, configured: float) -> float:
        if configured > 0:
            return configured
        # deadline_s is the agent's own clock (the harness enforces it); the job also
        # builds, starts, verifies and may queue for each.
        task = self.task
        if task.steps:  # a multi-step task runs and grades every step in one job
            agent = sum(self.deadline_s if self.deadline_s is not None else s.agent_timeout_s for s in task.steps)
            tests = sum(s.verifier_timeout_s for s in task.steps)
            return task.build_timeout_s + agent + tests + EPISODE_SLACK_S
        agent = self.deadline_s if self.deadline_s is not None else task.agent_timeout_s
        return task.build_timeout_s + agent + task.verifier_timeout_s + EPISODE_SLACK_S


EPISODE_SLACK_S = 900.0
"""Queueing allowance on top of an episode's build + agent + verifier budget."""


class PlanSpec(JobSpecBase, frozen=True, kw_only=True, tag="plan"):
    """Write runbook ``index`` (draft ``draft``) from a compressed source trajectory."""

    resource: ClassVar[str] = "model"
    result_type: ClassVar[type[JobResult]] = PlanResult

    source_key: str
    source: str
    """The compressed source trajectory (harness control dropped): the planner's input."""
    source_trajectory: Trajectory
    """The source itself: the critic's rules check runbooks against its final state."""
    index: int
    count: int
    draft: int = 0
    rejected: str | None = None
    """The previous draft, when this is a regeneration after a critique."""
    critique: str | None = None


class CritiqueSpec(JobSpecBase, frozen=True, kw_only=True, tag="critique"):
    """Judge one runbook draft: deterministic rules, then the model judge."""

    resource: ClassVar[str] = "model"
    result_type: ClassVar[type[JobResult]] = CritiqueResult

    runbook: Runbook
    plan: PlanSpec
    """The plan job that wrote it (its source, for the rules and for a regeneration)."""


class AuditSpec(JobSpecBase, frozen=True, kw_only=True, tag="audit"):
    """Leak-audit one verified execution."""

    resource: ClassVar[str] = "model"
    result_type: ClassVar[type[JobResult]] = AuditResult

    execution_key: str
    trajectory: Trajectory
    image_files: ImageFiles | None = None
    """The execution's task image beyond the base (from its :class:`EpisodeResult`): the
    audit knows those paths exist. None in older stores: the base image only."""


JobSpec: TypeAlias = EpisodeSpec | PlanSpec | CritiqueSpec | AuditSpec
"""What a job runs: a tagged union on ``kind``."""
AnyResult: TypeAlias = EpisodeResult | PlanResult | CritiqueResult | AuditResult
"""What a job produced: a tagged union on ``kind``."""
def _field_defaults(cls: type[msgspec.Struct]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in msgspec.structs.fields(cls):
        if field.default is not msgspec.NODEFAULT:
            out[field.name] = field.default
        elif field.default_factory is not msgspec.NODEFAULT:
            out[field.name] = field.default_factory()
    return out


RESULT_TYPES: dict[str, type[JobResult]] = {
    "episode": EpisodeResult,
    "plan": PlanResult,
    "critique": CritiqueResult,
    "audit": AuditResult,
}
_DEFAULTS: dict[type[JobResult], dict[str, Any]] = {
    cls: _field_defaults(cls) for cls in (JobResult, EpisodeResult, PlanResult, CritiqueResult, AuditResult)
}
"""Per result type, its fields' defaults (what :meth:`JobResult.light` puts in)."""
SPEC_TYPES: dict[str, type[JobSpecBase]] = {
    "episode": EpisodeSpec,
    "plan": PlanSpec,
    "critique": CritiqueSpec,
    "audit": AuditSpec,
}


def kind_of(spec: JobSpecBase) -> str:
    """The tag of a spec (``episode``, ``plan`` ...): the store's ``kind`` column."""
    tag = type(spec).__struct_config__.tag
    return str(tag)


_encoder = msgspec.json.Encoder()
_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}
T = TypeVar("T")


def encode(obj: object) -> bytes:
    """Encode any record (or builtin container of records) to JSON bytes."""
    return _encoder.encode(obj)


def decode(data: bytes | str, type: type[T]) -> T:
    """Decode JSON into ``type``, reusing one decoder per type."""
    decoder = _decoders.get(type)
    if decoder is None:
        decoder = _decoders[type] = msgspec.json.Decoder(type)
    result: T = decoder.decode(data)
    return result
