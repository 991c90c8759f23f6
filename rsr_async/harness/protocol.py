"""The Terminus protocol pieces every harness shares (Terminus 2, and later StateM, RSRT).

- :func:`parse_reply` reads a model reply in Terminus 2's JSON schema, with Terminus's
  warnings (extra text, field order, unknown command fields, missing duration) and its
  two auto-corrections (missing closing braces; JSON inside mixed text): a port of
  Harbor 0.25.0's parser, checked on a recorded corpus (``tests/harness/golden/``).
- :func:`render` fills a protocol text from ``templates/``; :func:`first_prompt`,
  :func:`confirm_message`, :func:`parse_error_message`, :func:`with_warnings` and
  :func:`output_limit_message` give the texts byte for byte as Harbor's Terminus 2
  does (checked against recorded texts), so trajectories stay in distribution.
- :func:`truncate_output` and :func:`observe` build observations the way Terminus 2
  does: ``New Terminal Output:`` or ``Current Terminal Screen:``, cut to 10,000 bytes
  keeping the head and the tail.

Template files end with a newline that is not part of the text (so ``cat`` shows
them cleanly); fields are ``str.format`` fields and literal braces are doubled, as in
Terminus's own template.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import HarnessError
from ..sandbox.terminal import truncate_output
from ..schema import Command

if TYPE_CHECKING:
    from ..sandbox.base import ShellSession

__all__ = [
    "Reply",
    "confirm_message",
    "feedback",
    "first_prompt",
    "observe",
    "output_limit_message",
    "parse_error_message",
    "parse_reply",
    "refused",
    "render",
    "truncate_output",
    "with_warnings",
]

REQUIRED_FIELDS = ("analysis", "plan", "commands")
KNOWN_COMMAND_FIELDS = frozenset(("keystrokes", "duration"))


class Reply(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed model reply. ``error`` non-empty means nothing may run."""

    analysis: str = ""
    plan: str = ""
    commands: tuple[Command, ...] = ()
    task_complete: bool = False
    error: str = ""
    """Why the reply could not be used; the model is asked for a proper reply."""
    warnings: tuple[str, ...] = ()
    """Problems tolerated (and auto-corrections made); shown to the model next turn."""

    @property
    def warning_text(self) -> str:
        """Warnings as Terminus lists them: ``- first\\n- second`` (empty when none)."""
        return "- " + "\n- ".join(self.warnings) if self.warnings else ""


# ---------------------------------------------------------------- templates


@cache
def _template(name: str) -> str:
    try:
        text = resources.files(__package__).joinpath("templates", f"{name}.txt").read_text("utf-8")
    except FileNotFoundError as exc:
        raise HarnessError(
            f"protocol template {name!r} is missing: expected rsr_async/harness/templates/{name}.txt"
        ) from exc
    return text.removesuffix("\n")


def render(name: str, **fields: object) -> str:
    """Fill the protocol text ``templates/<name>.txt`` with ``fields``."""
    try:
        return _template(name).format(**fields)
    except (KeyError, IndexError) as exc:
        raise HarnessError(f"protocol template {name!r} needs field {exc}") from exc


# ---------------------------------------------------------------- parsing
#
# A line-by-line port of Harbor 0.25.0's ``TerminusJSONPlainParser``: every branch, and
# every quirk a model can notice (a ``}`` before the reply, a boolean duration, an integer
# ``task_complete``), gives the same commands, error and warnings. The golden corpus in
# ``tests/harness/golden/`` is recorded from Harbor's own parser.

_FIXABLE_BY_CLOSING = ("Invalid JSON", "Expecting", "Unterminated", "No valid JSON found")
"""Errors after which Harbor tries appending the missing closing braces."""


def parse_reply(text: str, *, default_duration: float = 1.0) -> Reply:
    """Parse a Terminus 2 JSON reply, auto-correcting near-JSON with a warning.

    The first balanced ``{...}`` object is the reply. When it cannot be used, two fixes
    are tried in Terminus's order: append missing closing braces (only after a JSON
    syntax error or no JSON at all), then take the first valid JSON object out of mixed
    text. A fix that yields a usable reply adds an ``AUTO-CORRECTED`` warning in front
    of the others; when none does, the first attempt's error stands.
    """
    result = _try_parse(text, default_duration)
    if not result.error:
        return result
    fixes: tuple[tuple[str, str | None], ...] = (
        ("Fixed incomplete JSON by adding missing closing brace", _close_braces(text, result.error)),
        ("Extracted JSON from mixed content", _first_json_object(text)),
    )
    for fix_name, fixed in fixes:
        if fixed is None:
            continue
        corrected = _try_parse(fixed, default_duration)
        if not corrected.error:
            note = f"AUTO-CORRECTED: {fix_name} - please fix this in future responses"
            return msgspec.structs.replace(corrected, warnings=(note, *corrected.warnings))
    return result


