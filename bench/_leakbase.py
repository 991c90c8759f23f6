"""The library baseline for the leak scan: a compiled word regex and a Python set.

Same first-pass rules as ``leakscan`` (its twin's word and quote finders), then the same
second pass as the compiled scanner (``leakjudge.Judge``, the compiled twin of
``leakjudge_py.Judge``; the pure one where the extensions are not built). The baseline
stands for "a library first pass": its answer equals the scanner's, and the ratio against
it compares the first passes, the second being the same code.
"""

from __future__ import annotations

import re

from rsr_async._native import leakscan_py as pure_leakscan
from rsr_async._native.leakrules import SandboxKnowledge
from rsr_async.schema import Leak

try:
    from rsr_async._native.leakjudge import Judge
except ImportError:  # not built: the pure twin gives the same verdicts
    from rsr_async._native.leakjudge_py import Judge  # type: ignore[assignment]

_WORD = re.compile(r"[A-Za-z0-9_./+~-]+")


def regex_set_leaks(instruction: str, actions: list[str], context: list[str],
                    sandbox: SandboxKnowledge | None = None, *, derive: bool = True
                    ) -> list[Leak]:
    """Leaks of one episode, as ``scan_leaks`` finds them (``derive=False``: the first pass
    only, every unseen literal flagged)."""
    known: set[str] = set()
    texts: list[str] = []
    judge = Judge(texts, sandbox, derive)
    reported: set[str] = set()
    out: list[Leak] = []
    if instruction:
        texts.append(instruction)
        known.update([w.lstrip(".-").rstrip("./-") for w in _WORD.findall(instruction)])
    for turn, (action, seen) in enumerate(zip(actions, context, strict=True)):
        if seen and not (texts and seen == texts[-1]):  # as the scanners: a repeat adds nothing
            texts.append(seen)
            known.update([w.lstrip(".-").rstrip("./-") for w in _WORD.findall(seen)])
        found = [(p, 0, w, k) for p, w, k in pure_leakscan._words(action) if w not in known]
        found.extend((p, 1, v, "quoted") for p, v in pure_leakscan._quoted(action))
        found.sort()
        unseen = []
        for position, order, value, kind in found:
            if value in reported:
                continue
            if order == 1 and (value in known or any(value in t for t in texts)):
                continue
            reported.add(value)
            unseen.append((position, value, kind))
        if unseen:
            out.extend(judge.judge(action, turn, unseen))
        else:
            judge.note(action)
    return out
