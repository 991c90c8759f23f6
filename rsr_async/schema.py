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

from typing import Any, Literal, TypeVar

import msgspec

__all__ = [
    "Command",
    "EndReason",
    "EpisodeResult",
    "EpisodeSpec",
    "JobKey",
    "JobStatus",
    "Leak",
    "Message",
    "Origin",
    "Role",
    "Runbook",
    "Task",
    "Trajectory",
    "Usage",
    "Verdict",
    "decode",
    "encode",
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


class Task(msgspec.Struct, frozen=True, kw_only=True):
    """One task, normalised from a Harbor or legacy terminal-bench directory."""

    name: str
    path: str
    instruction: str
    format: Literal["harbor", "terminal-bench"] = "harbor"
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
    tests_dir: str = ""
    test_script: str = "test.sh"
    solution_path: str | None = None


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


class EpisodeSpec(msgspec.Struct, frozen=True, kw_only=True):
    """Everything needed to run one agent episode."""

    key: JobKey
    task: Task
    harness: str = "terminus2"
    guidance: str | None = None
    """Private guidance (a runbook) shown to the executor; never exported."""
    temperature: float | None = None
    seed: int = 0
    max_turns: int = 200
    deadline_s: float | None = None
    """The agent's wall clock (the harness enforces it; RSRT's 180 min goes here); None
    means the task's agent timeout. The engine allows build, verifier and queueing time
    on top."""
    affinity: str = ""
    """Routing key: episodes sharing it start on the same model server (prefix reuse)."""


class EpisodeResult(msgspec.Struct, kw_only=True):
    """What one episode produced. ``status`` and ``end_reason`` say how it ended."""

    key: JobKey
    status: JobStatus
    end_reason: EndReason
    reward: float | None = None
    """The verifier's main reward (``reward`` key, else the mean of all keys)."""
    rewards: dict[str, float] = msgspec.field(default_factory=dict)
    verifier_output: str = ""
    trajectory: Trajectory | None = None
    usage: Usage = Usage()
    error: str | None = None
    started_at: float = 0.0
    finished_at: float = 0.0
    turns: int = 0
    model: str = ""
    """Name of the model that produced the episode; "" when none answered (an infra error
    before the first call) or in stores written before this field existed."""
    scripted: bool = False
    """True when that model was the scripted stand-in (a test double): such a result is
    never a model's result. False in stores written before this field existed (then
    ``model`` is "" too: the provenance is unknown)."""


class Runbook(msgspec.Struct, frozen=True, kw_only=True):
    """A plan written from a successful trajectory; guidance, never the answer."""

    id: str
    task: str
    source_key: str
    index: int
    text: str
    revision: int = 0
    """How many times it was regenerated after a critique."""


class Leak(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A literal the model used that it could not have derived from what it saw."""

    value: str
    kind: str
    turn: int
    position: int


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """A critic's or auditor's decision about a runbook or a trajectory."""

    subject: str
    accepted: bool
    stage: Literal["deterministic", "judge", "audit"]
    reasons: tuple[str, ...] = ()
    leaks: tuple[Leak, ...] = ()


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
