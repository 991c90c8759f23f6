"""The SGLang-compatible simulator: real HTTP, a real radix cache, a latency model.

It stands in for SGLang servers where there is no GPU (tests, the offline demo,
benchmarks), answering with the scripted stand-in model, a test double.
"""

from __future__ import annotations

from .server import SimServer, spawn_sim_servers

__all__ = ["SimServer", "spawn_sim_servers"]
