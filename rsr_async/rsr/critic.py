"""The critic: deterministic rules first, then a model judge that sees only the public side.

:func:`rule_checks` returns the reasons to reject a runbook, each naming its rule:

``rule:schema``
    The runbook must parse into all five sections (:data:`~.planner.RUNBOOK_SECTIONS`),
    none empty.
``rule:ngram_overlap``
    Word n-grams (lower-cased ``\\w+`` tokens, default 8) of the runbook that also occur in
    one file of the task's ``solution/`` (or legacy ``solution.sh``) or ``tests/``: more
    than ``overlap_threshold`` of the runbook's distinct n-grams in any one file rejects.
    Word tokens make the rule blind to re-spacing and re-quoting of copied code.
``rule:literal_value``
    Literal values (the native leak scanner's candidates: paths, numbers, hashes, tokens,
    long identifiers) that the runbook states and the public instruction does not contain
    (as a word or as a substring), when they are either

    - *produced by the source*: typed in its commands, or shown in its last
      ``final_observations`` observations, without any earlier instruction text or
      observation having shown them (the scanner run over the source); or
    - *hidden-test values*: literals of the files under ``tests/`` that no observation of
      the source ever showed (a value the environment shows is discoverable, not secret).

    A path whose every component some observation (or the instruction) showed is an
    interface the agent can find by looking (``conf/overrides.ini`` after ``ls`` showed
    ``conf`` and ``overrides.ini``), not a value: neither set holds it. A runbook may
    name what the instruction names or what the source only looked at.
``rule:absent_tool``
    A tool the source's observations reported missing (``X: command not found``,
    ``sh: 1: X: not found``) that the runbook uses as a command: the first word of an
    inline code span or of a line in a code block, or a word after ``|``, ``&&``, ``||``,
    ``;`` or ``$(`` there. Prose mentions ("``jq`` is not installed" in the pitfalls) and
    the pitfalls section do not count. This is the one sound signal available without
    inspecting the image: a tool the environment itself said is missing.

The judge (:func:`judge_messages`, :func:`parse_judgement`) sees only the instruction and
the runbook; it answers one JSON object ``{"verdict": "accept"|"reject", "critique": …}``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from .._native import LeakScanner
from ..errors import ReplyFormatError
from ..llm.base import ChatMessage
from ..schema import Task, Trajectory
from .planner import RUNBOOK_SECTIONS, parse_runbook
from .prompts import json_objects, render_prompt, strip_reasoning

__all__ = [
    "absent_tools",
    "judge_messages",
    "parse_judgement",
    "reference_files",
    "rule_checks",
]

_MAX_FILE_BYTES = 1 << 20
_TOKEN = re.compile(r"\w+")


# ------------------------------------------------------------------ task files


def reference_files(task: Task) -> list[tuple[str, str]]:
    """``(path relative to the task dir, text)`` of the solution and test files.

    Harbor: every file under ``solution/`` and ``tests/``; legacy terminal-bench: its
    ``solution.sh`` and ``tests/``. Binary files and files over 1 MiB are skipped.
    """
    return list(_reference_files(task.path, task.tests_dir, task.solution_path or ""))


@lru_cache(maxsize=256)
def _reference_files(path: str, tests_dir: str, solution_path: str) -> tuple[tuple[str, str], ...]:
    # Task files do not change during a run: read once per process, not once per runbook.
    root = Path(path)
    places: list[Path] = [root / "solution", Path(tests_dir) if tests_dir else root / "tests"]
    if solution_path and not Path(solution_path).is_relative_to(root / "solution"):
        places.append(Path(solution_path))
    out: list[tuple[str, str]] = []
    for place in places:
        files = [place] if place.is_file() else sorted(p for p in place.rglob("*") if p.is_file())
        for file in files:
            try:
                data = file.read_bytes()
            except OSError:
                continue
            if len(data) > _MAX_FILE_BYTES or b"\0" in data:
                continue
            try:
                name = file.relative_to(root).as_posix()
            except ValueError:
                name = file.name
            out.append((name, data.decode("utf-8", "replace")))
    return tuple(out)


def _ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    tokens = _TOKEN.findall(text.lower())
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


@lru_cache(maxsize=1024)
def _file_ngrams(text: str, n: int) -> frozenset[tuple[str, ...]]:
    return frozenset(_ngrams(text, n))


# ------------------------------------------------------------------ the rules


def _schema(runbook: str) -> list[str]:
    try:
        sections = parse_runbook(runbook)
    except ReplyFormatError as exc:
        return [f"rule:schema: {exc}"]
    missing = [name for name in RUNBOOK_SECTIONS if name not in sections]
    empty = [name for name in RUNBOOK_SECTIONS if name in sections and not sections[name].strip()]
    reasons = []
    if missing:
        reasons.append(f"rule:schema: missing section(s): {', '.join(missing)}")
    if empty:
        reasons.append(f"rule:schema: empty section(s): {', '.join(empty)}")
    return reasons


def _overlap(runbook: str, files: Iterable[tuple[str, str]], n: int, threshold: float) -> list[str]:
    mine = _ngrams(runbook, n)
    if not mine:
        return []
    worst: tuple[float, str] = (0.0, "")
    for name, text in files:
        share = len(mine & _file_ngrams(text, n)) / len(mine)
        worst = max(worst, (share, name))
    share, name = worst
    if share > threshold:
        return [
            f"rule:ngram_overlap: {share:.0%} of the runbook's {n}-grams appear in {name} "
            f"(limit {threshold:.0%})"
        ]
    return []


def _public(source: Trajectory) -> list[tuple[str, str, int]]:
    """``(origin, text, turn)`` of what the source saw and did, in order."""
    out: list[tuple[str, str, int]] = []
    for message in source.messages:
        if message.origin in ("task", "env"):
            out.append((message.origin, message.content, message.turn))
        elif message.origin == "model":
            action = "\n".join(c.keystrokes for c in message.commands)
            out.append(("model", action, message.turn))
    return out


def _findable(value: str, kind: str, seen: str) -> bool:
    """A path whose every component appears in ``seen`` (see ``rule:literal_value``)."""
    parts = [part for part in value.split("/") if part]
    return kind == "path" and bool(parts) and all(part in seen for part in parts)


def _seen_text(source: Trajectory, instruction: str) -> str:
    return "\n".join([instruction, *(t for o, t, _ in _public(source) if o != "model")])


def _source_values(
    source: Trajectory, instruction: str, final_observations: int
) -> dict[str, str]:
    """Value -> where it came from, for the values the source produced (see module doc)."""
    public = _public(source)
    seen = _seen_text(source, instruction)
    env_indexes = [i for i, (origin, _, _) in enumerate(public) if origin == "env"]
    final = set(env_indexes[-final_observations:]) if final_observations > 0 else set()
    # First pass only: the critic asks which literals a runbook states that the source
    # produced, and an everyday or derivable value stated as the answer is still stated.
    scanner = LeakScanner(instruction, derive=False)
    values: dict[str, str] = {}
    for i, (origin, text, turn) in enumerate(public):
        if origin == "model" or i in final:
            where = (
                f"the source's commands (turn {turn})"
                if origin == "model"
                else f"the source's final output (turn {turn})"
            )
            for leak in scanner.scan(text, turn):
                if not _findable(leak.value, leak.kind, seen):
                    values.setdefault(leak.value, where)
        if origin != "model":
            scanner.observe(text)
    return values


def _test_values(
    files: Iterable[tuple[str, str]], source: Trajectory, instruction: str
) -> dict[str, str]:
    seen = LeakScanner(instruction, derive=False)
    for origin, text, _ in _public(source):
        if origin != "model":
            seen.observe(text)
    shown = _seen_text(source, instruction)
    values: dict[str, str] = {}
    for name, text in files:
        if not name.startswith("tests/"):
            continue
        for leak in seen.scan(text):
            if not _findable(leak.value, leak.kind, shown):
                values.setdefault(leak.value, name)
    return values


def _literals(
    runbook: str, *, task: Task, source: Trajectory, files: list[tuple[str, str]],
    final_observations: int,
) -> list[str]:
    instruction = task.instruction
    stated = [
        leak.value
        for leak in LeakScanner(instruction, derive=False).scan(runbook)
        if leak.value not in instruction
    ]
    if not stated:
        return []
    produced = _source_values(source, instruction, final_observations)
    hidden = _test_values(files, source, instruction)
    reasons = []
    for value in stated:
        where = produced.get(value) or hidden.get(value)
        if where is not None:
            reasons.append(
                f"rule:literal_value: {value!r} comes from {where} and the instruction does "
                "not state it; describe how to find it instead"
            )
    return reasons


_MISSING = (
    re.compile(r"(?:^|[\s:])([A-Za-z0-9_.+-]+): command not found", re.MULTILINE),
    re.compile(r"\bsh: \d+: ([A-Za-z0-9_.+-]+): not found"),
)


def absent_tools(source: Trajectory) -> set[str]:
    """Tools the source's observations reported missing (see ``rule:absent_tool``)."""
    tools: set[str] = set()
    for message in source.messages:
        if message.origin == "env":
            for pattern in _MISSING:
                tools.update(pattern.findall(message.content))
    return {t for t in tools if len(t) > 1}


