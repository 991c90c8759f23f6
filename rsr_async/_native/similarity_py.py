"""Pure-Python twin of ``similarity.pyx``: same functions, same answers.

Definitions shared by both implementations:

- A command is normalised by collapsing every run of whitespace (``str.split()``'s set,
  so a trailing newline too) to one space and stripping both ends; commands that
  normalise to ``""`` are dropped (a bare Enter is a wait, not a command).
- An item is a ``Trajectory`` (its model keystrokes, after the first ``skip_first``
  model turns) or a sequence of ``str`` (after its first ``skip_first`` entries).
- Jaccard: ``|A ∩ B| / |A ∪ B|`` over the sets of normalised commands; 1.0 when both
  are empty.
- Order similarity: ``LCS(a, b) / max(len(a), len(b))`` over the normalised command
  sequences, which is rapidfuzz's ``LCSseq.normalized_similarity``; 1.0 when both are
  empty, 0.0 when one is.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..schema import Trajectory

__all__ = [
    "command_jaccard",
    "command_order_similarity",
    "normalize_command",
    "pairwise_jaccard",
    "pairwise_order_similarity",
]

Item = Trajectory | Sequence[str]


def normalize_command(command: str) -> str:
    """Collapse runs of whitespace to one space and strip both ends (``ls  -l\\n`` → ``ls -l``)."""
    if not isinstance(command, str):
        raise TypeError(f"normalize_command: expected str, got {type(command).__name__}")
    return " ".join(command.split())


def _check_skip(skip_first: object, fname: str) -> int:
    if not isinstance(skip_first, int) or isinstance(skip_first, bool):
        raise TypeError(f"{fname}: skip_first must be an int, got {type(skip_first).__name__}")
    if skip_first < 0:
        raise ValueError(f"{fname}: skip_first must be >= 0, got {skip_first}")
    return skip_first


def _commands(item: object, skip_first: int, fname: str, name: str) -> list[str]:
    """The normalised, non-blank commands of one item."""
    if isinstance(item, Trajectory):
        raw: Sequence[object] = item.commands(skip_first=skip_first)
    elif isinstance(item, str) or not isinstance(item, Sequence):
        raise TypeError(
            f"{fname}: {name} must be a Trajectory or a sequence of str, "
            f"got {type(item).__name__}"
        )
    else:
        raw = item[skip_first:]
    out: list[str] = []
    for command in raw:
        if not isinstance(command, str):
            raise TypeError(f"{fname}: {name} holds a {type(command).__name__}, not str")
        normalized = " ".join(command.split())
        if normalized:
            out.append(normalized)
    return out


def _jaccard(sa: set[str] | frozenset[str], sb: set[str] | frozenset[str]) -> float:
    if not sa and not sb:
        return 1.0
    inter = len(sa & sb)
    return inter / (len(sa) + len(sb) - inter)


def _lcs(a: list[str], b: list[str]) -> int:
    """Length of the longest common subsequence: Hyyrö's bit-parallel rule on Python ints."""
    if not a or not b:
        return 0
    masks: dict[str, int] = {}
    for i, x in enumerate(a):
        masks[x] = masks.get(x, 0) | (1 << i)
    full = (1 << len(a)) - 1
    v = full
    for y in b:
        m = masks.get(y)
        if m:
            u = v & m
            v = ((v + u) | (v - u)) & full
    return len(a) - v.bit_count()


def _order(a: list[str], b: list[str]) -> float:
    longest = max(len(a), len(b))
    if longest == 0:
        return 1.0
    # rapidfuzz's exact arithmetic: 1 - distance / max, which can differ from LCS / max in
    # the last bit; matching it keeps the oracle test exact.
    return 1.0 - (longest - _lcs(a, b)) / longest


def command_jaccard(a: Item, b: Item, *, skip_first: int = 0) -> float:
    """Jaccard index of the sets of normalised, non-blank commands; 1.0 when both are empty."""
    skip = _check_skip(skip_first, "command_jaccard")
    return _jaccard(
        set(_commands(a, skip, "command_jaccard", "a")),
        set(_commands(b, skip, "command_jaccard", "b")),
    )


def command_order_similarity(a: Item, b: Item, *, skip_first: int = 0) -> float:
    """Normalised LCS of the two command sequences: ``LCS / max(len)``; 1.0 when both are empty."""
    skip = _check_skip(skip_first, "command_order_similarity")
    return _order(
        _commands(a, skip, "command_order_similarity", "a"),
        _commands(b, skip, "command_order_similarity", "b"),
    )


def _all(items: object, skip: int, fname: str) -> list[list[str]]:
    if isinstance(items, str) or not isinstance(items, Sequence):
        raise TypeError(f"{fname}: items must be a sequence, got {type(items).__name__}")
    return [_commands(item, skip, fname, f"items[{i}]") for i, item in enumerate(items)]


def pairwise_jaccard(items: Sequence[Item], *, skip_first: int = 0) -> list[list[float]]:
    """All-pairs ``command_jaccard``: a symmetric ``len(items)`` square matrix."""
    skip = _check_skip(skip_first, "pairwise_jaccard")
    sets = [frozenset(c) for c in _all(items, skip, "pairwise_jaccard")]
    n = len(sets)
    out = [[1.0] * n for _ in range(n)]
    for i in range(n):
        row = out[i]
        for j in range(i + 1, n):
            row[j] = out[j][i] = _jaccard(sets[i], sets[j])
    return out


def pairwise_order_similarity(items: Sequence[Item], *, skip_first: int = 0) -> list[list[float]]:
    """All-pairs ``command_order_similarity``: a symmetric ``len(items)`` square matrix."""
    skip = _check_skip(skip_first, "pairwise_order_similarity")
    seqs = _all(items, skip, "pairwise_order_similarity")
    n = len(seqs)
    out = [[1.0] * n for _ in range(n)]
    for i in range(n):
        row = out[i]
        for j in range(i + 1, n):
            row[j] = out[j][i] = _order(seqs[i], seqs[j])
    return out