def _try_parse(text: str, default_duration: float) -> Reply:
    warnings: list[str] = []
    content = _extract_object(text, warnings)
    if not content:
        return Reply(error="No valid JSON found in response", warnings=tuple(warnings))
    try:
        data: Any = _loads(content)
    except (json.JSONDecodeError, _TooDeepError) as exc:
        # The model needs to see what we read to fix its escaping.
        error = f"Invalid JSON: {exc}"
        if len(content) < 200:
            error += f" | Content: {content!r}"
        else:
            error += f" | Content preview: {content[:100]!r}..."
        return Reply(error=error, warnings=tuple(warnings))
    error = _check_structure(data, content, warnings)
    if error:
        return Reply(error=error, warnings=tuple(warnings))
    task_complete = data.get("task_complete", False)
    if isinstance(task_complete, str):
        task_complete = task_complete.lower() in ("true", "1", "yes")
    # Terminus tests the value for truth: an integer 1 (or a non-empty list) claims completion.
    complete = bool(task_complete)
    analysis, plan = data.get("analysis", ""), data.get("plan", "")
    commands, error = _parse_commands(data["commands"], warnings, default_duration)
    if error:
        if not complete:
            return Reply(error=error, warnings=tuple(warnings))
        # Terminus lets a finished model through with a broken command list.
        warnings.append(error)
        commands = []
    return Reply(
        analysis=analysis if isinstance(analysis, str) else json.dumps(analysis),
        plan=plan if isinstance(plan, str) else json.dumps(plan),
        commands=tuple(commands),
        task_complete=complete,
        warnings=tuple(warnings),
    )


class _TooDeepError(ValueError):
    """JSON nested deeper than Python's decoder can recurse."""


def _loads(content: str) -> Any:
    """``json.loads``, with nesting too deep for the decoder as a JSON error.

    Harbor's parser lets the decoder's RecursionError escape and end the trial; a reply
    nested 100,000 deep is the model's malformed reply, not a crash of the harness, so it
    is refused and reported to the model like any other invalid JSON.
    """
    try:
        return json.loads(content)
    except RecursionError:
        raise _TooDeepError("nested too deeply to parse (maximum nesting depth exceeded)") from None


def _extract_object(text: str, warnings: list[str]) -> str:
    """The first balanced top-level ``{...}``; warns about text around it.

    As in Terminus, a backslash escapes the next character even outside strings, and a
    ``}`` before any ``{`` drives the depth below zero, so no object is found after it.
    """
    start = -1
    depth = 0
    in_string = False
    escaped = False
    for i, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            in_string = not in_string
        elif in_string:
            continue
        elif char == "{":
            if depth == 0:
                start = i
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0 and start != -1:
                if text[:start].strip():
                    warnings.append("Extra text detected before JSON object")
                if text[i + 1 :].strip():
                    warnings.append("Extra text detected after JSON object")
                return text[start : i + 1]
    warnings.append("No valid JSON object found")
    return ""


def _check_structure(data: Any, content: str, warnings: list[str]) -> str:
    """Terminus's structure check: the error, or ``""`` (warnings go to ``warnings``)."""
    if not isinstance(data, dict):
        return "Response must be a JSON object"
    missing = [field for field in REQUIRED_FIELDS if field not in data]
    if missing:
        return f"Missing required fields: {', '.join(missing)}"
    warnings.extend(
        f"Field '{field}' should be a string"
        for field in ("analysis", "plan")
        if not isinstance(data[field], str)
    )
    if not isinstance(data["commands"], list):
        return "Field 'commands' must be an array"
    _check_field_order(content, warnings)
    task_complete = data.get("task_complete")
    if task_complete is not None and not isinstance(task_complete, bool | str):
        warnings.append("Field 'task_complete' should be a boolean or string")
    return ""


def _check_field_order(content: str, warnings: list[str]) -> None:
    positions: dict[str, int] = {}
    for field in REQUIRED_FIELDS:
        match = re.search(rf'"({field})"\s*:', content)
        if match:
            positions[field] = match.start()
    if len(positions) < 2:
        return
    expected = [field for field in REQUIRED_FIELDS if field in positions]
    actual = sorted(expected, key=positions.__getitem__)
    if actual != expected:
        warnings.append(
            f"Fields appear in wrong order. Found: {' → '.join(actual)}, "
            f"expected: {' → '.join(expected)}"
        )


