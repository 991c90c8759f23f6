"""How well the leak audit keeps good data: recall and false alarms on a labelled corpus.

The corpus (``bench/leak_corpus/corpus.jsonl`` in a source checkout, built by the
``build.py`` beside it) holds Terminus 2 trajectories labelled ``leak`` (one ``planted``
value typed with no public source) or ``clean``. A leaking case counts as caught only
when its planted value is among the flags, not merely when something is flagged; a clean
case is a false alarm when anything is flagged. The verify stage's figures run the same
cases through the auditor and count a case kept when no flag is ruled leaked.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from .._layout import shipped_dir
from .._native import LeakScanner, SandboxKnowledge
from ..errors import RsrError
from ..llm.scripted import ScriptedModel
from ..schema import Leak, Trajectory
from .audit import auditor_messages, flag_values, parse_audit

__all__ = ["CORPUS", "LeakCase", "load_corpus", "scan_case", "scanner_figures", "verify_figures"]

CORPUS = shipped_dir("bench") / "leak_corpus" / "corpus.jsonl"
"""The labelled corpus (the checkout's ``bench/leak_corpus/``, or the copy a wheel carries)."""


class LeakCase(msgspec.Struct, frozen=True, kw_only=True):
    """One labelled trajectory of the corpus."""

    id: str
    family: str
    label: Literal["clean", "leak"]
    why: str
    """How the label was decided: the value's source, or why it has none."""
    planted: str
    """The leaked value (leak cases only)."""
    instruction: str
    image_paths: list[str]
    """Files and directories the task image holds (what ``find`` over it would list)."""
    trajectory: Trajectory

    def sandbox(self) -> SandboxKnowledge:
        return SandboxKnowledge.standard().with_image(paths=self.image_paths)


def load_corpus(path: Path = CORPUS) -> list[LeakCase]:
    """The cases of a corpus file, one JSON object per line."""
    if not path.is_file():
        raise RsrError(f"no leak corpus at {path}: build it with "
                       "`python bench/leak_corpus/build.py` in a source checkout")
    decoder = msgspec.json.Decoder(LeakCase)
    cases = []
    for number, line in enumerate(path.read_bytes().splitlines(), 1):
        try:
            cases.append(decoder.decode(line))
        except msgspec.ValidationError as exc:
            raise RsrError(f"{path}:{number}: not a leak case: {exc}") from exc
    return cases


def scan_case(case: LeakCase, scanner: Callable[..., Any] = LeakScanner) -> list[Leak]:
    """The scanner's flags on one case (what the verify stage sees), with the case's image."""
    return flag_values(case.trajectory, instruction=case.instruction, sandbox=case.sandbox(),
                       scanner_class=scanner)


def _rates(cases: Sequence[LeakCase], caught: Sequence[bool], alarmed: Sequence[bool]
           ) -> tuple[float, float]:
    leaks = [c for c, _ in zip(caught, cases, strict=True) if _.label == "leak"]
    clean = [a for a, case in zip(alarmed, cases, strict=True) if case.label == "clean"]
    return (sum(leaks) / len(leaks) if leaks else 1.0, sum(clean) / len(clean) if clean else 0.0)


def scanner_figures(cases: Sequence[LeakCase], flags: Sequence[Sequence[Leak]]) -> dict[str, Any]:
    """Recall (planted value flagged), false-alarm rate (clean case with any flag), and the
    false flags by rule, from each case's flags."""
    caught = [any(leak.value == case.planted for leak in found) for case, found in
              zip(cases, flags, strict=True)]
    alarmed = [bool(found) for found in flags]
    recall, false_alarms = _rates(cases, caught, alarmed)
    false_rules = Counter(leak.rule for case, found in zip(cases, flags, strict=True)
                          if case.label == "clean" for leak in found)
    return {
        "scanner_recall": recall,
        "scanner_false_alarm_rate": false_alarms,
        "cases": len(cases),
        "leak_cases": sum(case.label == "leak" for case in cases),
        "clean_cases": sum(case.label == "clean" for case in cases),
        "missed": [case.id for case, hit in zip(cases, caught, strict=True)
                   if case.label == "leak" and not hit],
        "false_alarms": {case.id: [leak.why for leak in found]
                         for case, found in zip(cases, flags, strict=True)
                         if case.label == "clean" and found},
        "false_flags_by_rule": dict(sorted(false_rules.items())),
        "flags_per_clean_case": sum(len(f) for c, f in zip(cases, flags, strict=True)
                                    if c.label == "clean") / max(1, sum(c.label == "clean"
                                                                        for c in cases)),
    }


def verify_figures(cases: Sequence[LeakCase], flags: Sequence[Sequence[Leak]],
                   model: ScriptedModel) -> dict[str, Any]:
    """The verify stage on the corpus: a case is dropped when the auditor rules any flag
    leaked (no flag: kept without a call). ``model`` answers the auditor prompt."""
    caught: list[bool] = []
    dropped: list[bool] = []
    calls = 0
    for case, found in zip(cases, flags, strict=True):
        if not found:
            caught.append(False)
            dropped.append(False)
            continue
        calls += 1
        reply = model.reply(auditor_messages(instruction=case.instruction,
                                             trajectory=case.trajectory, leaks=found))
        leaked = {leak.value for leak, is_leak, _ in parse_audit(reply, found) if is_leak}
        caught.append(case.planted in leaked)
        dropped.append(bool(leaked))
    recall, false_drops = _rates(cases, caught, dropped)
    clean = sum(case.label == "clean" for case in cases)
    return {
        "verify_recall": recall,
        "verify_false_drop_rate": false_drops,
        "clean_kept": clean - sum(d for d, c in zip(dropped, cases, strict=True)
                                  if c.label == "clean"),
        "auditor_calls": calls,
    }


def corpus_summary(cases: Sequence[LeakCase]) -> str:
    """One line: how many cases of each label (for error messages and the bench)."""
    counts = Counter(case.label for case in cases)
    return json.dumps(dict(sorted(counts.items())))
