"""The main job as a benchmark: ``python -m rsr_async run`` at high concurrency.

``python -m rsr_async bench run [--concurrency 512] [--attempts 15] [--tasks N]
[--repeat 1] [--baseline] [--against CHECKOUT] [--json FILE]``

Each repetition runs the real CLI in a subprocess on the bundled suite (real Docker
sandboxes, the embedded SGLang simulator with the scripted stand-in model: a TEST
DOUBLE, so pass rates here are not a model's results) in a fresh run directory, then
reads ``summary.json`` and the store. Reported per run and as medians:

- ``episodes_per_min``: episodes (Harbor's trials) finished per minute of wall time
  (the CLI's own figure, from start-up to the summary, image builds excluded when cached);
- ``episodes_per_process_min``: the same over the whole CLI process (interpreter start
  and shutdown included): what Harbor's trials/min is compared with;
- ``cpu_per_episode_s``: CPU seconds per episode, ``machine`` (every core, everything
  running: the Docker daemon, the containers, and any other user of a shared machine),
  ``own_tree`` (the CLI and the simulators it started), ``docker_daemons`` and
  ``containers`` (see ``_common.cpu_delta``);
- ``phases_mean_s``: where an episode's time went, by phase (``summary.json``'s
  ``phases``: sandbox, shell, model, commands, verification, teardown …);
- ``agent_steps_per_s``, ``peak_sandboxes``, ``cached_share``, ``infra_errors``.

``--tasks N`` takes the first N bundled tasks (by name) instead of all 36: the side by
side with Harbor uses ``--tasks 8 --attempts 4 --concurrency 16``.

``--against CHECKOUT`` runs the same command from another source checkout (e.g. a
``git worktree`` of main), alternating with this one run by run so that drift in a
shared machine's load hits both alike, and reports both and the ratios this / that.
``--baseline`` instead runs this checkout with ``--no-prewarm`` as the other side.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import REPO, cli_run, emit, parser  # noqa: E402

from rsr_async.engine.reader import RunReader  # noqa: E402

_SUITE = REPO / "rsr_async" / "tasks" / "bundled"


def _one(args_: list[str], checkout: Path | None) -> dict[str, Any]:
    with cli_run(args_, bench="run", timeout_s=3600, checkout=checkout) as (run_dir, wall, summary):
        with RunReader.open_readonly(run_dir) as store:
            steps = sum(
                sum(1 for m in r.trajectory.messages if m.origin == "model")
                for r in store.results(stage="discover")
                if r.trajectory is not None
            )
    episodes = max(1, summary["episodes_this_run"])
    phases = summary.get("phases") or {}
    return {
        "episodes": summary["episodes"],
        "episodes_per_min": round(summary["episodes_per_min"], 2),
        "episodes_per_process_min": round(summary["episodes_this_run"] / (wall / 60), 2),
        "cpu_per_episode_s": {k: round(v / episodes, 4) for k, v in summary["cpu"].items()},
        "phases_mean_s": phases.get("mean_s", {}),
        "phases_p90_s": phases.get("p90_s", {}),
        "prewarmed": phases.get("prewarmed", 0),
        "agent_steps": steps,
        "agent_steps_per_s": round(steps / summary["wall_s"], 3),
        "peak_sandboxes": summary["peak_sandboxes"],
        "cached_share": summary["cached_share"],
        "infra_errors": summary["infra_errors"],
        "succeeded": summary["succeeded"],
        "wall_s": round(summary["wall_s"], 2),
        "open_s": summary.get("open_s", 0.0),
        "prewarm_s": summary.get("prewarm_s", 0.0),
        "process_wall_s": round(wall, 2),
        "load_before": summary["load_before"],
    }


def _median(values: list[Any]) -> Any:
    if isinstance(values[0], dict):
        keys = [k for k in values[0] if all(k in v for v in values)]
        return {k: _median([v[k] for v in values]) for k in keys}
    return round(statistics.median(values), 4)


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {key: _median([r[key] for r in runs]) for key in runs[0]}


def _ratios(this: dict[str, Any], that: dict[str, Any]) -> dict[str, Any]:
    """this / that for throughput, that / this for costs (above 1: this is better)."""
    out: dict[str, Any] = {}
    for key in ("episodes_per_min", "episodes_per_process_min", "agent_steps_per_s"):
        if that[key]:
            out[key] = round(this[key] / that[key], 3)
    out["cpu_per_episode_less"] = {
        k: round(that["cpu_per_episode_s"][k] / v, 3)
        for k, v in this["cpu_per_episode_s"].items() if v > 0 and k in that["cpu_per_episode_s"]
    }
    return out


def main(argv: list[str]) -> int:
    p = parser(__doc__ or "")
    p.set_defaults(repeat=1)
    p.add_argument("--concurrency", type=int, default=512)
    p.add_argument("--attempts", type=int, default=15, help="per task")
    p.add_argument("--tasks", type=int, default=0, help="only the first N bundled tasks (0: all 36)")
    p.add_argument("--baseline", action="store_true",
                   help="also run with --no-prewarm and report ratios")
    p.add_argument("--against", metavar="CHECKOUT",
                   help="also run another source checkout's code, alternating, and report ratios")
    args = p.parse_args(argv)
    if args.baseline and args.against:
        p.error("--baseline and --against are two different comparisons: give one")
    extra: list[str] = []
    if args.tasks:
        names = sorted(d.name for d in _SUITE.iterdir() if (d / "instruction.md").exists()
                       or (d / "task.yaml").exists())
        if args.tasks > len(names):
            p.error(f"--tasks {args.tasks}: the bundled suite has {len(names)} tasks")
        for name in names[: args.tasks]:
            extra += ["--dataset", str(_SUITE / name)]
    other = Path(args.against).resolve() if args.against else None
    if other is not None and not (other / "rsr_async").is_dir():
        p.error(f"--against {args.against}: not a source checkout (no rsr_async/ in it)")
    command = ["--concurrency", str(args.concurrency), "--attempts", str(args.attempts), *extra]
    runs: list[dict[str, Any]] = []
    baseline: list[dict[str, Any]] = []
    for i in range(args.repeat):  # alternate, so drift in the machine's load hits both alike
        pair: list[tuple[list[dict[str, Any]], list[str], Path | None]] = [(runs, [], None)]
        if args.baseline:
            pair.append((baseline, ["--no-prewarm"], None))
        if other is not None:
            pair.append((baseline, [], other))
        if i % 2:
            pair.reverse()  # ABBA: neither side always goes first
        for into, flags, checkout in pair:
            into.append(_one([*command, *flags], checkout))
            print(f"bench run: {'this' if into is runs else 'other'} side, run {len(into)}: "
                  f"{into[-1]['episodes_per_min']} episodes/min, "
                  f"{into[-1]['cpu_per_episode_s']['machine']} s machine CPU per episode",
                  file=sys.stderr)
    result: dict[str, Any] = {
        "benchmark": "run",
        "concurrency": args.concurrency,
        "attempts": args.attempts,
        "tasks": args.tasks or "all",
        "model": "scripted stand-in behind the embedded simulator (a test double)",
        "runs": runs,
        "median": _medians(runs),
    }
    if baseline:
        base = _medians(baseline)
        name = ("same command with --no-prewarm" if args.baseline
                else f"same command from {other}")
        result["baseline"] = {"name": name, "runs": baseline, "median": base}
        result["ratio"] = _ratios(result["median"], base)
    _print_phases(result)
    emit(result, args.json)
    return 0


def _print_phases(result: dict[str, Any]) -> None:
    """Mean seconds per episode by phase, each side (stderr: the JSON stays on stdout)."""
    sides = [("this", result["median"])]
    if "baseline" in result:
        sides.append(("other", result["baseline"]["median"]))
    names = list(result["median"]["phases_mean_s"] or [])
    if not names:
        return
    print(f"{'mean s per episode':<26} " + "  ".join(f"{side:>8}" for side, _ in sides), file=sys.stderr)
    for name in names:
        cells = [m["phases_mean_s"].get(name) for _, m in sides]
        print(f"{name:<26} " + "  ".join("       -" if c is None else f"{c:8.3f}" for c in cells),
              file=sys.stderr)
    for key in ("episodes_per_min", "episodes_per_process_min"):
        print(f"{key:<26} " + "  ".join(f"{m[key]:8.2f}" for _, m in sides), file=sys.stderr)
    for key in result["median"]["cpu_per_episode_s"]:
        cells = [m["cpu_per_episode_s"].get(key, 0.0) for _, m in sides]
        print(f"{'cpu/ep ' + key:<26} " + "  ".join(f"{c:8.3f}" for c in cells), file=sys.stderr)
