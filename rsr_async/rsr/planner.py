"""The planner: a successful trajectory in, K runbooks out (one model call each).

The source is compressed by the native ``compress_trajectory`` (harness control and
private text dropped, observations cut) and shown as a readable transcript. The K calls for
one source share one byte-identical prefix (system prompt, instruction, source) and differ
only in their last lines (the runbook's index, and after a rejection the rejected draft
with its critique), so one server's prefix cache serves all of them.

A runbook has the paper's five parts (:data:`RUNBOOK_SECTIONS`). :func:`parse_runbook`
reads a model's markdown leniently; :func:`render_runbook` writes the canonical text the
critic checks and the executor gets as private guidance.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from .._native import compress_trajectory
from ..errors import ReplyFormatError
from ..llm.base import ChatMessage
from ..schema import Message, Trajectory
from .prompts import render_prompt, strip_reasoning

__all__ = [
    "RUNBOOK_SECTIONS",
    "compress_source",
    "parse_runbook",
    "planner_messages",
    "render_runbook",
    "render_transcript",
    "section_of",
]

RUNBOOK_SECTIONS: tuple[str, ...] = (
    "Final-state requirements",
    "Key milestones",
    "How to check progress",
    "Recovery strategies",
    "Common pitfalls",
)
"""The paper's five parts of a runbook, in order; the canonical ``## `` headings."""

# What each section may be called by a model that did not copy the heading exactly. A
# heading is compared whole (after normalising), so "### Check the output" inside the
# milestones is content, not the start of the checks section.
_ALIASES: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        r"(final|end|target|goal|desired)( ?state)?( requirements?)?|requirements?"
        r"|final state requirements?|what done looks like|definition of done",
        r"(key )?milestones?|(key )?steps|plan",
        r"(how to )?(check|verify|track|monitor|measure)( your)? progress"
        r"|progress checks?|checks?|checking progress|verification( steps)?|(how to )?verify",
        r"recovery( strateg(y|ies)| steps| plan)?|(how to )?recover( from (errors|failures))?"
        r"|if something (fails|goes wrong)|troubleshooting",
        r"(common )?pitfalls?( to avoid)?|(common )?mistakes( to avoid)?|gotchas|caveats|warnings",
    )
)

# Focus hints that make the K runbooks of one source differ (cycled by index).
_FOCUS = (
    "Keep it concise: the fewest milestones that still make progress checkable.",
    "Emphasise how to check progress: a concrete observation for every milestone.",
    "Emphasise recovery: the errors this environment is likely to show and what each means.",
    "Emphasise exploration first: what to inspect before changing anything, and why.",
)


def section_of(heading: str) -> str | None:
    """The canonical section a heading names (case, numbering, markup ignored), or None."""
    text = heading.strip().lower()
    text = re.sub(r"[*_`#]", "", text)
    text = re.sub(r"^(part|section|step)?\s*\d+\s*[.):-]?\s*", "", text)
    text = re.sub(r"^[ivx]+[.)]\s+", "", text)  # roman numbering
    text = re.sub(r"[-–—/]", " ", text)
    text = re.sub(r"[^a-z ]", "", text)
    text = re.sub(r"\s+", " ", text).strip()
    for name, pattern in zip(RUNBOOK_SECTIONS, _ALIASES, strict=True):
        if pattern.fullmatch(text):
            return name
    return None


# ------------------------------------------------------------------ the source


def _command_lines(keystrokes: str) -> list[str]:
    """A command as typed: ``$ first line`` then ``> continuation`` lines (a shell's PS2)."""
    lines = keystrokes.removesuffix("\n").split("\n")
    return [f"$ {lines[0]}", *(f"> {line}" for line in lines[1:])]


def render_transcript(messages: Sequence[Message], *, instruction: str = "") -> str:
    """Public messages as readable text: turns of ``$`` commands and ``Terminal:`` output.

    A ``task`` message shows only what follows the instruction in it (else what follows
    Terminus's ``Current terminal state:`` label, else all of it): the instruction is
    given on its own. ``harness`` and ``private`` messages are left out whatever the
    caller passed.
    """
    parts: list[str] = []
    wanted = instruction.strip()
    for message in messages:
        origin = message.origin
        if origin == "task":
            text = message.content
            if wanted and wanted in text:
                text = text.split(wanted, 1)[1]
            elif _SCREEN_LABEL in text:
                text = text[text.index(_SCREEN_LABEL) :]
            text = text.strip()
            if text:
                parts.append(f"Start:\n{text}")
        elif origin == "model":
            lines = [f"### Turn {message.turn}"]
            for command in message.commands:
                lines.extend(_command_lines(command.keystrokes))
            if not message.commands:
                lines.append(
                    "(no commands; declared the task complete)"
                    if message.task_complete
                    else "(no commands)"
                )
            parts.append("\n".join(lines))
        elif origin == "env":
            parts.append(f"Terminal:\n{message.content.rstrip()}")
    return "\n\n".join(parts)


_SCREEN_LABEL = "Current terminal state:"