_INLINE = re.compile(r"`([^`\n]+)`")
_SEPARATOR = re.compile(r"\|\||&&|\$\(|[|;]")


def _command_words(code: str) -> set[str]:
    words: set[str] = set()
    for line in code.splitlines():
        line = line.strip().removeprefix("$ ").removeprefix("sudo ")
        for part in _SEPARATOR.split(line):
            first = part.strip().split(None, 1)
            if first:
                words.add(first[0])
    return words


def _tools(runbook: str, source: Trajectory) -> list[str]:
    missing = absent_tools(source)
    if not missing:
        return []
    try:
        sections = parse_runbook(runbook)
    except ReplyFormatError:
        return []  # the schema rule has said it already
    text = "\n".join(v for k, v in sections.items() if k != "Common pitfalls")
    used: set[str] = set()
    in_code = False
    block: list[str] = []
    for line in text.splitlines():
        if line.strip().startswith(("```", "~~~")):
            if in_code:
                used |= _command_words("\n".join(block))
                block = []
            in_code = not in_code
            continue
        if in_code:
            block.append(line)
        else:
            for span in _INLINE.findall(line):
                used |= _command_words(span)
    used |= _command_words("\n".join(block))
    return [
        f"rule:absent_tool: the runbook runs {tool!r}, which the source's terminal reported "
        "as not found in this environment"
        for tool in sorted(used & missing)
    ]


