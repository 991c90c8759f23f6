"""Native hot path vs its pure-Python twin vs the best library baseline, on realistic episodes.

``python -m rsr_async bench native [--json FILE] [--repeat N] [--episodes N] [--pairs N]``

Episodes are generated from a fixed seed: 50 model turns, ~10 KB terminal observations
(listings, logs, pytest output with colour codes, hashes, paths), harness confirmations,
a few state-machine turns and repeated screens. Every baseline's answer is checked equal
to the native one before it is timed, so each ratio compares the same work. Timings are
medians of ``--repeat`` runs, single-threaded.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any

import _common
import ahocorasick
from _leakbase import regex_set_leaks
from rapidfuzz.distance import LCSseq
from rapidfuzz.process import cdist

from rsr_async._native import compress as native_compress
from rsr_async._native import compress_py as pure_compress
from rsr_async._native import leakscan as native_leakscan
from rsr_async._native import leakscan_py as pure_leakscan
from rsr_async._native import similarity as native_similarity
from rsr_async._native import similarity_py as pure_similarity
from rsr_async.schema import Command, Message, Trajectory

TURNS = 50
OBSERVATION_BYTES = 10_000

_WORDS = (
    "total drwxr-xr-x root users config build src tests data output error warning info "
    "debug passed failed collected items module function return value checksum request "
    "response server client worker queue task job status ready done listening port"
).split()
_COMMON = ["ls", "ls -la", "pwd", "git status", "git diff --stat", "python3 -m pytest -q tests/"]
_TEMPLATES = [
    "ls -la {dir}",
    "cat {file}",
    "cd {dir} && ls",
    "grep -rn '{word}' {dir}",
    "python3 -m pytest -q {test} -k {word}",
    "head -n {n} {file}",
    "sed -i 's/{word}/{word2}/g' {file}",
    "python3 {file} --seed {n}",
    "wc -l {file}",
    "cat {file} | grep -n {word}",
    "chmod +x {file}",
    "echo '{token}' > {file}",
    "sqlite3 {db} 'select count(*) from {word};'",
    "curl -s localhost:{port}/{word}",
    "find {dir} -name '*.{ext}'",
]


class _TaskFiles:
    """The paths and names one task's commands keep coming back to."""

    def __init__(self, rng: random.Random) -> None:
        self.dirs = [f"/app/{rng.choice(_WORDS)}" for _ in range(3)]
        self.files = [
            f"{rng.choice(self.dirs)}/{rng.choice(_WORDS)}_{rng.randint(1, 99)}."
            f"{rng.choice(['py', 'csv', 'json', 'txt', 'sh'])}"
            for _ in range(8)
        ]
        self.words = rng.sample(_WORDS, 8)
        self.port = rng.choice([8000, 8080, 5000, 3000])


def _command(rng: random.Random, task: _TaskFiles) -> str:
    if rng.random() < 0.3:
        return rng.choice(_COMMON)
    return rng.choice(_TEMPLATES).format(
        dir=rng.choice(task.dirs),
        file=rng.choice(task.files),
        test=f"tests/test_{rng.choice(task.words)}.py",
        word=rng.choice(task.words),
        word2=rng.choice(task.words),
        n=rng.choice([10, 20, 50, 100, 2048, 31337]),
        token=f"{rng.getrandbits(64):016x}",
        db=f"{task.dirs[0]}/data.db",
        port=task.port,
        ext=rng.choice(["py", "log", "conf"]),
    )


def _turn_keystrokes(rng: random.Random, task: _TaskFiles) -> list[str]:
    if rng.random() < 0.06:
        return [f"statem {rng.choice(['cur', 'next', 'goto verify'])}\n"]
    return [_command(rng, task) + "\n" for _ in range(rng.randint(1, 3))]


