"""Test doubles for harness tests: an in-process shell and a model that replays replies.

- :class:`FakeShell` and :class:`FakeShellSandbox` live with the fake sandbox backend
  (:mod:`rsr_async.sandbox.fake`) and are re-exported here for harness tests.
- :class:`ReplayModel` satisfies :class:`~rsr_async.llm.base.ChatModel` by replaying a
  list of replies (text, :class:`~rsr_async.llm.base.Completion`, or an exception to
  raise) and records every call.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec
from anyio.lowlevel import checkpoint

from ..errors import HarnessError
from ..llm.base import ChatMessage, Completion
from ..sandbox.fake import FakeShell, FakeShellSandbox
from ..schema import Usage

__all__ = ["FakeShell", "FakeShellSandbox", "ModelCall", "ReplayModel"]


class ModelCall(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded call to a :class:`ReplayModel`."""

    messages: tuple[ChatMessage, ...]
    affinity: str
    max_tokens: int | None
    temperature: float | None
    seed: int | None


Scripted = str | Completion | BaseException


class ReplayModel:
    """A :class:`~rsr_async.llm.base.ChatModel` that replays ``replies`` in order.

    A text reply gets usage estimated at 4 characters a token; give a
    :class:`~rsr_async.llm.base.Completion` to control usage or ``finish_reason``, or an
    exception instance to raise it from that call.
    """

    def __init__(
        self,
        replies: Iterable[Scripted],
        *,
        model_name: str = "replay",
        context_length: int = 32768,
    ) -> None:
        self._replies = list(replies)
        self._model_name = model_name
        self._context_length = context_length
        self.calls: list[ModelCall] = []

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def context_length(self) -> int:
        return self._context_length

    @property
    def remaining(self) -> int:
        """Replies not used yet."""
        return len(self._replies) - len(self.calls)

    async def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        affinity: str,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> Completion:
        """The next scripted reply (raising it if it is an exception)."""
        await checkpoint()
        index = len(self.calls)
        self.calls.append(
            ModelCall(
                messages=tuple(dict(m) for m in messages),  # type: ignore[misc]
                affinity=affinity,
                max_tokens=max_tokens,
                temperature=temperature,
                seed=seed,
            )
        )
        if index >= len(self._replies):
            raise HarnessError(f"ReplayModel: no scripted reply left for call {index + 1}")
        reply = self._replies[index]
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, Completion):
            return reply
        prompt = sum(len(m["content"]) for m in messages) // 4
        usage = Usage(prompt_tokens=prompt, completion_tokens=len(reply) // 4, requests=1)
        return Completion(text=reply, finish_reason="stop", usage=usage)
