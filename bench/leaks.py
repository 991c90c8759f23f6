"""The leak audit on the labelled corpus: recall, false alarms, and the scanner's speed.

``python -m rsr_async bench leaks [--json FILE] [--repeat N] [--episodes N]``

Quality, on ``bench/leak_corpus/corpus.jsonl`` (labels: its README): the scanner's
recall (a leaking case counts only when its planted value is flagged) and false-alarm
rate (a clean case with any flag), for the compiled scanner and its pure twin (their
flags are checked equal), then the whole verify stage (scanner, then the auditor ruling
each flag; a case is dropped when any flag is ruled leaked). The auditor here is the
scripted stand-in, a test double: its figures show the plumbing, never a model's quality.

Speed, in the same run: the corpus, and ``--episodes`` generated 50-turn episodes of
~10 KB screens (``bench native``'s), scanned by the compiled scanner (both passes
compiled: ``leakscan.pyx``, ``leakjudge.pyx``), its pure twin (``leakscan_py.py``,
``leakjudge_py.py``) and a compiled-regex + set baseline; medians of ``--repeat`` runs of
process CPU time. The baseline stands for "a library first pass": it runs the same
second pass as the compiled scanner (``leakjudge``), so ``vs_regex_set`` compares first
passes with the second held equal. ``first_pass`` gives the same three with the second
pass off (``derive=False``: every unseen literal flagged), where the speed comes from.
Exits 1 when a floor is missed (recall 1.0, false alarms at most 0.15; on the generated
episodes, both passes, 20x the pure twin and faster than regex + set), naming it in
``floors_missed``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import _common
from _leakbase import regex_set_leaks
from native import _episode_io, make_episode

from rsr_async._native import leakscan as native_leakscan
from rsr_async._native import leakscan_py as pure_leakscan
from rsr_async.llm.scripted import ScriptedModel
from rsr_async.rsr.leakeval import (
    CORPUS,
    LeakCase,
    load_corpus,
    scan_case,
    scanner_figures,
    verify_figures,
)
from rsr_async.schema import Leak

RECALL_FLOOR = 1.0
FALSE_ALARM_CEILING = 0.15
VS_PURE_FLOOR = 20.0
"""The compiled scan (both passes) against its pure twin, on the generated episodes."""
VS_REGEX_SET_FLOOR = 1.0


def _corpus_io(case: LeakCase) -> tuple[str, list[str], list[str]]:
    """(instruction, actions, context) of a case, as ``scan_leaks`` and the baseline take."""
    actions: list[str] = []
    context: list[str] = []
    seen: list[str] = []
    for message in case.trajectory.messages:
        if message.origin in ("task", "env"):
            seen.append(message.content)
        elif message.origin == "model" and message.commands:
            actions.append("\n".join(c.keystrokes for c in message.commands))
            context.append("\n".join(seen))
            seen = []
    return case.instruction, actions, context


def _speed(name: str, io: list[tuple[str, list[str], list[str]]], sandboxes: list[Any],
           repeat: int) -> dict[str, Any]:
    def native() -> list[list[Leak]]:
        return [native_leakscan.scan_leaks(a, c, instruction=i, sandbox=s)
                for (i, a, c), s in zip(io, sandboxes, strict=True)]

    def pure() -> list[list[Leak]]:
        return [pure_leakscan.scan_leaks(a, c, instruction=i, sandbox=s)
                for (i, a, c), s in zip(io, sandboxes, strict=True)]

    def baseline() -> list[list[Leak]]:
        return [regex_set_leaks(i, a, c, s) for (i, a, c), s in zip(io, sandboxes, strict=True)]

    found = native()
    assert found == pure() == baseline(), f"{name}: the three scanners disagree"
    native_s = _common.median_cpu(native, max(repeat, 5))
    pure_s = _common.median_cpu(pure, max(1, min(repeat, 3)))
    baseline_s = _common.median_cpu(baseline, max(1, min(repeat, 3)))
    def first_pass(module: Any) -> Callable[[], list[list[Leak]]]:
        def run() -> list[list[Leak]]:
            return [_first_pass(module.LeakScanner(i, sandbox=s, derive=False), a, c)
                    for (i, a, c), s in zip(io, sandboxes, strict=True)]
        return run

    def baseline_first() -> list[list[Leak]]:
        return [regex_set_leaks(i, a, c, s, derive=False)
                for (i, a, c), s in zip(io, sandboxes, strict=True)]

    first = {"native": first_pass(native_leakscan), "pure": first_pass(pure_leakscan),
             "regex_set": baseline_first}
    unseen = first["native"]()
    assert unseen == first["pure"]() == first["regex_set"](), f"{name}: first passes disagree"
    first_s = {kind: _common.median_cpu(fn, max(repeat, 5) if kind == "native"
                                        else max(1, min(repeat, 3)))
               for kind, fn in first.items()}
    return {"workload": name, "episodes": len(io), "flags": sum(map(len, found)),
            "native_s": native_s, "pure_s": pure_s, "regex_set_s": baseline_s,
            "vs_pure": pure_s / native_s, "vs_regex_set": baseline_s / native_s,
            "first_pass": {"unseen": sum(map(len, unseen)), "native_s": first_s["native"],
                           "pure_s": first_s["pure"], "regex_set_s": first_s["regex_set"],
                           "vs_pure": first_s["pure"] / first_s["native"],
                           "vs_regex_set": first_s["regex_set"] / first_s["native"]}}


def _first_pass(scanner: Any, actions: list[str], context: list[str]) -> list[Leak]:
    """``scan_leaks`` with a scanner made with ``derive=False``."""
    out: list[Leak] = []
    for turn, (action, seen) in enumerate(zip(actions, context, strict=True)):
        scanner.observe(seen)
        out.extend(scanner.scan(action, turn))
    return out


def main(argv: list[str]) -> int:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=12, help="generated 50-turn episodes to time")
    args = p.parse_args(argv)
    repeat = max(args.repeat, 1)
    cases = load_corpus(CORPUS)

    native_flags = [scan_case(case, native_leakscan.LeakScanner) for case in cases]
    pure_flags = [scan_case(case, pure_leakscan.LeakScanner) for case in cases]
    assert native_flags == pure_flags, "the compiled scanner and its pure twin disagree"
    scanner = scanner_figures(cases, native_flags)
    verify = verify_figures(cases, native_flags, ScriptedModel({}))

    corpus_io = [_corpus_io(case) for case in cases]
    rng = random.Random(2026)
    generated_io = [_episode_io(make_episode(rng, i)) for i in range(args.episodes)]
    speed = [
        _speed("corpus", corpus_io, [case.sandbox() for case in cases], repeat),
        _speed("generated 50-turn episodes", generated_io, [None] * len(generated_io), repeat),
    ]
    floors = {"scanner_recall": RECALL_FLOOR, "scanner_false_alarm_rate": FALSE_ALARM_CEILING,
              "vs_pure": VS_PURE_FLOOR, "vs_regex_set": VS_REGEX_SET_FLOOR}
    generated = speed[1]
    missed = [name for name, ok in (
        ("scanner_recall", scanner["scanner_recall"] >= RECALL_FLOOR),
        ("scanner_false_alarm_rate", scanner["scanner_false_alarm_rate"] <= FALSE_ALARM_CEILING),
        ("vs_pure", generated["vs_pure"] >= VS_PURE_FLOOR),
        ("vs_regex_set", generated["vs_regex_set"] > VS_REGEX_SET_FLOOR),
    ) if not ok]
    passed = not missed
    _common.emit({
        "benchmark": "leaks",
        "corpus": str(CORPUS.relative_to(CORPUS.parents[3])),
        "scanner_recall": scanner["scanner_recall"],
        "scanner_false_alarm_rate": scanner["scanner_false_alarm_rate"],
        "floors": floors,
        "floors_met": passed,
        "floors_missed": missed,
        "scanner": scanner,
        "verify_stage": {"auditor": "scripted stand-in (a test double, not a model)", **verify},
        "speed": speed,
        "clock": "process CPU time, median",
        "repeat": repeat,
    }, args.json)
    return 0 if passed else 1