def rule_checks(
    runbook: str,
    *,
    task: Task,
    source: Trajectory,
    ngram: int = 8,
    overlap_threshold: float = 0.2,
    final_observations: int = 1,
) -> list[str]:
    """Deterministic reasons to reject ``runbook`` (empty: it passes); see the module doc.

    ``source`` is the full source trajectory (harness and private messages are ignored).
    Reasons come in rule order: schema, n-gram overlap, literal values, absent tools.
    """
    if ngram < 1:
        raise ValueError(f"rule_checks: ngram must be at least 1, got {ngram}")
    files = reference_files(task)
    return [
        *_schema(runbook),
        *_overlap(runbook, files, ngram, overlap_threshold),
        *_literals(runbook, task=task, source=source, files=files,
                   final_observations=final_observations),
        *_tools(runbook, source),
    ]


# ------------------------------------------------------------------ the judge


def judge_messages(*, instruction: str, runbook: str) -> list[ChatMessage]:
    """The judge call: it sees the public instruction and the runbook, nothing else."""
    return [
        {"role": "system", "content": render_prompt("critic")},
        {
            "role": "user",
            "content": render_prompt("critic_task", instruction=instruction.strip(),
                                     runbook=runbook.strip()),
        },
    ]


_ACCEPT = {"accept", "accepted", "approve", "approved", "pass", "passed", "ok", "yes", "true"}
_REJECT = {"reject", "rejected", "deny", "denied", "fail", "failed", "no", "false", "revise"}
_VERDICT_KEYS = ("verdict", "decision", "result", "status", "judgement", "judgment")
_CRITIQUE_KEYS = ("critique", "reasons", "reason", "feedback", "comments", "explanation", "issues")
_BARE = re.compile(r"\b(?:verdict|decision)\W{0,3}\s*(accept|reject)(?:ed)?\b", re.IGNORECASE)


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().strip(".!\"'").lower().split(None, 1)
        if word and word[0] in _ACCEPT:
            return True
        if word and word[0] in _REJECT:
            return False
    return None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return "\n".join(f"- {_text(v)}" if len(value) > 1 else _text(v) for v in value if v)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_text(v)}" for k, v in value.items())
    return str(value).strip()


def parse_judgement(reply: str) -> tuple[bool, str]:
    """``(accepted, critique)`` from the judge's reply.

    Reads the first JSON object with a verdict (``verdict``/``decision``… as
    accept/reject words, or ``accepted``/``accept``/``approved`` as booleans), keys in any
    case; the critique (``critique``, ``reasons`` as a list …) may be missing. Without
    such an object, a bare ``Verdict: reject`` line is read. Raises
    :class:`ReplyFormatError` when no verdict can be found.
    """
    for obj in json_objects(reply):
        fields = {str(k).strip().lower(): v for k, v in obj.items()}
        accepted: bool | None = None
        for key in _VERDICT_KEYS:
            if key in fields and (accepted := _flag(fields[key])) is not None:
                break
        if accepted is None:
            for key in ("accepted", "accept", "approved", "approve", "pass"):
                if key in fields and (accepted := _flag(fields[key])) is not None:
                    break
        if accepted is None:
            continue
        critique = next((_text(fields[k]) for k in _CRITIQUE_KEYS if k in fields and fields[k]), "")
        return accepted, critique
    match = _BARE.search(strip_reasoning(reply))
    if match:
        accepted = match.group(1).lower() == "accept"
        rest = strip_reasoning(reply)[match.end() :].lstrip(" \n:.-").strip()
        return accepted, rest
    start = strip_reasoning(reply).strip()[:80].replace("\n", " ")
    raise ReplyFormatError(
        'critic reply has no verdict: expected a JSON object {"verdict": "accept" | "reject", '
        f'"critique": "..."}}; it starts {start!r}' if start else "critic reply is empty"
    )
