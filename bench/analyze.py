"""``analyze`` on a paper-scale store: 100,000 episodes, every table and figure.

``python -m rsr_async bench analyze [--json FILE] [--repeat N] [--episodes N] [--keep DIR]``

A synthetic run directory is written through the real :class:`~rsr_async.engine.Store`
(the generation is not timed): 60% discover episodes (3 harnesses, 10 attempts per task,
1,000 tasks per 30,000 episodes), 40% rewrite executions (4 runbooks × 4 executions per
source) with their critiques and audits; each trajectory has 8-24 model turns with 1-3
commands and ~1 KB observations, like a Terminus 2 episode. Then, ``--repeat`` times:

- ``analyze_s``: the real CLI (``python -m rsr_async analyze RUN --out ...``) in a fresh
  subprocess, end to end (read, tables, figures, report), native kernels;
- ``analyze_pure_s``: the same with ``RSR_NO_EXTENSIONS=1`` (the pure-Python twins), the
  baseline for the native all-pairs similarity;
- in-process phases: ``read_light_s`` (rollouts from the store's light column) against
  ``read_full_s`` (the same fields decoded from the full result blobs, the baseline),
  ``similarity_s`` native against ``similarity_pure_s``.

The floor (issue 14): ``analyze_s`` < 30 s at 100,000 episodes on this machine.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import emit, parser  # noqa: E402

from rsr_async._native import similarity as native_similarity  # noqa: E402
from rsr_async._native import similarity_py as pure_similarity  # noqa: E402
from rsr_async.analysis import tables as tables_module  # noqa: E402
from rsr_async.analysis.runs import read_run, store_rollouts  # noqa: E402
from rsr_async.engine import Job, RunReader, Store  # noqa: E402
from rsr_async.schema import (  # noqa: E402
    AuditResult,
    AuditSpec,
    Command,
    CritiqueResult,
    EpisodeResult,
    EpisodeSpec,
    EpisodeStyle,
    JobKey,
    Message,
    Task,
    Trajectory,
    Usage,
    Verdict,
)

HARNESSES = ("terminus2", "statem", "rsrt")
ATTEMPTS = 10
DOMAINS = ("files", "networking", "security", "data", "build", "git", "databases", "ml")
_WORDS = ("total drwxr-xr-x root config build src tests data output error warning info "
          "passed failed collected module function return value checksum request").split()
_COMMANDS = ["ls -la", "cat README.md", "pwd", "git status", "python3 -m pytest -q", "make",
             "grep -rn TODO src", "head -n 20 data.csv", "sed -n 1,40p main.py", "pip list",
             "cd /app && ls", "chmod +x run.sh", "./run.sh", "wc -l data.csv", "tail -f log"]


def _trajectory(rng: random.Random, task: str, harness: str) -> tuple[Trajectory, int]:
    turns = rng.randint(8, 24)
    messages = [Message(role="user", content=f"Task: {task}. " + " ".join(rng.choices(_WORDS, k=150)),
                        origin="task")]
    for turn in range(turns):
        commands = tuple(
            Command(keystrokes=rng.choice(_COMMANDS) + (f" {rng.randint(0, 9)}" if rng.random() < 0.3 else "") + "\n",
                    duration=0.1)
            for _ in range(rng.randint(1, 3))
        )
        reply = '{"analysis": "' + " ".join(rng.choices(_WORDS, k=40)) + '", "commands": []}'
        messages.append(Message(role="assistant", content=reply, origin="model", turn=turn, commands=commands,
                                usage=Usage(prompt_tokens=1200 * (turn + 1), completion_tokens=120,
                                            cached_tokens=1100 * turn, requests=1)))
        lines = [" ".join(rng.choices(_WORDS, k=12)) for _ in range(rng.randint(4, 20))]
        messages.append(Message(role="user", content="New Terminal Output:\n" + "\n".join(lines),
                                origin="env", turn=turn))
    return Trajectory(task=task, harness=harness, model="bench", messages=messages), turns


def generate(run_dir: Path, episodes: int, seed: int = 0) -> dict[str, int]:
    """Write the synthetic run (see the module docstring); returns what it holds."""
    rng = random.Random(seed)
    discover_n = int(episodes * 0.6)
    tasks_n = max(1, discover_n // (len(HARNESSES) * ATTEMPTS))
    pool = [_trajectory(rng, f"task-{i:05d}", HARNESSES[i % 3]) for i in range(64)]
    counts = {"discover": 0, "execute": 0, "critique": 0, "audit": 0}
    config = {"run": {"attempts": ATTEMPTS, "harnesses": list(HARNESSES)}}
    tasks = [
        Task(name=f"task-{i:05d}", path=f"/tasks/task-{i:05d}", instruction="bench",
             category=DOMAINS[i % len(DOMAINS)], metadata={"source": f"suite-{i % 3}"})
        for i in range(tasks_n)
    ]
    sources: list[JobKey] = []
    with Store.open(run_dir, config=config, events=False) as store:
        for task in tasks:
            solve = rng.random() * 0.5
            for harness in HARNESSES:
                for attempt in range(ATTEMPTS):
                    key = JobKey(stage="discover", task=task.name, harness=harness, attempt=attempt)
                    trajectory, turns = rng.choice(pool)
                    passed = rng.random() < solve
                    status = "succeeded" if passed else ("infra_error" if rng.random() < 0.01 else "failed")
                    style = EpisodeStyle(model_turns=turns, commands=2 * turns,
                                         exploration_share=rng.random(), claims=1 + (rng.random() < 0.2))
                    result = EpisodeResult(key=key, status=status, reward=1.0 if passed else 0.0,  # type: ignore[arg-type]
                                           rewards={"reward": 1.0 if passed else 0.0},
                                           trajectory=trajectory, turns=turns, style=style)
                    store.put_result(result, job=Job.episode(EpisodeSpec(key=key, task=task, harness=harness)),
                                     wait=False)
                    counts["discover"] += 1
                    if passed:
                        sources.append(key)
        target = episodes - counts["discover"]
        by_name = {t.name: t for t in tasks}
        for source in sources:
            if counts["execute"] >= target:
                break
            for runbook in range(4):
                rid = f"r{runbook}d0"
                ckey = JobKey(stage="critique", task=source.task, harness=source.harness,
                              attempt=source.attempt, runbook=rid)
                store.put_result(CritiqueResult(key=ckey, status="succeeded",
                                                verdict=Verdict(subject=rid, accepted=True, stage="judge")),
                                 wait=False)
                counts["critique"] += 1
                for execution in range(4):
                    key = JobKey(stage="execute", task=source.task, harness=source.harness,
                                 attempt=source.attempt, runbook=rid, execution=execution)
                    trajectory, turns = rng.choice(pool)
                    passed = rng.random() < 0.86
                    result = EpisodeResult(key=key, status="succeeded" if passed else "failed",
                                           reward=1.0 if passed else 0.0, trajectory=trajectory, turns=turns)
                    store.put_result(result, job=Job.episode(EpisodeSpec(key=key, task=by_name[source.task])),
                                     wait=False)
                    counts["execute"] += 1
                    if passed:
                        akey = JobKey(stage="audit", task=source.task, harness=source.harness,
                                      attempt=source.attempt, runbook=rid, execution=execution)
                        spec = AuditSpec(key=akey, task=by_name[source.task], execution_key=str(key),
                                         trajectory=Trajectory(task=source.task, harness="terminus2"))
                        verdict = Verdict(subject=str(key), accepted=rng.random() < 0.9, stage="audit")
                        store.put_result(AuditResult(key=akey, status="succeeded", verdict=verdict),
                                         job=Job.of(spec), wait=False)
                        counts["audit"] += 1
        store.flush(timeout=None)
    counts["tasks"] = tasks_n
    counts["episodes"] = counts["discover"] + counts["execute"]
    return counts


def _cli(run_dir: Path, out: Path, *, pure: bool) -> float:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent) + os.pathsep + env.get("PYTHONPATH", "")
    if pure:
        env["RSR_NO_EXTENSIONS"] = "1"
    else:
        env.pop("RSR_NO_EXTENSIONS", None)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "rsr_async", "analyze", str(run_dir), "--out", str(out),
                           "--subset-key", "metadata.source"], env=env, capture_output=True, text=True,
                          timeout=900)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"analyze failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return elapsed


def _read_full(run_dir: Path) -> int:
    """Baseline: the same rollout fields decoded from the full (compressed) result blobs."""
    from rsr_async.analysis import runs

    with RunReader.open_readonly(run_dir) as store:
        return sum(1 for _ in store.outputs(runs._EpisodeDetails, stage="discover", light=False))


def _read_light(run_dir: Path) -> int:
    with RunReader.open_readonly(run_dir) as store:
        return len(store_rollouts(store))


def _similarity(run_dir: Path, kernels: Any) -> float:
    """similarity_table with ``kernels`` behind the facade it imports them from."""
    import rsr_async._native as facade

    data = read_run(run_dir)

    original = (facade.pairwise_jaccard, facade.pairwise_order_similarity)
    facade.pairwise_jaccard = kernels.pairwise_jaccard  # type: ignore[assignment]
    facade.pairwise_order_similarity = kernels.pairwise_order_similarity  # type: ignore[assignment]
    try:
        start = time.perf_counter()
        tables_module.similarity_table(data)
        return time.perf_counter() - start
    finally:
        facade.pairwise_jaccard, facade.pairwise_order_similarity = original


def main(argv: list[str]) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=100_000, help="episodes in the synthetic store")
    p.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it (reused when present)")
    p.set_defaults(repeat=3)
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="rsr-bench-analyze-"))
    run_dir = Path(args.keep) if args.keep else work / "run"
    try:
        start = time.perf_counter()
        if (run_dir / "run.db").exists():
            counts: dict[str, Any] = {"reused": str(run_dir)}
        else:
            counts = generate(run_dir, args.episodes)
        generate_s = time.perf_counter() - start
        results: dict[str, list[float]] = {k: [] for k in (
            "analyze_s", "analyze_pure_s", "read_light_s", "read_full_s", "similarity_s", "similarity_pure_s")}
        for i in range(args.repeat):
            results["analyze_s"].append(_cli(run_dir, work / f"out-{i}", pure=False))
            results["analyze_pure_s"].append(_cli(run_dir, work / f"pure-{i}", pure=True))
            for name, fn in (("read_light_s", _read_light), ("read_full_s", _read_full)):
                t = time.perf_counter()
                fn(run_dir)
                results[name].append(time.perf_counter() - t)
            results["similarity_s"].append(_similarity(run_dir, native_similarity))
            results["similarity_pure_s"].append(_similarity(run_dir, pure_similarity))
        med = {k: statistics.median(v) for k, v in results.items()}
        emit({
            "benchmark": "analyze",
            "episodes": args.episodes,
            "store": counts,
            "generate_s": round(generate_s, 1),
            "store_mb": round((run_dir / "run.db").stat().st_size / 1e6, 1),
            **{k: round(v, 3) for k, v in med.items()},
            "runs": {k: [round(x, 3) for x in v] for k, v in results.items()},
            "analyze_floor_s": 30.0,
            "analyze_under_floor": med["analyze_s"] < 30.0,
            "analyze_pure_over_native": round(med["analyze_pure_s"] / med["analyze_s"], 2),
            "read_full_over_light": round(med["read_full_s"] / med["read_light_s"], 2),
            "similarity_pure_over_native": round(med["similarity_pure_s"] / med["similarity_s"], 1),
        }, args.json)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0