def compress_source(trajectory: Trajectory, *, observation_bytes: int) -> str:
    """The source trajectory as the planner reads it.

    Native ``compress_trajectory`` first (harness control and private messages dropped,
    state-machine turns dropped, escapes removed, each observation cut to
    ``observation_bytes`` keeping head and tail, repeats collapsed), then the transcript
    form of :func:`render_transcript`, without the task prompt's preamble (the planner's
    prompt gives the instruction on its own).
    """
    compressed, _report = compress_trajectory(trajectory, max_observation_bytes=observation_bytes)
    return render_transcript(compressed.messages)


# ------------------------------------------------------------------ messages


def planner_messages(
    *,
    instruction: str,
    source: str,
    index: int,
    count: int,
    rejected: str | None = None,
    critique: str | None = None,
) -> list[ChatMessage]:
    """The planner call for runbook ``index`` of ``count`` (0-based) from one source.

    Everything that does not depend on ``index`` comes first and is byte-identical across
    the K calls (and across regenerations); a regeneration appends the rejected draft and
    its critique before the index line.
    """
    if not 0 <= index < count:
        raise ValueError(f"planner_messages: index {index} is outside [0, {count})")
    if (rejected is None) != (critique is None):
        raise ValueError("planner_messages: a regeneration needs both the rejected draft and the critique")
    user = render_prompt("planner_source", instruction=instruction.strip(), source=source.strip())
    if rejected is not None and critique is not None:
        user += render_prompt("planner_retry", rejected=rejected.strip(), critique=critique.strip())
    user += render_prompt(
        "planner_index", number=str(index + 1), count=str(count), focus=_FOCUS[index % len(_FOCUS)]
    )
    return [
        {"role": "system", "content": render_prompt("planner")},
        {"role": "user", "content": user},
    ]


# ------------------------------------------------------------------ replies

_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_BOLD_LINE = re.compile(r"^\s*(?:\d+[.)]\s*)?\*\*(.+?)\*\*\s*:?\s*$")
_PLAIN_LINE = re.compile(r"^\s*(?:\d+[.)]\s*)?([A-Za-z][A-Za-z /-]{2,60}?)\s*:?\s*$")
_FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)\s*$")


def _heading(line: str) -> str | None:
    for pattern in (_MD_HEADING, _BOLD_LINE, _PLAIN_LINE):
        match = pattern.match(line)
        if match:
            return section_of(match.group(1))
    return None


def parse_runbook(reply: str) -> dict[str, str]:
    """Section name -> text, from a planner's markdown reply.

    Tolerates reasoning blocks, prose before the first section, the whole reply inside a
    code fence, other heading levels, bold or ``Name:`` headings, numbering, case and
    wording variants (see :func:`section_of`). Headings inside code blocks are content.
    Sections are returned in canonical order; missing ones are absent (the critic's
    schema rule rejects such a runbook with a reason the planner can act on). Raises
    :class:`ReplyFormatError` when no section is found at all.
    """
    text = strip_reasoning(reply)
    lines = text.splitlines()
    fences = [i for i, line in enumerate(lines) if _FENCE.match(line)]
    first_heading = next((i for i, line in enumerate(lines) if _heading(line)), len(lines))
    # A fence opened before any section wraps the whole runbook; the last bare fence
    # closes it, and whatever follows is prose after the answer.
    wrapper_open = fences[0] if fences and fences[0] < first_heading else -1
    wrapper_close = len(lines)
    if wrapper_open >= 0:
        bare = [i for i in fences if i > wrapper_open and lines[i].strip().strip("`~") == ""]
        if bare:
            wrapper_close = bare[-1]
    sections: dict[str, list[str]] = {}
    current: str | None = None
    code = False  # inside a code block within a section: headings there are content
    for i, line in enumerate(lines[:wrapper_close]):
        if i == wrapper_open:
            continue
        fence = _FENCE.match(line)
        if fence:
            if not code:
                code = True
            elif not fence.group(2):
                code = False
        elif not code:
            name = _heading(line)
            if name is not None:
                current = name
                sections.setdefault(name, [])
                continue
        if current is not None:
            sections[current].append(line)
    if not sections:
        headings = ", ".join(f"## {name}" for name in RUNBOOK_SECTIONS)
        start = text.strip()[:80].replace("\n", " ")
        raise ReplyFormatError(
            f"planner reply has none of the runbook sections (expected the headings "
            f"{headings}); it starts {start!r}" if start else "planner reply is empty"
        )
    return {name: "\n".join(sections[name]).strip() for name in RUNBOOK_SECTIONS if name in sections}


def render_runbook(sections: Mapping[str, str]) -> str:
    """The canonical runbook text: the sections present, in order, under ``## `` headings.

    Keys may be any heading :func:`section_of` recognises; an unknown key is a bug.
    """
    canonical: dict[str, str] = {}
    for key, value in sections.items():
        name = key if key in RUNBOOK_SECTIONS else section_of(key)
        if name is None:
            raise ValueError(f"render_runbook: {key!r} is not one of {RUNBOOK_SECTIONS}")
        canonical[name] = value.strip()
    blocks = [f"## {name}\n{canonical[name]}".rstrip() for name in RUNBOOK_SECTIONS if name in canonical]
    return "\n\n".join(blocks) + "\n"
