"""Pure-Python twin of ``compress.pyx``: same functions, same answers.

``compress_trajectory`` keeps what a deployed plain-Terminus model would see and say
(instruction, model actions, observations) and shortens it for the planner and the
direct-SFT export. Rules, in message order:

- ``harness`` and ``private`` messages are dropped (control text and runbook guidance).
- State-machine turns: a model command is a state-machine command when the StateM
  harness runs it as one (``rsr_async.harness.statem.is_statem_command``, the one
  definition): its keystrokes, less one trailing ``\\n`` and the whitespace around them,
  are one line that is ``statem`` or starts with ``statem ``. (``_native`` sits below the
  harness and does not import it; ``tests/native/test_compress.py`` pins both twins to
  that function.) A model turn whose commands are all such is dropped with every
  ``env`` observation after it up to the next model message (their output). In a turn
  that mixes them, only the ``statem`` commands leave ``Message.commands``; the turn,
  its raw reply text and its observation stay.
- ``task`` text loses its terminal escape sequences. ``env`` observations lose them too,
  then are cut, when longer than ``max_observation_bytes`` UTF-8 bytes, to a head of
  ``max_observation_bytes // 2`` bytes and a tail of the rest, both on character
  boundaries, joined by ``\\n[... N bytes omitted ...]\\n``; ``0`` disables the cut.
- An observation (after cleaning, non-empty) equal to the previous observation is
  dropped when it directly follows it, else replaced by ``[same output as the previous
  observation]``.
- ``model`` messages are kept as they are (apart from the ``statem`` commands above).

Escape sequences (ECMA-48, 7-bit): ``ESC [`` parameters ``0x30-0x3F``* intermediates
``0x20-0x2F``* then an optional final ``0x40-0x7E``; ``ESC ]``, ``ESC P``, ``ESC X``,
``ESC ^``, ``ESC _`` up to and including ``BEL`` or ``ESC \\`` (or the end); ``ESC``
intermediates+ then an optional final ``0x30-0x7E``; ``ESC`` then one ``0x30-0x7E``; a
lone ``ESC``. Other control characters (``\\r``, ``\\b``) stay.
"""

from __future__ import annotations

import re

import msgspec

from ..schema import Command, Message, Trajectory
from .records import CompressionReport

__all__ = ["CompressionReport", "clean_observation", "compress_trajectory"]

