"""The contract between harnesses and model clients.

A harness only needs :class:`ChatModel`: send chat messages, get a :class:`Completion`.
The SGLang client, the router and the in-process scripted stand-in model all satisfy it,
so a harness never knows which one it talks to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, TypedDict

import msgspec

from ..schema import Usage

__all__ = ["SCRIPTED_MARK", "ChatMessage", "ChatModel", "Completion"]

SCRIPTED_MARK = " [scripted stand-in]"
"""Appended to a run's recorded model identity when the scripted stand-in (a test
double) answered, so exports and figures can refuse or label its trajectories."""


class ChatMessage(TypedDict):
    """One chat message as sent to a model (OpenAI shape)."""

    role: Literal["system", "user", "assistant"]
    content: str


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    """A model's reply to one call."""

    text: str
    finish_reason: Literal["stop", "length", "abort"]
    """``length``: cut by the output-token limit (the harness must say so to the model)."""
    usage: Usage
    server: str = ""
    """Which server answered (for routing statistics)."""


class ChatModel(Protocol):
    """Anything a harness can talk to.

    ``affinity`` is the routing key: calls sharing it go to the same server, so the
    server's prefix cache holds their common prefix (every turn of an episode; every
    execution of one runbook). Raises :class:`~rsr_async.errors.ContextLengthError` when
    the prompt does not fit, other :class:`~rsr_async.errors.LLMError` on failure.
    """

    @property
    def model_name(self) -> str: ...

    @property
    def context_length(self) -> int:
        """Context window in tokens (from the server, or the config's fallback)."""
        ...

    async def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        affinity: str,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> Completion: ...
