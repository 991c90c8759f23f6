"""One exception tree for the whole engine.

Library errors (aiodocker, aiohttp, httpx, sqlite3, msgspec) are mapped to these at the
boundary of the room that calls the library, with ``raise ... from exc``, so callers
never need to know which library sits underneath. Each network library is mapped by one
table in one module: aiodocker and the aiohttp client under it in
:mod:`rsr_async.sandbox.docker_errors` (by exception type, then by Docker's status),
aiohttp into httpx in the model transport and httpx into :class:`LLMError` in the client
in :mod:`rsr_async.llm.http_errors`; ``tests/test_error_boundaries.py`` fails on a handler
of those libraries' exceptions anywhere else.

```
RsrError                       every error this package raises on purpose
├── ConfigError                a bad config file, key or value (names file and key path)
├── TaskError                  a task that cannot be loaded or is malformed (names task, file)
├── HarnessError               a harness bug or an impossible protocol state
├── StoreError                 the run database
│   ├── StoreCorruptError      not a database, or not ours: never silently started over
│   └── ConfigMismatchError    resuming a run with a different config
├── NotImplementedYetError     a subcommand or feature that is planned but not built
├── ReplyFormatError           a model reply that cannot be parsed: the model's failure,
│                              stored with the job, never retried as infrastructure
└── InfraError                 not the model's fault: retried within budget, never scored
    ├── SandboxError           Docker: daemon, containers, exec streams
    │   ├── DockerUnavailableError   daemon down or unreachable
    │   ├── ImageError               image missing or cannot be built
    │   │   └── ImageBuildError      a build failed or timed out (keeps the build log)
    │   ├── ContainerError           create/start/remove failed, OOM-killed, died
    │   └── ShellClosedError         the episode's shell exited
    ├── VerifierError          tests ran but produced no usable reward
    ├── RunnerLostError        a remote runner (a Ray actor) or its node was lost
    └── LLMError               the model server
        ├── LLMConnectionError       connect/read failures, dropped connections
        ├── LLMTimeoutError          a deadline passed
        ├── LLMServerError           5xx / 429 / error inside a 200 stream
        ├── LLMRequestError          4xx other than 429: our request is wrong (not retried)
        │   └── ContextLengthError   the prompt does not fit the model's context
        └── NoHealthyServerError     every server is down or its breaker is open
```

``InfraError.retryable`` tells the scheduler whether another attempt may help.
``InfraError.permanent`` marks the failures that are the task's or the config's fault
(a bad image reference, a Dockerfile that fails to build, a container config Docker
refuses): never retried, not even on resume, and stored as ``failed`` with end reason
``error`` and an error text starting with :data:`PERMANENT_PREFIX`. Such a result is
no verdict on the model: pass@k, the summary and the analysis leave it out
(:func:`is_permanent_error`) and the summary names it apart.
"""

from __future__ import annotations

from typing import Self

__all__ = [
    "ConfigError",
    "ConfigMismatchError",
    "ContainerError",
    "ContextLengthError",
    "DockerUnavailableError",
    "HarnessError",
    "ImageBuildError",
    "ImageError",
    "InfraError",
    "LLMConnectionError",
    "LLMError",
    "LLMRequestError",
    "LLMServerError",
    "LLMTimeoutError",
    "NoHealthyServerError",
    "NotImplementedYetError",
    "ReplyFormatError",
    "RsrError",
    "RunnerLostError",
    "SandboxError",
    "ShellClosedError",
    "StoreCorruptError",
    "StoreError",
    "TaskError",
    "VerifierError",
]


class RsrError(Exception):
    """Base of every error this package raises on purpose."""


class ConfigError(RsrError):
    """A config file, key or value is wrong. The message names the file and key path."""


class TaskError(RsrError):
    """A task directory is malformed or missing a required file."""

    def __init__(self, message: str, *, task: str | None = None, path: str | None = None):
        self.task = task
        self.path = path
        where = ", ".join(x for x in (f"task {task!r}" if task else "", path or "") if x)
        super().__init__(f"{where}: {message}" if where else message)


class HarnessError(RsrError):
    """A harness reached a state the protocol does not allow (a bug, not a model error)."""


class StoreError(RsrError):
    """The run database could not be read or written."""


class StoreCorruptError(StoreError):
    """The database file is corrupt or belongs to something else; it was left untouched."""


class ConfigMismatchError(StoreError):
    """The run directory was started with another config; resume refused unless forced."""


class NotImplementedYetError(RsrError):
    """A planned capability that is not built yet. Never replaced by a fake result."""


class ReplyFormatError(RsrError):
    """A model reply that cannot be parsed (a planner, critic or auditor reply).

    The model's failure, never retried as infrastructure: the job that asked stores the
    reply and this message. The message says what was expected and what arrived.
    """


PERMANENT_PREFIX = "permanent: "
"""How the error text of a job ended by a permanent error starts (see the module doc)."""


def is_permanent_error(error: str | None) -> bool:
    """Whether a stored job's error text says a permanent error ended it."""
    return bool(error) and str(error).startswith(PERMANENT_PREFIX)


class InfraError(RsrError):
    """A failure of the infrastructure, not of the model: stored as ``infra_error``.

    With ``permanent`` set (the task's or the config's fault) it is stored as ``failed``
    with end reason ``error`` and an error text starting with :data:`PERMANENT_PREFIX`
    instead, never retried and never graded.
    """

    retryable: bool = True
    permanent: bool = False

    def as_permanent(self) -> Self:
        """This error marked permanent (and so not retryable); returns itself."""
        self.permanent = True
        self.retryable = False
        return self


class SandboxError(InfraError):
    """Docker failed us: the daemon, a container or an exec stream."""


class DockerUnavailableError(SandboxError):
    """The Docker daemon is down or unreachable."""


class ImageError(SandboxError):
    """An image is missing or unusable."""


class ImageBuildError(ImageError):
    """An image build failed or timed out; ``log`` keeps the build output."""

    retryable = False

    def __init__(self, message: str, *, log: str = ""):
        self.log = log
        super().__init__(message)


class ContainerError(SandboxError):
    """A container could not be created, started or removed, or it died (e.g. OOM)."""


class ShellClosedError(SandboxError):
    """The episode's shell exited; the harness may ask for a new one."""


class VerifierError(InfraError):
    """The verifier ran but produced no usable reward (missing, empty, unparseable)."""

    retryable = False


class RunnerLostError(InfraError):
    """A remote runner (a Ray actor, see :mod:`rsr_async.cluster`) or its node was lost,
    or stopped answering, with the attempt on it; the engine retries it elsewhere."""


class LLMError(InfraError):
    """The model server failed us."""


class LLMConnectionError(LLMError):
    """Could not connect, or the connection dropped before a reply."""


class LLMTimeoutError(LLMError):
    """A request deadline passed."""


class LLMServerError(LLMError):
    """The server answered 5xx or 429, or sent an error inside a 200 stream."""

    def __init__(self, message: str, *, status: int | None = None):
        self.status = status
        super().__init__(message)


class LLMRequestError(LLMError):
    """The server refused our request (4xx other than 429); retrying cannot help."""

    retryable = False

    def __init__(self, message: str, *, status: int | None = None):
        self.status = status
        super().__init__(message)


class ContextLengthError(LLMRequestError):
    """The prompt does not fit the model's context window; the harness should summarise."""


class NoHealthyServerError(LLMError):
    """Every model server is unhealthy or has its circuit breaker open."""
