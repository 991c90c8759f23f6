"""Pure-Python twin of ``leakscan.pyx``: same functions, same answers.

A *leak candidate* is a literal in a model action that the model could not have read:
it appears neither in the public instruction nor in any observation shown before the
action. The rules, shared by both implementations:

Words
    Maximal runs of ``[A-Za-z0-9_./+~-]`` (ASCII only; anything else separates words),
    trimmed of leading ``.``/``-`` and trailing ``.``/``/``/``-``. A word is a candidate
    of one kind, tried in this order:

    - ``path``: contains ``/``, at least 4 characters;
    - ``number``: only digits and dots, and either has a dot or at least 3 significant
      digits (leading and trailing zeros do not count: ``1024`` is, ``1000`` is not);
    - ``hex`` / ``token``: at least 8 characters of ``[A-Za-z0-9+_-]`` with at least one
      digit and one letter (``hex`` when every character is a hex digit);
    - ``identifier``: at least 10 characters of ``[A-Za-z0-9_.-]`` starting with a letter
      or ``_``.

Quoted strings
    In an action, text between a ``'`` or ``"`` and the next same quote on the same line,
    at least 4 characters and no ASCII whitespace: kind ``quoted``.

Known
    A word candidate is known when the same candidate word was extracted from the known
    text (token match, so ``1234`` is not known from ``12345``). A quoted candidate is
    known when it is a known word or a substring of any known text. The known text is the
    instruction plus every observation seen so far; it only grows. A text equal to the
    last one observed (a screen that did not change) adds nothing and is not kept twice.

Each leaked value is reported once per episode, at its first use: ``Leak(value, kind,
turn, position, rule, why)`` with ``position`` the index (in code points) in the action
text; ``rule`` and ``why`` come from the second pass (``leakjudge_py.py``), which also
decides which first-pass candidates are derivable after all.
Candidates of one action are taken in position order, words before a quoted string
starting at the same index.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..schema import Leak
from .leakjudge_py import Judge
from .leakrules import SandboxKnowledge

__all__ = ["LeakScanner", "SandboxKnowledge", "scan_leaks"]

_WORD = re.compile(r"[A-Za-z0-9_./+~-]+")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_DIGITS = frozenset("0123456789")
_DIGIT_DOT = _DIGITS | {"."}
_HEX = _DIGITS | frozenset("abcdefABCDEF")
_TOKEN = _LETTERS | _DIGITS | frozenset("+_-")
_IDENT = _LETTERS | _DIGITS | frozenset("_.-")
_SPACE = frozenset(" \t\n\r\x0b\x0c")


def _classify(word: str) -> str | None:
    length = len(word)
    if "/" in word:
        return "path" if length >= 4 else None
    chars = set(word)
    if chars <= _DIGIT_DOT:
        if "." in chars:
            return "number"
        return "number" if len(word.strip("0")) >= 3 else None
    if length >= 8 and chars <= _TOKEN and chars & _DIGITS and chars & _LETTERS:
        return "hex" if chars <= _HEX else "token"
    if length >= 10 and (word[0] in _LETTERS or word[0] == "_") and chars <= _IDENT:
        return "identifier"
    return None


def _words(text: str) -> list[tuple[int, str, str]]:
    """``(position, word, kind)`` of every candidate word, in order."""
    out: list[tuple[int, str, str]] = []
    for match in _WORD.finditer(text):
        raw = match.group()
        left = raw.lstrip(".-")
        word = left.rstrip("./-")
        if len(word) < 3:
            continue
        kind = _classify(word)
        if kind is not None:
            out.append((match.start() + len(raw) - len(left), word, kind))
    return out


def _quoted(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    i = 0
    n = len(text)
    while i < n:
        quote = text[i]
        if quote == "'" or quote == '"':
            end = text.find(quote, i + 1)
            newline = text.find("\n", i + 1)
            if end != -1 and (newline == -1 or end < newline):
                content = text[i + 1 : end]
                if len(content) >= 4 and not _SPACE.intersection(content):
                    out.append((i + 1, content))
                i = end + 1
                continue
        i += 1
    return out


class LeakScanner:
    """Incremental leak scan of one episode: ``observe`` what the model saw, ``scan`` what it did.

    The candidates this module finds go through the second pass, ``leakjudge_py`` (what the
    ``sandbox`` holds, what the model could derive); ``derive=False`` skips it, for callers
    that want every unseen literal (the critic's runbook checks).
    """

    def __init__(
        self,
        instruction: str = "",
        *,
        sandbox: SandboxKnowledge | None = None,
        derive: bool = True,
    ) -> None:
        self._known: set[str] = set()
        self._texts: list[str] = []
        self._judge = Judge(self._texts, sandbox, derive)
        self._reported: set[str] = set()
        self._quoted: dict[str, int] = {}
        self.observe(instruction)

    def observe(self, text: str) -> None:
        """Add text the model has now seen (an observation, the instruction)."""
        if not isinstance(text, str):
            raise TypeError(f"LeakScanner.observe: expected str, got {type(text).__name__}")
        if not text or (self._texts and text == self._texts[-1]):
            return  # nothing, or the screen did not change: nothing new to know
        self._texts.append(text)
        # Every trimmed word, candidate or not: cheaper than classifying each, and the
        # same answers, since only candidates are ever looked up.
        self._known.update([w.lstrip(".-").rstrip("./-") for w in _WORD.findall(text)])

    def _known_quoted(self, value: str) -> bool:
        # Texts only grow: a value found once stays known (-1), and one not found in the
        # first k texts need only be looked for in the newer ones next time.
        searched = self._quoted.get(value, 0)
        if searched < 0:
            return True
        if any(value in text for text in self._texts[searched:]):
            self._quoted[value] = -1
            return True
        self._quoted[value] = len(self._texts)
        return False

    def scan(self, action: str, turn: int = 0) -> list[Leak]:
        """Leaks in one action (its keystrokes), first uses only; ``turn`` is copied into each."""
        if not isinstance(action, str):
            raise TypeError(f"LeakScanner.scan: expected str, got {type(action).__name__}")
        if not isinstance(turn, int) or isinstance(turn, bool):
            raise TypeError(f"LeakScanner.scan: turn must be an int, got {type(turn).__name__}")
        found: list[tuple[int, int, str, str]] = [(p, 0, w, k) for p, w, k in _words(action)]
        found.extend((p, 1, value, "quoted") for p, value in _quoted(action))
        found.sort()
        unseen: list[tuple[int, str, str]] = []
        for position, order, value, kind in found:
            if value in self._reported or value in self._known:
                continue
            if order == 1 and self._known_quoted(value):
                continue
            self._reported.add(value)
            unseen.append((position, value, kind))
        if not unseen:
            self._judge.note(action)
            return []
        return self._judge.judge(action, turn, unseen)


def scan_leaks(
    actions: Sequence[str],
    context: Sequence[str],
    *,
    instruction: str = "",
    sandbox: SandboxKnowledge | None = None,
) -> list[Leak]:
    """Leaks of one episode: ``context[i]`` is what was shown just before ``actions[i]``."""
    for name, value in (("actions", actions), ("context", context)):
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise TypeError(
                f"scan_leaks: {name} must be a sequence of str, got {type(value).__name__}"
            )
    if len(actions) != len(context):
        raise ValueError(
            f"scan_leaks: {len(actions)} actions but {len(context)} contexts; "
            "pass one context (possibly empty) per action"
        )
    if not isinstance(instruction, str):
        raise TypeError(f"scan_leaks: instruction must be str, got {type(instruction).__name__}")
    scanner = LeakScanner(instruction, sandbox=sandbox)
    out: list[Leak] = []
    for turn, (action, seen) in enumerate(zip(actions, context, strict=True)):
        scanner.observe(seen)
        out.extend(scanner.scan(action, turn))
    return out