def _parse_commands(
    items: list[Any], warnings: list[str], default_duration: float
) -> tuple[list[Command], str]:
    commands: list[Command] = []
    for i, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            return [], f"Command {i} must be an object"
        if "keystrokes" not in item:
            return [], f"Command {i} missing required 'keystrokes' field"
        keystrokes = item["keystrokes"]
        if not isinstance(keystrokes, str):
            return [], f"Command {i} 'keystrokes' must be a string"
        if "duration" not in item:
            warnings.append(f"Command {i}: Missing duration field, using default {default_duration}")
            duration = default_duration
        elif isinstance(item["duration"], int | float):  # a bool is an int here, as in Terminus
            duration = float(item["duration"])
        else:
            warnings.append(f"Command {i}: Invalid duration value, using default {default_duration}")
            duration = default_duration
        unknown = sorted(set(item) - KNOWN_COMMAND_FIELDS)
        if unknown:
            # Terminus joins a set (its order varies per process); sorted is one such order.
            warnings.append(f"Command {i}: Unknown fields: {', '.join(unknown)}")
        if i < len(items) and keystrokes and not keystrokes.endswith("\n"):
            warnings.append(
                f"Command {i} should end with newline when followed by another command. "
                "Otherwise the two commands will be concatenated together on the same line."
            )
        commands.append(Command(keystrokes=keystrokes, duration=duration))
    return commands, ""


def _close_braces(text: str, error: str) -> str | None:
    if not any(marker in error for marker in _FIXABLE_BY_CLOSING):
        return None
    missing = text.count("{") - text.count("}")
    return text + "}" * missing if missing > 0 else None


_OBJECT = re.compile(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}", re.DOTALL)


def _first_json_object(text: str) -> str | None:
    for match in _OBJECT.findall(text):
        try:
            _loads(match)
        except (json.JSONDecodeError, _TooDeepError):
            continue
        return str(match)
    return None


# ---------------------------------------------------------------- observations


def screen_text(shell: ShellSession, max_bytes: int = 10000) -> str:
    """``Current Terminal Screen:`` and the screen, the whole cut to ``max_bytes`` as
    Terminus 2's ``_limit_output_length`` cuts it."""
    return truncate_output("Current Terminal Screen:\n" + shell.screen(), max_bytes)


def observe(shell: ShellSession, max_bytes: int = 10000) -> str:
    """What the model sees after its commands ran, as Harbor's
    ``TmuxSession.get_incremental_output`` builds it: ``New Terminal Output:`` and the
    new content, or the screen when nothing is new or the previous capture is gone;
    the whole cut to ``max_bytes``."""
    text = shell.observe(None)
    if not text.strip():
        return screen_text(shell, max_bytes)
    return truncate_output("New Terminal Output:\n" + text, max_bytes)


# ---------------------------------------------------------------- feedback messages


def feedback(reply: Reply) -> str:
    """Terminus's feedback line for a reply: ``ERROR: ...`` and/or ``WARNINGS: ...``."""
    if reply.error:
        text = f"ERROR: {reply.error}"
        return f"{text}\nWARNINGS: {reply.warning_text}" if reply.warnings else text
    return f"WARNINGS: {reply.warning_text}" if reply.warnings else ""


def refused(reply: Reply) -> bool:
    """Whether Terminus runs nothing and asks for a proper reply.

    Terminus decides by looking for ``ERROR:`` in the feedback text, so a warning that
    quotes a model's field named ``ERROR:`` refuses the reply too; we keep that quirk.
    """
    return "ERROR:" in feedback(reply)


def first_prompt(
    instruction: str, terminal_state: str, *, default_duration: float, max_duration: float
) -> str:
    """Terminus's first message: role, schema, rules, the task and the terminal state."""
    return render(
        "terminus-json-plain",
        instruction=instruction,
        terminal_state=terminal_state,
        default_duration=default_duration,
        max_duration=f"{max_duration:g}",
    )


def with_warnings(observation: str, reply: Reply) -> str:
    """The next prompt: the observation, with the reply's warnings in front if any."""
    if not reply.warnings:
        return observation
    return render("warnings", warnings=reply.warning_text, observation=observation)


def confirm_message(observation: str) -> str:
    """Ask the model to confirm ``task_complete``; Terminus shows no warnings here."""
    return render("confirm", terminal_state=observation)


def parse_error_message(reply: Reply) -> str:
    """The next prompt after a refused reply: the feedback, and a request for a proper one."""
    return render("parse_error", feedback=feedback(reply))


def output_limit_message(
    truncated: str, limit: int | None = None, *, default_duration: float = 1.0
) -> str:
    """The next prompt after a reply cut by the output-token limit (nothing was run).

    ``limit`` is the model's output limit as LiteLLM would report it; Terminus says "the
    maximum output length" when LiteLLM does not know the model (any self-served one).
    """
    named = f"{limit} tokens" if limit is not None else "the maximum output length"
    message = render("output_limit", limit=named)
    warnings = parse_reply(truncated, default_duration=default_duration).warning_text
    if warnings:
        message += render("output_limit_warnings", warnings=warnings)
    return message
