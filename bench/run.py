"""The main job as a benchmark: ``python -m rsr_async run`` at high concurrency.

``python -m rsr_async bench run [--concurrency 512] [--attempts 15] [--repeat 1]
[--baseline] [--json FILE]``

Each repetition runs the real CLI in a subprocess on the bundled suite (real Docker
sandboxes, the embedded SGLang simulator with the scripted stand-in model: a TEST
DOUBLE, so pass rates here are not a model's results) in a fresh run directory, then
reads ``summary.json`` and the store. Reported per run and as medians:

- ``episodes_per_min``: episodes finished per minute of wall time (the CLI's own
  figure, from start-up to the summary, image builds excluded when cached);
- ``agent_steps_per_s``: model turns across all episodes per second of wall time;
- ``peak_sandboxes``: most containers alive at once;
- ``cached_share``: prompt tokens served from the simulators' radix caches;
- ``infra_errors``.

``--baseline`` also runs the same command with ``--no-prewarm`` (starts on demand,
rate-limited) in the same session, and reports the ratios prewarm / on-demand.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import cli_run, emit, parser  # noqa: E402

from rsr_async.engine.store import Store  # noqa: E402


def _one(concurrency: int, attempts: int, extra: list[str]) -> dict[str, Any]:
    args = ["--concurrency", str(concurrency), "--attempts", str(attempts), *extra]
    with cli_run(args, bench="run", timeout_s=3600) as (run_dir, wall, summary):
        with Store.open_readonly(run_dir) as store:
            steps = sum(
                sum(1 for m in r.trajectory.messages if m.origin == "model")
                for r in store.results(stage="discover")
                if r.trajectory is not None
            )
    return {
        "episodes": summary["episodes"],
        "episodes_per_min": summary["episodes_per_min"],
        "agent_steps": steps,
        "agent_steps_per_s": steps / summary["wall_s"],
        "peak_sandboxes": summary["peak_sandboxes"],
        "cached_share": summary["cached_share"],
        "infra_errors": summary["infra_errors"],
        "wall_s": summary["wall_s"],
        "process_wall_s": wall,
    }


def _medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def main(argv: list[str]) -> int:
    p = parser(__doc__ or "")
    p.set_defaults(repeat=1)
    p.add_argument("--concurrency", type=int, default=512)
    p.add_argument("--attempts", type=int, default=15, help="per task (36 bundled tasks)")
    p.add_argument("--baseline", action="store_true",
                   help="also run with --no-prewarm and report ratios")
    args = p.parse_args(argv)
    runs, baseline = [], []
    for _ in range(args.repeat):  # alternate, so drift in the machine's load hits both alike
        runs.append(_one(args.concurrency, args.attempts, []))
        if args.baseline:
            baseline.append(_one(args.concurrency, args.attempts, ["--no-prewarm"]))
    result: dict[str, Any] = {
        "benchmark": "run",
        "concurrency": args.concurrency,
        "attempts": args.attempts,
        "model": "scripted stand-in behind the embedded simulator (a test double)",
        "runs": runs,
        "median": _medians(runs),
    }
    if baseline:
        base = _medians(baseline)
        result["baseline"] = {"name": "same command with --no-prewarm", "runs": baseline,
                              "median": base}
        result["ratio"] = {
            key: result["median"][key] / base[key]
            for key in ("episodes_per_min", "agent_steps_per_s", "peak_sandboxes")
            if base[key]
        }
    emit(result, args.json)
    return 0