def _line(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.25:
        return (
            f"-rw-r--r-- 1 root root {rng.randint(100, 99999):>6} Nov {rng.randint(1, 28):>2} "
            f"{rng.randint(0, 23):02}:{rng.randint(0, 59):02} "
            f"\x1b[01;34m{rng.choice(_WORDS)}_{rng.randint(1, 999)}.{rng.choice(['py', 'csv', 'log', 'json'])}\x1b[0m"
        )
    if kind < 0.45:
        return (
            f"tests/test_{rng.choice(_WORDS)}.py::test_{rng.choice(_WORDS)}_{rng.randint(1, 99)} "
            f"\x1b[32mPASSED\x1b[0m \x1b[36m[{rng.randint(1, 100):>3}%]\x1b[0m"
        )
    if kind < 0.65:
        return (
            f"2026-11-{rng.randint(1, 28):02}T{rng.randint(0, 23):02}:{rng.randint(0, 59):02}:"
            f"{rng.randint(0, 59):02}.{rng.randint(0, 999):03}Z {rng.choice(['INFO', 'WARN', 'DEBUG'])} "
            f"{' '.join(rng.choice(_WORDS) for _ in range(6))} id={rng.getrandbits(48):x} "
            f"latency={rng.random() * 100:.3f}ms"
        )
    if kind < 0.8:
        return f"/usr/lib/python3/dist-packages/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}_{rng.randint(1, 50)}.py"
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 12)))


def _observation(rng: random.Random, command: str) -> str:
    lines = [f"root@sandbox:/app# {command}"]
    size = len(lines[0])
    while size < OBSERVATION_BYTES:
        line = _line(rng)
        lines.append(line)
        size += len(line) + 1
    lines.append("root@sandbox:/app# ")
    return "\n".join(lines)


def make_episode(rng: random.Random, index: int) -> Trajectory:
    """One 50-turn episode with ~10 KB observations and a little harness noise."""
    instruction = (
        f"Fix the failing service in /app. The report lives at /app/reports/summary_{index}.txt; "
        "tests are run with `python3 -m pytest -q tests/`. Listen on port 8080. "
        + " ".join(rng.choice(_WORDS) for _ in range(120))
    )
    messages = [Message(role="user", content=instruction, origin="task")]
    task = _TaskFiles(rng)
    previous = ""
    for turn in range(1, TURNS + 1):
        keystrokes = _turn_keystrokes(rng, task)
        commands = tuple(Command(keystrokes=k, duration=0.5) for k in keystrokes)
        analysis = " ".join(rng.choice(_WORDS) for _ in range(40))
        plan = " ".join(rng.choice(_WORDS) for _ in range(30))
        reply = f'{{"analysis": "{analysis}", "plan": "{plan}", "commands": [], "task_complete": false}}'
        messages.append(
            Message(role="assistant", content=reply, origin="model", turn=turn, commands=commands)
        )
        if previous and rng.random() < 0.1:
            observation = previous  # the screen did not change
        else:
            observation = _observation(rng, keystrokes[0].strip())
        previous = observation
        messages.append(Message(role="user", content=observation, origin="env", turn=turn))
        if rng.random() < 0.08:
            messages.append(
                Message(
                    role="user",
                    content="Are you sure you want to mark the task complete? failed, try again",
                    origin="harness",
                    turn=turn,
                )
            )
    return Trajectory(task=f"task-{index}", harness="terminus2", messages=messages)


def _command_lists(count: int, runs_per_task: int = 10) -> list[list[str]]:
    """Keystrokes of ``count`` 50-turn episodes: ``runs_per_task`` runs of each task."""
    rng = random.Random(7)
    out = []
    task = _TaskFiles(rng)
    for i in range(count):
        if i % runs_per_task == 0:
            task = _TaskFiles(rng)
        out.append([k for _ in range(TURNS) for k in _turn_keystrokes(rng, task)])
    return out


