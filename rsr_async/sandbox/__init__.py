"""Docker sandboxes: fresh, isolated containers with a persistent shell, over aiodocker.

```
sandbox_backend(config)       the backend named by sandbox.backend (backends.BACKENDS)
├── prepare() · check_tasks() · sweep()
└── open(run_id=...)          a SandboxProvider: for Docker, the SandboxPool below

SandboxPool (one per engine run, all Docker hosts)
├── ensure_image(task)        task image, built once per content hash
├── sandbox(task, key=...)    fresh container, removed on exit (shielded)
│   └── DockerSandbox         run(), upload(), download(), shell()
│       └── DockerShell       Harbor's tmux pane over one exec stream: send/wait/observe
└── statistics()              SandboxStats
bootstrap_base_image()        offline base image (debootstrap + docker import)
sweep()                       leftover labelled containers whose owner is gone
```

The contract the rest of the engine codes against is :mod:`rsr_async.sandbox.base`, and
the one table of backends is :mod:`rsr_async.sandbox.backends`; nothing above this
package imports the Docker modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .backends import BACKENDS, sandbox_backend
from .base import ExecResult, Sandbox, SandboxBackend, SandboxProvider, SandboxStats, ShellSession
from .terminal import clean_output, parse_keystrokes, truncate_output

if TYPE_CHECKING:
    from .container import ContainerState, DockerSandbox
    from .images import BASE_PACKAGES, bootstrap_base_image, task_image_tag
    from .ownership import LeftoverContainer, owner_gone, sweep
    from .pool import SandboxPool
    from .shell import DockerShell

__all__ = [
    "BACKENDS",
    "BASE_PACKAGES",
    "ContainerState",
    "DockerSandbox",
    "DockerShell",
    "ExecResult",
    "LeftoverContainer",
    "Sandbox",
    "SandboxBackend",
    "SandboxPool",
    "SandboxProvider",
    "SandboxStats",
    "ShellSession",
    "bootstrap_base_image",
    "clean_output",
    "owner_gone",
    "parse_keystrokes",
    "sandbox_backend",
    "sweep",
    "task_image_tag",
    "truncate_output",
]

# The Docker side (aiodocker, aiohttp) loads on first use, so the pure terminal helpers
# and the contract are cheap to import (the harness uses them).
_HOME = {
    "ContainerState": ".container",
    "DockerSandbox": ".container",
    "BASE_PACKAGES": ".images",
    "bootstrap_base_image": ".images",
    "task_image_tag": ".images",
    "LeftoverContainer": ".ownership",
    "owner_gone": ".ownership",
    "sweep": ".ownership",
    "SandboxPool": ".pool",
    "DockerShell": ".shell",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home, __name__), name)


def _implements_the_contract(sandbox: DockerSandbox, shell: DockerShell) -> tuple[Sandbox, ShellSession]:
    """Never called: mypy checks here that the Docker classes satisfy the base protocols."""
    return sandbox, shell