_ANSI = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]?|[\]PX^_].*?(?:\x07|\x1b\\|\Z)|[ -/]+[0-~]?|[0-~]?)",
    re.DOTALL,
)
SAME_MARKER = "[same output as the previous observation]"


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _cut(text: str, max_bytes: int) -> tuple[str, bool]:
    if max_bytes <= 0:
        return text, False
    if len(text) * 4 <= max_bytes:
        return text, False
    data = text.encode("utf-8", "surrogatepass")
    total = len(data)
    if total <= max_bytes:
        return text, False
    head = max_bytes // 2
    while head > 0 and (data[head] & 0xC0) == 0x80:
        head -= 1  # do not split a character
    tail = total - (max_bytes - max_bytes // 2)
    while tail < total and (data[tail] & 0xC0) == 0x80:
        tail += 1
    marker = f"\n[... {tail - head} bytes omitted ...]\n"
    return (
        data[:head].decode("utf-8", "surrogatepass")
        + marker
        + data[tail:].decode("utf-8", "surrogatepass"),
        True,
    )


def _clean(text: str, max_bytes: int, strip_ansi: bool) -> tuple[str, int, bool]:
    escapes = 0
    if strip_ansi and "\x1b" in text:
        text, escapes = _ANSI.subn("", text)
    text, cut = _cut(text, max_bytes)
    return text, escapes, cut


def _check(max_observation_bytes: object, strip_ansi: object, fname: str) -> int:
    if not isinstance(max_observation_bytes, int) or isinstance(max_observation_bytes, bool):
        raise TypeError(
            f"{fname}: max_observation_bytes must be an int, "
            f"got {type(max_observation_bytes).__name__}"
        )
    if not isinstance(strip_ansi, bool):
        raise TypeError(f"{fname}: strip_ansi must be a bool, got {type(strip_ansi).__name__}")
    return max_observation_bytes


def clean_observation(text: str, *, max_bytes: int = 4096, strip_ansi: bool = True) -> str:
    """One observation as ``compress_trajectory`` keeps it: escapes removed, middle cut."""
    if not isinstance(text, str):
        raise TypeError(f"clean_observation: expected str, got {type(text).__name__}")
    limit = _check(max_bytes, strip_ansi, "clean_observation")
    return _clean(text, limit, strip_ansi)[0]


def _is_statem(command: object, index: int) -> bool:
    keystrokes = getattr(command, "keystrokes", None)
    if not isinstance(command, Command) or not isinstance(keystrokes, str):
        raise TypeError(
            f"compress_trajectory: messages[{index}].commands holds {command!r}, "
            "not a Command with str keystrokes"
        )
    line = keystrokes.removesuffix("\n").strip()
    return "\n" not in line and (line == "statem" or line.startswith("statem "))


def compress_trajectory(
    trajectory: Trajectory,
    *,
    max_observation_bytes: int = 4096,
    strip_ansi: bool = True,
    collapse_repeats: bool = True,
) -> tuple[Trajectory, CompressionReport]:
    """The trajectory without harness control text, with observations cleaned and cut."""
    if not isinstance(trajectory, Trajectory):
        raise TypeError(
            f"compress_trajectory: expected a Trajectory, got {type(trajectory).__name__}"
        )
    limit = _check(max_observation_bytes, strip_ansi, "compress_trajectory")
    if not isinstance(collapse_repeats, bool):
        raise TypeError(
            "compress_trajectory: collapse_repeats must be a bool, "
            f"got {type(collapse_repeats).__name__}"
        )
    kept: list[Message] = []
    dropped: list[int] = []
    harness = private = statem = statem_commands = collapsed = truncated = escapes = 0
    bytes_in = bytes_out = 0
    skipping_statem_output = False
    previous: str | None = None  # last observation, cleaned
    previous_kept_is_it = False  # the last kept message is that observation
    for index, message in enumerate(trajectory.messages):
        if not isinstance(message, Message):
            raise TypeError(
                f"compress_trajectory: messages[{index}] is a {type(message).__name__}, "
                "not a Message"
            )
        content = message.content
        origin = message.origin
        if not isinstance(content, str) or not isinstance(origin, str):
            raise TypeError(
                f"compress_trajectory: messages[{index}] has a "
                f"{type(content).__name__} content and a {type(origin).__name__} origin; "
                "both must be str"
            )
        bytes_in += _utf8_len(content)
        out: Message | None = message
        if origin == "harness":
            harness += 1
            out = None
        elif origin == "private":
            private += 1
            out = None
        elif origin == "model":
            commands = message.commands
            plain = tuple(c for c in commands if not _is_statem(c, index))
            if commands and not plain:
                statem += 1
                skipping_statem_output = True
                out = None
            else:
                skipping_statem_output = False
                if len(plain) != len(commands):
                    statem_commands += len(commands) - len(plain)
                    out = msgspec.structs.replace(message, commands=plain)
        elif origin == "env":
            if skipping_statem_output:
                statem += 1
                out = None
            else:
                text, n_escapes, cut = _clean(content, limit, strip_ansi)
                escapes += n_escapes
                truncated += cut
                if collapse_repeats and text and text == previous:
                    collapsed += 1
                    if previous_kept_is_it:
                        out = None
                    else:
                        out = msgspec.structs.replace(message, content=SAME_MARKER)
                else:
                    previous = text
                    if text is not content:
                        out = msgspec.structs.replace(message, content=text)
        elif origin == "task" and strip_ansi and "\x1b" in content:
            text, n_escapes = _ANSI.subn("", content)
            escapes += n_escapes
            out = msgspec.structs.replace(message, content=text)
        if out is None:
            dropped.append(index)
            continue
        previous_kept_is_it = origin == "env"
        bytes_out += _utf8_len(out.content)
        kept.append(out)
    result = Trajectory(
        task=trajectory.task, harness=trajectory.harness, model=trajectory.model, messages=kept
    )
    report = CompressionReport(
        messages_in=len(trajectory.messages),
        messages_out=len(kept),
        dropped_harness=harness,
        dropped_private=private,
        dropped_statem=statem,
        statem_commands=statem_commands,
        collapsed=collapsed,
        truncated=truncated,
        ansi_sequences=escapes,
        bytes_in=bytes_in,
        bytes_out=bytes_out,
        dropped=tuple(dropped),
    )
    return result, report
