"""Sandbox backends by name: the one table that ``sandbox.backend`` is looked up in.

Each entry names a factory, ``"module:attribute"``, called with the ``sandbox`` settings
and returning a :class:`~rsr_async.sandbox.base.SandboxBackend`. The runtime
(:func:`rsr_async.rsr.runtime.episode_runtime`), the Ray actors and ``tasks validate``
get their sandboxes only through :func:`sandbox_backend`, so nothing above ``sandbox/``
knows which backend runs.

The entries are import paths, not imported objects: a backend's client library loads
only when a run chooses it (aiodocker for Docker). Each names a module of this room
(``tests/test_layers.py`` counts such names as imports), so the table reaches no room
above ``sandbox/``.

Adding a backend (Kubernetes, a cloud sandbox): write a module with a class satisfying
:class:`~rsr_async.sandbox.base.SandboxBackend` whose :meth:`open` yields a
:class:`~rsr_async.sandbox.base.SandboxProvider` (whose sandboxes satisfy
:class:`~rsr_async.sandbox.base.Sandbox`), and add one line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, cast

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..config import SandboxConfig
    from .base import SandboxBackend

__all__ = ["BACKENDS", "sandbox_backend"]

BACKENDS: Mapping[str, str] = MappingProxyType({
    "docker": "rsr_async.sandbox.docker_backend:DockerBackend",
    "fake": "rsr_async.sandbox.fake:FakeBackend",
})
"""Backend name (``sandbox.backend``) → its factory's ``module:attribute``.

- ``docker``: containers on the Docker hosts of ``sandbox.docker_urls`` (the default);
- ``fake``: in-process fake sandboxes that grade by what the agent typed
  (:class:`rsr_async.testing.FakeSandboxPool`): a test double for the layers above the
  sandbox (tests, ``bench dryrun``); nothing it grades is a model's result.
"""


def sandbox_backend(config: SandboxConfig) -> SandboxBackend:
    """The backend ``config.backend`` names, bound to ``config``.

    An unknown name is a :class:`~rsr_async.errors.ConfigError` naming the setting and
    the known names (callers look the backend up before anything starts)."""
    target = BACKENDS.get(config.backend)
    if target is None:
        raise ConfigError(
            f"sandbox.backend: unknown sandbox backend {config.backend!r}; "
            f"known: {', '.join(sorted(BACKENDS))}"
        )
    module, _, attribute = target.partition(":")
    factory = cast("Callable[[SandboxConfig], SandboxBackend]",
                   getattr(importlib.import_module(module), attribute))
    return factory(config)