def _episode_io(episode: Trajectory) -> tuple[str, list[str], list[str]]:
    """(instruction, actions, context) as ``scan_leaks`` takes them."""
    instruction = ""
    actions: list[str] = []
    context: list[str] = []
    seen: list[str] = []
    for message in episode.messages:
        if message.origin == "task":
            instruction += message.content
        elif message.origin == "env":
            seen.append(message.content)
        elif message.origin == "model":
            actions.append("\n".join(c.keystrokes for c in message.commands))
            context.append("\n".join(seen))
            seen = []
    return instruction, actions, context


# Library baselines, each giving the same answer as the native function.

def _rapidfuzz_order(normalized: list[list[str]]) -> Any:
    import numpy as np  # cdist's own dependency, loaded on first use like cdist does

    return cdist(
        normalized, normalized, scorer=LCSseq.normalized_similarity, workers=1, dtype=np.float64
    )


def _frozenset_jaccard(normalized: list[list[str]]) -> list[list[float]]:
    sets = [frozenset(c) for c in normalized]
    n = len(sets)
    out = [[1.0] * n for _ in range(n)]
    for i in range(n):
        a = sets[i]
        for j in range(i + 1, n):
            b = sets[j]
            inter = len(a & b)
            union = len(a) + len(b) - inter
            out[i][j] = out[j][i] = inter / union if union else 1.0
    return out


def _ahocorasick_leaks(instruction: str, actions: list[str], context: list[str]) -> int:
    """Substring semantics, offline: one automaton of every action's candidates, one pass
    over the known text recording where each value is first seen. A different (looser)
    rule than the token match, so it is reported beside the baseline, not as it."""
    automaton = ahocorasick.Automaton()
    candidates = []
    for turn, action in enumerate(actions):
        for position, word, kind in pure_leakscan._words(action):
            candidates.append((turn, position, word, kind))
            automaton.add_word(word, word)
    if not candidates:
        return 0
    automaton.make_automaton()
    first_seen: dict[str, int] = {}
    for index, text in enumerate([instruction, *context]):
        for _, value in automaton.iter(text):
            first_seen.setdefault(value, index)
    leaks = 0
    for turn, _position, word, _kind in candidates:
        if first_seen.get(word, len(actions) + 1) > turn:  # context[turn] is index turn + 1
            leaks += 1
    return leaks


def _warm(native: Callable[[], object], pure: Callable[[], object], repeat: int) -> dict[str, float]:
    """One episode, over and over: its text stays in cache, as right after it is decoded.
    The sweep over every episode streams megabytes through a shared cache instead."""
    native_s = _common.median_cpu(native, max(repeat, 9))
    pure_s = _common.median_cpu(pure, max(repeat, 3))
    return {"native_s": native_s, "pure_s": pure_s, "speedup": pure_s / native_s}


