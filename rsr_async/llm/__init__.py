"""The model room: SGLang client, cache-affine router, simulator, scripted stand-in model.

Harnesses code against :class:`~rsr_async.llm.base.ChatModel`; :class:`ModelRouter`
(real or simulated SGLang servers over HTTP) and :class:`ScriptedModel` (in-process
test double) both satisfy it. Names load lazily, so importing ``rsr_async.llm.base``
does not pull in aiohttp, httpx or the simulator.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import ChatMessage, ChatModel, Completion

if TYPE_CHECKING:
    from .client import SGLangClient
    from .router import ModelRouter, RouterStats, ServerStats
    from .scripted import ROLE_AUDITOR, ROLE_CRITIC, ROLE_PLANNER, ScriptedModel
    from .sim import SimServer, spawn_sim_servers

__all__ = [
    "ROLE_AUDITOR",
    "ROLE_CRITIC",
    "ROLE_PLANNER",
    "ChatMessage",
    "ChatModel",
    "Completion",
    "ModelRouter",
    "RouterStats",
    "SGLangClient",
    "ScriptedModel",
    "ServerStats",
    "SimServer",
    "spawn_sim_servers",
]

_HOME = {
    "SGLangClient": ".client",
    "ModelRouter": ".router",
    "RouterStats": ".router",
    "ServerStats": ".router",
    "ROLE_AUDITOR": ".scripted",
    "ROLE_CRITIC": ".scripted",
    "ROLE_PLANNER": ".scripted",
    "ScriptedModel": ".scripted",
    "SimServer": ".sim",
    "spawn_sim_servers": ".sim",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home, __name__), name)
