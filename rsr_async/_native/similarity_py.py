"""Pure-Python twin of ``similarity.pyx``: same functions, same answers."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["command_jaccard", "normalize_command"]


def normalize_command(command: str) -> str:
    """Collapse runs of whitespace to one space and strip both ends (``ls  -l\\n`` → ``ls -l``)."""
    if not isinstance(command, str):
        raise TypeError(f"normalize_command: expected str, got {type(command).__name__}")
    return " ".join(command.split())


def _command_set(commands: Sequence[str], name: str) -> set[str]:
    if isinstance(commands, str) or not isinstance(commands, Sequence):
        raise TypeError(f"command_jaccard: {name} must be a sequence of str")
    out: set[str] = set()
    for command in commands:
        if not isinstance(command, str):
            raise TypeError(f"command_jaccard: {name} holds a {type(command).__name__}, not str")
        normalized = " ".join(command.split())
        if normalized:
            out.add(normalized)
    return out


def command_jaccard(a: Sequence[str], b: Sequence[str]) -> float:
    """Jaccard index of the sets of normalised, non-empty commands; 1.0 when both are empty."""
    sa = _command_set(a, "a")
    sb = _command_set(b, "b")
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)
