"""Test doubles that ship with the package, for tests, examples and benchmarks.

They stand in for the *other* layers of whatever is under test, never for it:

- :class:`FakeShell` / :class:`FakeShellSandbox`: an in-process shell and sandbox (a tiny
  interpreter on a virtual clock) for harness tests;
- :class:`FakeSandboxPool`: a sandbox pool of such sandboxes that also answer the hidden
  verifier (full marks when the agent typed the task's reference solution): the ``fake``
  sandbox backend (``sandbox.backend = "fake"``), to run the whole engine without Docker
  (``bench dryrun``);
- :class:`ReplayModel`: a ChatModel replaying canned replies (and recording every call);
- :class:`ScriptedModel`: the scripted stand-in model that types a task's reference
  solution with a seeded probability. It is a **test double**: its pass rates are never
  a model's results;
- :class:`FakeRunner`, :func:`make_jobs`, :class:`SimulatedEpisode`: jobs and runners with
  configurable latency, failures and infrastructure errors, for engine tests and the
  engine benchmark.
"""

from __future__ import annotations

from .engine.fakes import FakeRunner, SimulatedEpisode, make_jobs
from .harness.fakes import FakeShell, FakeShellSandbox, ReplayModel
from .llm.scripted import ScriptedModel
from .sandbox.fake import FakeSandboxPool

__all__ = [
    "FakeRunner",
    "FakeSandboxPool",
    "FakeShell",
    "FakeShellSandbox",
    "ReplayModel",
    "ScriptedModel",
    "SimulatedEpisode",
    "make_jobs",
]
