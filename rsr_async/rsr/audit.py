"""The leak audit of a verified execution: the native scanner flags, a model rules.

:func:`flag_values` runs the native leak scanner over the episode: a literal value in a
model action is flagged when neither the public instruction nor an earlier ``task`` or
``env`` message contains it. ``private`` (the runbook) and ``harness`` text never counts
as seen: a value the model copied from its runbook is exactly the leak the audit exists
to find. A path the sandbox holds is no leak either: :func:`sandbox_knowledge` is the base
image plus what the task image holds beyond it (:class:`~rsr_async.schema.ImageFiles`,
listed by the sandbox pool and carried from the execution's result in its audit spec).

The auditor (:func:`auditor_messages`) sees the public instruction, the public trajectory
(no private or harness text) and the flagged values, and rules each one ``derivable`` or
``leaked`` in one JSON object (:func:`parse_audit`). A value it does not rule on counts
as leaked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._native import LeakScanner, SandboxKnowledge, compress_trajectory
from ..errors import ReplyFormatError
from ..llm.base import ChatMessage
from ..schema import ImageFiles, Leak, Trajectory
from .planner import render_transcript
from .prompts import json_objects, render_prompt, strip_reasoning

__all__ = ["auditor_messages", "flag_values", "parse_audit", "sandbox_knowledge"]


def sandbox_knowledge(image_files: ImageFiles | None) -> SandboxKnowledge:
    """What exists in the task's sandbox: the base image's names, plus the paths and
    commands of the task image when its listing is known (None: the base image only)."""
    standard = SandboxKnowledge.standard()
    if image_files is None or not (image_files.paths or image_files.commands):
        return standard
    return standard.with_image(paths=image_files.paths, commands=image_files.commands)


def flag_values(
    trajectory: Trajectory, *, instruction: str, sandbox: SandboxKnowledge | None = None,
    scanner_class: Callable[..., Any] = LeakScanner,
) -> list[Leak]:
    """Values in the model's actions that nothing public had shown it before that turn.

    Each value is reported once, at its first use (``Leak.turn`` is the model message's
    turn, ``position`` its index in the turn's keystrokes joined by newlines), with the
    rule that flagged it and why (``Leak.rule``, ``Leak.why``). ``sandbox``: names that
    exist in the task's sandbox (default: the base image's, ``SandboxKnowledge.standard``).
    ``scanner_class``: the compiled scanner, or its pure twin (the leak bench runs both).
    """
    scanner = scanner_class(instruction, sandbox=sandbox)
    flagged: list[Leak] = []
    for message in trajectory.messages:
        if message.origin in ("task", "env"):
            scanner.observe(message.content)
        elif message.origin == "model" and message.commands:
            action = "\n".join(command.keystrokes for command in message.commands)
            flagged.extend(scanner.scan(action, message.turn))
    return flagged


def _flagged_list(leaks: Sequence[Leak]) -> str:
    # The scanner's reason goes on its own line, so the auditor can weigh it and a reply
    # parser reading "N. 'value' (kind, turn T)" lines still finds every value.
    return "\n".join(
        f"{i}. {leak.value!r} ({leak.kind}, turn {leak.turn})"
        + (f"\n   flagged by {leak.why}" if leak.why else "")
        for i, leak in enumerate(leaks, 1)
    )


def auditor_messages(
    *,
    instruction: str,
    trajectory: Trajectory,
    leaks: Sequence[Leak],
    observation_bytes: int = 8192,
) -> list[ChatMessage]:
    """The auditor call: public instruction, public trajectory, the flagged values.

    The trajectory goes through ``compress_trajectory`` (private and harness messages
    dropped; observations over ``observation_bytes`` cut in the middle, generous by
    default because the auditor must see what the model saw) and shows commands exactly
    as typed.
    """
    public, _report = compress_trajectory(trajectory, max_observation_bytes=observation_bytes)
    transcript = render_transcript(public.messages, instruction=instruction)
    return [
        {"role": "system", "content": render_prompt("auditor")},
        {
            "role": "user",
            "content": render_prompt(
                "auditor_task",
                instruction=instruction.strip(),
                trajectory=transcript,
                flagged=_flagged_list(leaks),
            ),
        },
    ]


_LEAKED = {"leaked", "leak", "leaks", "yes", "true", "not derivable", "underivable", "hidden"}
_DERIVABLE = {"derivable", "derived", "derivable.", "no", "false", "ok", "clean", "not leaked",
              "public", "general knowledge", "seen", "observed", "chosen"}
_LIST_KEYS = ("rulings", "ruling", "values", "flagged", "results", "verdicts", "items", "leaks")
_VERDICT_KEYS = ("verdict", "ruling", "decision", "status", "classification", "label")


def _is_leak(item: dict[str, Any]) -> bool | None:
    for key in _VERDICT_KEYS:
        value = item.get(key)
        if isinstance(value, str):
            word = value.strip().strip(".!\"'").lower()
            if word in _LEAKED or word.startswith("leak"):
                return True
            if word in _DERIVABLE or word.startswith("deriv"):
                return False
    for key, leaked_when in (("leaked", True), ("leak", True), ("is_leak", True),
                             ("derivable", False), ("is_derivable", False)):
        value = item.get(key)
        if isinstance(value, bool):
            return value == leaked_when
    return None


def _norm(value: str) -> str:
    return value.strip().strip("`'\"").strip()


def _match(item: dict[str, Any], leaks: Sequence[Leak], position: int) -> int | None:
    value = next((item[k] for k in ("value", "literal", "flagged", "token", "string") if k in item), None)
    if isinstance(value, str):
        wanted = _norm(value)
        for i, leak in enumerate(leaks):
            if leak.value == wanted:
                return i
        for i, leak in enumerate(leaks):
            if leak.value.lower() == wanted.lower():
                return i
        return None
    number = next((item[k] for k in ("index", "id", "number", "n") if k in item), None)
    if isinstance(number, int) and not isinstance(number, bool) and 1 <= number <= len(leaks):
        return number - 1
    if value is None and 0 <= position < len(leaks):
        return position  # no value and no index: rulings in the order given
    return None


def _rulings(obj: dict[str, Any]) -> list[tuple[dict[str, Any], int]]:
    fields = {str(k).strip().lower(): v for k, v in obj.items()}
    for key in _LIST_KEYS:
        items = fields.get(key)
        if isinstance(items, list):
            return [
                ({str(k).strip().lower(): v for k, v in item.items()}, i)
                for i, item in enumerate(items)
                if isinstance(item, dict)
            ]
        if isinstance(items, dict):  # {"value": "leaked", …} keyed by value
            return [
                ({"value": k, "verdict": v} if isinstance(v, str)
                 else {"value": k, **{str(a).lower(): b for a, b in v.items()}}
                 if isinstance(v, dict) else {"value": k}, -1)
                for k, v in items.items()
            ]
    if any(key in fields for key in _VERDICT_KEYS + ("leaked", "derivable")):
        return [(fields, 0)]  # a single ruling as the whole object
    return []


def parse_audit(reply: str, leaks: Sequence[Leak]) -> list[tuple[Leak, bool, str]]:
    """``(leak, leaked?, reason)`` for every flagged value, in the order of ``leaks``.

    Reads ``{"rulings": [{"value", "verdict", "reason"}]}`` and its usual variants (other
    list keys, an index instead of the value, booleans ``leaked``/``derivable``, a map
    value -> verdict, keys in any case). A value the reply does not rule on counts as
    leaked. Raises :class:`ReplyFormatError` when the reply rules on none of the values.
    """
    decided: dict[int, tuple[bool, str]] = {}
    for obj in json_objects(reply):
        for item, position in _rulings(obj):
            index = _match(item, leaks, position)
            leaked = _is_leak(item)
            if index is None or leaked is None or index in decided:
                continue
            reason = next((str(item[k]).strip() for k in ("reason", "why", "explanation",
                                                            "justification") if item.get(k)), "")
            decided[index] = (leaked, reason)
        if decided:
            break
    if not decided and leaks:
        start = strip_reasoning(reply).strip()[:80].replace("\n", " ")
        raise ReplyFormatError(
            'auditor reply rules on none of the flagged values: expected {"rulings": '
            '[{"value": "...", "verdict": "leaked" | "derivable", "reason": "..."}]}; '
            + (f"it starts {start!r}" if start else "it is empty")
        )
    out: list[tuple[Leak, bool, str]] = []
    for i, leak in enumerate(leaks):
        if i in decided:
            leaked, reason = decided[i]
            out.append((leak, leaked, reason))
        else:
            out.append((leak, True, "the auditor did not rule on it: counted as leaked"))
    return out

