"""The model room: SGLang client, cache-affine router, simulator, scripted stand-in model.

Harnesses code against :class:`~rsr_async.llm.base.ChatModel`; :class:`ModelRouter`
(real or simulated SGLang servers over HTTP) and :class:`ScriptedModel` (in-process
test double) both satisfy it.
"""

from __future__ import annotations

from .base import ChatMessage, ChatModel, Completion
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
