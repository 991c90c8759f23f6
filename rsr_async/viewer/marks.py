"""Leak marks: where a flagged value sits in the model message that typed it.

The leak scanner reports a value with its turn and its ``position`` in that turn's action
(the keystrokes of its commands joined by newlines, see
:func:`rsr_async.rsr.audit.flag_values`). A trajectory page shows each command on its own
and the model's raw reply beside them, so :func:`mark_message` maps a position onto the
command holding it and also marks the value wherever the reply spells it.

Text is cut into :data:`Piece` s, ``(text, css_class)``, and escaped by the template, never
here: a mark is a separate piece, so no markup is ever built from trajectory text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import msgspec

from ..schema import Leak, Message

__all__ = ["LEAKED", "RULED_DERIVABLE", "FlaggedValue", "MarkedMessage", "Piece", "mark_message", "pieces"]

Piece = tuple[str, str]
"""A run of text and the CSS class of its mark ("" for plain text)."""

LEAKED = "leak"
"""Class of a value the audit ruled leaked."""
RULED_DERIVABLE = "flag"
"""Class of a value the scanner flagged and the auditor ruled derivable."""


class FlaggedValue(msgspec.Struct, frozen=True, kw_only=True):
    """One flagged value with the auditor's ruling (``LEAKED`` or ``RULED_DERIVABLE``)."""

    leak: Leak
    mark: str


class MarkedMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A message cut into pieces for display: its content and, for a model message, each
    command's keystrokes (with the command's wait)."""

    message: Message
    content: list[Piece]
    commands: list[tuple[list[Piece], float]]
    """Each command's keystrokes and its wait in seconds, rounded to milliseconds (a
    parsed 2.4 can arrive as 2.4000000000000004)."""
    marks: int
    """How many flagged values the message holds (0: nothing flagged in it)."""
    reindented: bool = False
    """The content is a JSON reply shown re-indented (its values unchanged)."""


def pieces(text: str, spans: Iterable[tuple[int, int, str]]) -> list[Piece]:
    """``text`` cut at ``spans`` (start, end, class). Overlapping spans keep the first one
    (in start order); spans outside the text are clipped."""
    out: list[Piece] = []
    cursor = 0
    for start, end, mark in sorted(spans):
        start, end = max(start, cursor), min(end, len(text))
        if start >= end:
            continue
        if start > cursor:
            out.append((text[cursor:start], ""))
        out.append((text[start:end], mark))
        cursor = end
    if cursor < len(text) or not out:
        out.append((text[cursor:], ""))
    return out


def _occurrences(text: str, value: str) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = []
    if not value:
        return found
    start = text.find(value)
    while start >= 0:
        found.append((start, start + len(value)))
        start = text.find(value, start + len(value))
    return found


def mark_message(message: Message, flagged: Sequence[FlaggedValue] = ()) -> MarkedMessage:
    """Cut ``message`` into pieces, marking the values flagged in its turn.

    Only model messages carry marks: a flagged value is one the model typed. In each
    command, the value is marked at the scanner's position when the keystrokes there spell
    it, else wherever they do; in the reply, wherever it appears (as typed, or as JSON
    escapes it, since Terminus replies are JSON). A JSON reply is shown re-indented.
    """
    mine = [f for f in flagged if f.leak.turn == message.turn] if message.origin == "model" else []
    keystrokes = [command.keystrokes for command in message.commands]
    command_spans: list[list[tuple[int, int, str]]] = [[] for _ in keystrokes]
    content_spans: list[tuple[int, int, str]] = []
    offsets, offset = [], 0
    for text in keystrokes:
        offsets.append(offset)
        offset += len(text) + 1  # the scanner joined the keystrokes with newlines
    text_shown = _readable(message)
    for item in mine:
        value = item.leak.value
        placed = False
        for i, text in enumerate(keystrokes):
            local = item.leak.position - offsets[i]
            if 0 <= local < len(text) and text[local : local + len(value)] == value:
                command_spans[i].append((local, local + len(value), item.mark))
                placed = True
        if not placed:
            for i, text in enumerate(keystrokes):
                command_spans[i].extend((s, e, item.mark) for s, e in _occurrences(text, value))
        for spelling in {value, json.dumps(value)[1:-1]}:
            content_spans.extend((s, e, item.mark) for s, e in _occurrences(text_shown, spelling))
    commands = [
        (pieces(text, spans), round(command.duration, 3))
        for text, spans, command in zip(keystrokes, command_spans, message.commands, strict=True)
    ]
    return MarkedMessage(
        message=message, content=pieces(text_shown, content_spans), commands=commands,
        marks=len(mine), reindented=text_shown is not message.content,
    )


def _readable(message: Message) -> str:
    """A model's JSON reply re-indented (one key a line, text unescaped where JSON allows);
    any other content as it is."""
    if message.origin != "model" or not message.content.lstrip().startswith("{"):
        return message.content
    try:
        reply = json.loads(message.content)
    except ValueError:
        return message.content  # not JSON: the model's own text is the thing to see
    if not isinstance(reply, dict):
        return message.content
    return json.dumps(reply, indent=2, ensure_ascii=False)
