"""The pipeline's prompt templates, and the two reading helpers every role's parser shares.

Templates are the ``*.txt`` files beside this module (shipped in the wheel), one per
message a role sends. ``{{name}}`` marks a field; it is filled in one pass, so text put in
a field (a trajectory, a runbook) is never read as a template, and JSON examples in a
template need no escaping. Each template states the exact output format its parser expects.

Models wrap their answers in reasoning, prose and code fences; :func:`strip_reasoning`
and :func:`json_objects` take that away once, so each role parser only reads fields.
"""

from __future__ import annotations

import ast
import json
import re
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["json_objects", "render_prompt", "strip_reasoning", "template"]

_FIELD = re.compile(r"\{\{([a-z_]+)\}\}")


@cache
def template(name: str) -> str:
    """The text of ``prompts/<name>.txt`` (read once per process)."""
    return (resources.files(__package__) / f"{name}.txt").read_text(encoding="utf-8")


def render_prompt(name: str, **fields: str) -> str:
    """``prompts/<name>.txt`` with each ``{{field}}`` replaced; a missing field is a bug."""
    text = template(name)

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in fields:
            raise KeyError(f"prompt template {name!r} needs the field {key!r}")
        return fields[key]

    return _FIELD.sub(fill, text)


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_OPEN_THINK = re.compile(r"^\s*<think>.*", re.DOTALL | re.IGNORECASE)


def strip_reasoning(reply: str) -> str:
    """The reply without ``<think>…</think>`` blocks (reasoning models emit them first).

    A ``<think>`` that never closes swallowed the whole reply: nothing is left.
    """
    text = _THINK.sub("", reply)
    if "</think>" in text.lower():  # a close without an open: the reasoning came first
        text = text[text.lower().rindex("</think>") + len("</think>") :]
    return _OPEN_THINK.sub("", text)


_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


def _balanced_end(text: str, start: int) -> int:
    """Index just past the ``}`` closing the ``{`` at ``start``, or -1 (strings respected)."""
    depth = 0
    quote = ""
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            # A single quote only opens a string where a Python-style dict would have one.
            if ch == '"' or text[i - 1] in "{[,: \n\t":
                quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def _load(candidate: str) -> Any:
    for text in (candidate, _TRAILING_COMMA.sub(r"\1", candidate)):
        try:
            return json.loads(text)
        except ValueError:
            pass
    # Python-flavoured near-JSON ('single quotes', True/None): literal_eval reads it safely.
    pythonic = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", candidate))
    pythonic = _TRAILING_COMMA.sub(r"\1", re.sub(r"\bnull\b", "None", pythonic))
    try:
        return ast.literal_eval(pythonic)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def json_objects(reply: str) -> list[dict[str, Any]]:
    """Every top-level JSON object in ``reply``, in order, tolerating the usual mess.

    Reasoning blocks, prose and code fences around the object are ignored; trailing
    commas and Python-style literals (single quotes, True/False/None) are repaired.
    Objects nested in a found object are not listed separately.
    """
    text = strip_reasoning(reply)
    found: list[dict[str, Any]] = []
    i = text.find("{")
    while i != -1:
        end = _balanced_end(text, i)
        if end == -1:
            # Unclosed (the reply was cut): try closing it, then give up on this brace.
            value = _load(text[i:] + "}" * max(1, text[i:].count("{") - text[i:].count("}")))
            if isinstance(value, dict):
                found.append(value)
            break
        value = _load(text[i:end])
        if isinstance(value, dict):
            found.append(value)
            i = text.find("{", end)
        else:
            i = text.find("{", i + 1)
    return found
