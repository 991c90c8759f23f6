"""Client-side prompt rendering for SGLang's native ``/generate``.

The rendering is *append-only and byte-stable*: rendering ``messages[:n]`` is a byte
prefix of rendering ``messages[:n+1]`` (and of the prompt with the generation prompt
added), so every turn of an episode re-sends the previous turn's tokens unchanged and
the server's radix cache serves them. The default is ChatML; a Jinja template can come
from a model's ``tokenizer_config.json`` (its ``chat_template``), a template file, or
the template text itself. :func:`check_append_only` tests a template for the property.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .base import ChatMessage

__all__ = [
    "CHATML_END",
    "ChatTemplate",
    "check_append_only",
    "parse_chatml",
    "render_chatml",
]

CHATML_END = "<|im_end|>"
_START = "<|im_start|>"
GENERATION_PROMPT = f"{_START}assistant\n"


def render_chatml(messages: Sequence[ChatMessage], *, add_generation_prompt: bool = True) -> str:
    """ChatML: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message."""
    parts = [f"{_START}{m['role']}\n{m['content']}{CHATML_END}\n" for m in messages]
    if add_generation_prompt:
        parts.append(GENERATION_PROMPT)
    return "".join(parts)


_CHATML_MESSAGE = re.compile(
    r"<\|im_start\|>(system|user|assistant)\n(.*?)(?:<\|im_end\|>\n?|\Z)", re.DOTALL
)


def parse_chatml(text: str) -> list[ChatMessage]:
    """Messages back from a ChatML prompt (the simulator's view of ``/generate`` text).

    A trailing empty assistant turn (the generation prompt) is dropped.
    """
    messages: list[ChatMessage] = []
    for match in _CHATML_MESSAGE.finditer(text):
        role, content = match.group(1), match.group(2)
        messages.append({"role": role, "content": content})  # type: ignore[typeddict-item]
    if messages and messages[-1]["role"] == "assistant" and text.endswith(GENERATION_PROMPT):
        messages.pop()
    return messages


class ChatTemplate:
    """Renders chat messages to prompt text; ChatML unless given a Jinja template.

    ``source`` is empty (ChatML), a path to a ``tokenizer_config.json`` or a template
    file, or the template text itself.
    """

    def __init__(self, source: str = "") -> None:
        self.source = source
        self.stop: tuple[str, ...] = (CHATML_END,)
        self._template: Any = None
        self._vars: dict[str, Any] = {}
        if not source:
            return
        text = source
        path = Path(source)
        if "\n" not in source and "{" not in source:
            if not path.is_file():
                raise ConfigError(
                    f"llm.chat_template: {source!r} is neither a file nor a Jinja template"
                )
            text = path.read_text(encoding="utf-8")
            if path.suffix == ".json":
                text = self._from_tokenizer_config(path, text)
        import jinja2.sandbox

        env = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True
        )

        def raise_exception(message: str) -> None:
            raise ConfigError(f"llm.chat_template: the template refused the messages: {message}")

        env.globals["raise_exception"] = raise_exception
        try:
            self._template = env.from_string(text)
        except jinja2.TemplateError as exc:
            raise ConfigError(f"llm.chat_template: invalid Jinja template: {exc}") from exc
        eos = self._vars.get("eos_token")
        self.stop = (eos,) if isinstance(eos, str) and eos else ()

    def _from_tokenizer_config(self, path: Path, text: str) -> str:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not valid JSON: {exc}") from exc
        template = data.get("chat_template")
        if isinstance(template, list):  # named templates: take "default"
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        if not isinstance(template, str):
            raise ConfigError(f"{path}: no string chat_template field")
        for key in ("bos_token", "eos_token"):
            value = data.get(key)
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str):
                self._vars[key] = value
        return template

    def render(self, messages: Sequence[ChatMessage], *, add_generation_prompt: bool = True) -> str:
        """The prompt text for ``messages``."""
        if self._template is None:
            return render_chatml(messages, add_generation_prompt=add_generation_prompt)
        text: str = self._template.render(
            messages=list(messages), add_generation_prompt=add_generation_prompt, **self._vars
        )
        return text


def check_append_only(template: ChatTemplate, messages: Sequence[ChatMessage]) -> None:
    """Raise :class:`ConfigError` unless each prefix of ``messages`` renders to a prefix.

    Templates that rewrite earlier turns (e.g. drop past reasoning, or put a date in the
    system prompt) defeat the prefix cache; this catches them before a run.
    """
    previous = ""
    previous_prompt = ""
    for n in range(1, len(messages) + 1):
        plain = template.render(messages[:n], add_generation_prompt=False)
        if not plain.startswith(previous):
            raise ConfigError(
                f"llm.chat_template: rendering is not append-only at message {n}: the "
                "text of earlier messages changed, so the server's prefix cache would miss"
            )
        if messages[n - 1]["role"] == "assistant" and not plain.startswith(previous_prompt):
            raise ConfigError(
                f"llm.chat_template: the assistant message {n} is not rendered after the "
                "generation prompt that produced it, so the prefix cache would miss"
            )
        previous_prompt = template.render(messages[:n], add_generation_prompt=True)
        if not previous_prompt.startswith(plain):
            raise ConfigError(
                "llm.chat_template: the generation prompt is not appended to the messages"
            )
        previous = plain
