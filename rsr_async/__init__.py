"""rsr_async: an async engine that generates terminal-agent training data by Recursive
Self-Rewrite (RSR).

The public namespace is this module; everything else is an implementation room. Heavy
parts (Docker, HTTP) are imported lazily, so ``import rsr_async`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._version import __version__
from .config import Config, load_config
from .errors import (
    ConfigError,
    ContextLengthError,
    HarnessError,
    InfraError,
    LLMError,
    RsrError,
    SandboxError,
    StoreError,
    TaskError,
    VerifierError,
)
from .schema import (
    Command,
    EpisodeResult,
    EpisodeSpec,
    JobKey,
    Message,
    Runbook,
    Task,
    Trajectory,
    Usage,
    Verdict,
)

if TYPE_CHECKING:
    from .engine import Engine, Job
    from .rsr.runtime import Pipeline, open_pipeline



def __getattr__(name: str) -> object:
    # The engine pulls in anyio and the store; import it on first use so that
    # `import rsr_async` stays light.
    if name in ("Engine", "Job"):
        from . import engine

        return getattr(engine, name)
    if name in ("Pipeline", "open_pipeline"):
        from .rsr import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'rsr_async' has no attribute {name!r}")

__all__ = [
    "Command",
    "Config",
    "ConfigError",
    "ContextLengthError",
    "EpisodeResult",
    "Engine",
    "EpisodeSpec",
    "HarnessError",
    "InfraError",
    "Job",
    "JobKey",
    "LLMError",
    "Message",
    "Pipeline",
    "RsrError",
    "Runbook",
    "SandboxError",
    "StoreError",
    "Task",
    "TaskError",
    "Trajectory",
    "Usage",
    "Verdict",
    "VerifierError",
    "__version__",
    "load_config",
    "open_pipeline",
]
