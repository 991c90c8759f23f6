"""``python -m rsr_async analyze``: a run (or another tool's results) → the paper's tables
and figures, and one self-contained ``report.html``.

::

    python -m rsr_async analyze RUN_DIR [--out DIR] [--subset-key metadata.KEY] [--k K]
    python -m rsr_async analyze --results FILE.jsonl --out DIR
    python -m rsr_async analyze --harbor-jobs DIR --out DIR
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from ..errors import ConfigError
from .report import render_markdown, write_analysis
from .rollouts import Rollout, TaskInfo, read_results_jsonl
from .tables import AnalysisInput, coverage_table, tasks_with_rollouts

__all__ = ["configure", "external_input", "main"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Write every table (Markdown, CSV, JSON) and figure (PNG) of a run, and report.html."
    )
    parser.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="a run directory of this engine")
    parser.add_argument("--out", metavar="DIR", help="output directory (default: RUN_DIR/analysis)")
    parser.add_argument("--subset-key", metavar="metadata.KEY",
                        help="task metadata key whose value names a task's subset (Table 1)")
    parser.add_argument("--results", metavar="FILE.jsonl",
                        help="analyse another tool's results (rows of task, harness, attempt, reward ...)")
    parser.add_argument("--harbor-jobs", metavar="DIR",
                        help="analyse Harbor job directories (their trials' result.json)")
    parser.add_argument("--k", type=int, help="k of pass@k (default: the run's attempts)")
    parser.add_argument("--no-figures", action="store_true", help="write the tables only")


def external_input(rollouts: list[Rollout], known: dict[str, TaskInfo], origin: str, k: int | None) -> AnalysisInput:
    """An :class:`AnalysisInput` for results that did not come from this engine: harnesses
    in the order they first appear, k defaults to the most attempts any (task, harness) has."""
    per_pair = Counter((r.task, r.harness) for r in rollouts)
    return AnalysisInput(
        rollouts=rollouts,
        tasks=tasks_with_rollouts(rollouts, known),
        harnesses=list(dict.fromkeys(r.harness for r in rollouts)),
        k=k or max(per_pair.values(), default=1),
        origin=origin,
    )


def main(args: argparse.Namespace) -> int:
    sources = [s for s in (args.run_dir, args.results, args.harbor_jobs) if s]
    if len(sources) != 1:
        raise ConfigError("analyze: give exactly one of RUN_DIR, --results FILE or --harbor-jobs DIR")
    if args.k is not None and args.k < 1:
        raise ConfigError(f"--k: expected a number >= 1, got {args.k}")
    if args.run_dir:
        from .runs import read_run

        data = read_run(args.run_dir, subset_key=args.subset_key, k=args.k)
        out = Path(args.out) if args.out else Path(args.run_dir) / "analysis"
    else:
        if args.subset_key:
            raise ConfigError("--subset-key: only for run directories (results name their own subset)")
        if not args.out:
            raise ConfigError("--out: required with --results and --harbor-jobs")
        out = Path(args.out)
        if args.results:
            rollouts, known = read_results_jsonl(args.results)
            origin = f"results file {Path(args.results).resolve()}"
        else:
            from .harbor import read_harbor_jobs

            rollouts, known = read_harbor_jobs(args.harbor_jobs)
            origin = f"Harbor jobs {Path(args.harbor_jobs).resolve()}"
        data = external_input(rollouts, known, origin, args.k)
    report = write_analysis(data, out, figures=not args.no_figures)
    print(render_markdown(coverage_table(data), scripted=data.scripted))
    print(f"analysis: {report.out}/report.html", file=sys.stderr)
    print(f"tables ({len(report.tables)}): {', '.join(report.tables)}", file=sys.stderr)
    if report.figures_skipped:
        print(f"figures: none ({report.figures_skipped})", file=sys.stderr)
    else:
        print(f"figures ({len(report.figures)}): {', '.join(report.figures)}", file=sys.stderr)
    for name, why in report.figures_not_drawn.items():
        print(f"figure {name}: not drawn ({why})", file=sys.stderr)
    for name, error in report.figures_failed.items():
        print(f"warning: figure {name} could not be drawn: {error}", file=sys.stderr)
    return 0
