"""rsr_async: an async engine that generates terminal-agent training data by Recursive
Self-Rewrite (RSR).

The public namespace is this module; everything else is an implementation room. Heavy
parts (Docker, HTTP) are imported lazily, so ``import rsr_async`` stays fast.
"""

from __future__ import annotations

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

__version__ = "0.1.0"

__all__ = [
    "Command",
    "Config",
    "ConfigError",
    "ContextLengthError",
    "EpisodeResult",
    "EpisodeSpec",
    "HarnessError",
    "InfraError",
    "JobKey",
    "LLMError",
    "Message",
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
]