def _measure(
    name: str,
    native: Callable[[], object],
    pure: Callable[[], object],
    baseline: tuple[str, Callable[[], object]] | None,
    repeat: int,
    pure_repeat: int,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    native_s = _common.median_cpu(native, repeat)
    pure_s = _common.median_cpu(pure, pure_repeat)
    row: dict[str, Any] = {
        "function": name,
        "native_s": native_s,
        "pure_s": pure_s,
        "speedup": pure_s / native_s,
        "baseline": None,
        "baseline_s": None,
        "vs_baseline": None,
    }
    if baseline is not None:
        label, fn = baseline
        baseline_s = _common.median_cpu(fn, repeat)
        row.update(baseline=label, baseline_s=baseline_s, vs_baseline=baseline_s / native_s)
    row.update(extra or {})
    return row


def main(argv: list[str]) -> int:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=12, help="50-turn episodes to generate")
    p.add_argument("--pairs", type=int, default=300, help="command lists in the all-pairs runs")
    args = p.parse_args(argv)
    # numpy (under cdist, imported on first use) must not start a BLAS thread pool that
    # spins beside single-threaded measurements.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rng = random.Random(2026)
    episodes = [make_episode(rng, i) for i in range(args.episodes)]
    repeat = max(args.repeat, 1)
    pure_repeat = max(1, min(repeat, 3))
    results = []

    # Compression.
    def run_native_compress() -> object:
        return [native_compress.compress_trajectory(e) for e in episodes]

    def run_pure_compress() -> object:
        return [pure_compress.compress_trajectory(e) for e in episodes]

    assert run_native_compress() == run_pure_compress()
    results.append(
        _measure(
            "compress_trajectory", run_native_compress, run_pure_compress, None, repeat,
            pure_repeat,
            {
                "episodes": len(episodes),
                "note": "the pure twin is the re + bytes baseline",
                "warm_episode": _warm(
                    lambda: native_compress.compress_trajectory(episodes[0]),
                    lambda: pure_compress.compress_trajectory(episodes[0]),
                    repeat,
                ),
            },
        )
    )

    # Similarity, all pairs.
    lists = _command_lists(args.pairs)
    normalized = [[" ".join(c.split()) for c in cmds if c.split()] for cmds in lists]
    native_order = native_similarity.pairwise_order_similarity(lists)
    assert native_order == pure_similarity.pairwise_order_similarity(lists)
    assert native_order == _rapidfuzz_order(normalized).tolist()
    results.append(
        _measure(
            "pairwise_order_similarity",
            lambda: native_similarity.pairwise_order_similarity(lists),
            lambda: pure_similarity.pairwise_order_similarity(lists),
            ("rapidfuzz cdist LCSseq.normalized_similarity, workers=1, pre-normalised input",
             lambda: _rapidfuzz_order(normalized)),
            repeat, pure_repeat,
            {"items": len(lists), "mean_commands": sum(map(len, normalized)) / len(normalized)},
        )
    )
    native_jaccard = native_similarity.pairwise_jaccard(lists)
    assert native_jaccard == pure_similarity.pairwise_jaccard(lists) == _frozenset_jaccard(normalized)
    results.append(
        _measure(
            "pairwise_jaccard",
            lambda: native_similarity.pairwise_jaccard(lists),
            lambda: pure_similarity.pairwise_jaccard(lists),
            ("frozenset intersections, pre-normalised input", lambda: _frozenset_jaccard(normalized)),
            repeat, pure_repeat, {"items": len(lists)},
        )
    )

    # Leak scanning.
    io = [_episode_io(e) for e in episodes]

    def run_native_leaks() -> list[Any]:
        return [native_leakscan.scan_leaks(a, c, instruction=i) for i, a, c in io]

    def run_pure_leaks() -> list[Any]:
        return [pure_leakscan.scan_leaks(a, c, instruction=i) for i, a, c in io]

    native_leaks = run_native_leaks()
    assert native_leaks == run_pure_leaks()
    assert native_leaks == [regex_set_leaks(i, a, c) for i, a, c in io]
    aho_s = _common.median_cpu(lambda: [_ahocorasick_leaks(i, a, c) for i, a, c in io], repeat)
    row = _measure(
        "scan_leaks",
        run_native_leaks,
        run_pure_leaks,
        ("compiled regex + set (same second pass)",
         lambda: [regex_set_leaks(i, a, c) for i, a, c in io]),
        repeat, pure_repeat,
        {
            "episodes": len(io),
            "leaks_found": sum(map(len, native_leaks)),
            "ahocorasick_s": aho_s,
            "vs_ahocorasick": None,
            "ahocorasick_note": "substring rule, offline (whole episode known up front): not the same answer",
            "warm_episode": _warm(
                lambda: native_leakscan.scan_leaks(io[0][1], io[0][2], instruction=io[0][0]),
                lambda: pure_leakscan.scan_leaks(io[0][1], io[0][2], instruction=io[0][0]),
                repeat,
            ),
        },
    )
    row["vs_ahocorasick"] = aho_s / row["native_s"]
    results.append(row)

    _common.emit(
        {"benchmark": "native", "clock": "process CPU time, median", "repeat": repeat,
         "results": results},
        args.json,
    )
    return 0
