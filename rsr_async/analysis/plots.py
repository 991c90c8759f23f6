"""The report's figures, drawn from its tables (so a figure never disagrees with a table).

Needs the ``analysis`` extra (matplotlib, upsetplot); :func:`plots_available` says whether
it is installed, and ``analyze`` writes the tables without figures when it is not.
Drawing uses matplotlib's non-interactive Agg backend and touches no display.

Each figure function returns its matplotlib figure, or raises :class:`FigureSkipped` with
why the input has nothing to draw (the report says so). :func:`draw_figures` saves them,
and on the figures of a scripted stand-in's run stamps :data:`SCRIPTED_MARK` across the
image, so a PNG alone can never pass for a model's results.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .tables import ALL_SUBSET, Table

__all__ = ["FIGURES", "SCRIPTED_MARK", "FigureSkipped", "draw_figures", "plots_available"]

SCRIPTED_MARK = "SCRIPTED STAND-IN MODEL (test double): not a model's results"


class FigureSkipped(Exception):
    """The input has nothing this figure can show; the message says why."""


def plots_available() -> str | None:
    """None when the figures can be drawn, else what is missing."""
    missing = [m for m in ("matplotlib", "upsetplot") if importlib.util.find_spec(m) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (pip install 'rsr_async[analysis]')"
    return None


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _rows(table: Table) -> list[dict[str, Any]]:
    return [dict(zip(table.columns, row, strict=True)) for row in table.rows]


def upset(tables: dict[str, Table]) -> Any:
    """UpSet plot of the tasks solved by each exact combination of harnesses."""
    table = tables.get("intersections")
    if table is None or not any(r["tasks"] for r in _rows(table)):
        raise FigureSkipped("no harness solved any task")
    # Every harness is a category, also one that solved nothing (its total bar is 0):
    # built from the memberships alone, such a harness would vanish and upsetplot fails
    # on the single category left.
    harnesses = list(dict.fromkeys(h for r in _rows(table) for h in r["harnesses"].split("+")))
    if len(harnesses) < 2:
        raise FigureSkipped(f"one harness ({harnesses[0]}): no intersections to show")
    import pandas as pd
    import upsetplot

    rows = [r for r in _rows(table) if r["tasks"]]
    index = pd.MultiIndex.from_tuples(
        [tuple(h in r["harnesses"].split("+") for h in harnesses) for r in rows], names=harnesses
    )
    series = pd.Series([r["tasks"] for r in rows], index=index)
    plt = _pyplot()
    fig = plt.figure(figsize=(8, 4.5))
    with warnings.catch_warnings():  # upsetplot 0.9 still uses pandas idioms pandas 2.2 deprecates
        warnings.simplefilter("ignore", FutureWarning)
        # show_counts=True fails under matplotlib 3.11 (a text position given as an array):
        # label the bars here instead.
        axes = upsetplot.plot(pd.Series(series), fig=fig, sort_by="cardinality", element_size=None)
    bars = axes["intersections"]
    for container in bars.containers:
        bars.bar_label(container, fontsize=8)
    fig.suptitle("Tasks solved per exact set of harnesses")
    return fig


def coverage_bars(tables: dict[str, Table]) -> Any:
    """Per subset: tasks solved by each harness beside the union."""
    table = tables.get("coverage")
    if table is None or not table.rows:
        raise FigureSkipped("no coverage rows (no graded rollout)")
    rows = _rows(table)
    subsets = list(dict.fromkeys(r["subset"] for r in rows))
    if len(subsets) > 1:
        subsets = [s for s in subsets if s != ALL_SUBSET] + [ALL_SUBSET]
    harnesses = list(dict.fromkeys(r["harness"] for r in rows))
    value = {(r["subset"], r["harness"]): r["solved_rate"] or 0.0 for r in rows}
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(subsets) * len(harnesses) / 2), 4))
    width = 0.8 / len(harnesses)
    for i, harness in enumerate(harnesses):
        xs = [s + i * width for s in range(len(subsets))]
        ys = [value.get((subset, harness), 0.0) for subset in subsets]
        bars = ax.bar(xs, ys, width, label=harness, hatch="//" if harness == "union" else None)
        ax.bar_label(bars, labels=[f"{y:.0%}" for y in ys], fontsize=7)
    ax.set_xticks([s + width * (len(harnesses) - 1) / 2 for s in range(len(subsets))], subsets)
    ax.set_xlabel("subset (tasks' --subset-key value; all: every task)")
    ax.set_ylabel("share of tasks solved")
    ax.set_ylim(0, 1.05)
    ax.set_title("Single harnesses vs their union, per subset")
    ax.legend(fontsize=8)
    return fig


def domain_heatmap(tables: dict[str, Table]) -> Any:
    """Share solved per domain × harness, a union column, the strongest harness boxed,
    each cell annotated with its share and the harness's exclusive solves."""
    table = tables.get("domains")
    if table is None or not table.rows:
        raise FigureSkipped("no domain rows (no task has a graded rollout)")
    rows = _rows(table)
    harnesses = [c[: -len("_share")] for c in table.columns if c.endswith("_share") and c != "union_share"]
    columns = [*harnesses, "union"]
    grid = [[r[f"{h}_share"] for h in harnesses] + [r["union_share"]] for r in rows]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.4 * len(columns) + 2.5, 0.45 * len(rows) + 1.5))
    image = ax.imshow(grid, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(columns)), columns)
    ax.set_yticks(range(len(rows)), [f"{r['domain']} ({r['tasks']})" for r in rows])
    for y, row in enumerate(rows):
        strongest = set((row["strongest"] or "").split("="))
        for x, name in enumerate(columns):
            share = grid[y][x]
            text = f"{share:.0%}"
            if name != "union":
                text += f"\n+{row[f'{name}_only']} only"
            ax.text(x, y, text, ha="center", va="center", fontsize=7,
                    color="black" if share > 0.6 else "white")
            if name in strongest:
                ax.add_patch(plt.Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False,
                                           edgecolor="red", linewidth=2))
    fig.colorbar(image, ax=ax, label="share solved")
    ax.set_xlabel("harness")
    ax.set_ylabel("domain (tasks)")
    ax.set_title("Solved share per domain (red box: strongest single harness)")
    return fig


def similarity_bars(tables: dict[str, Table]) -> Any:
    """Same- vs different-runbook similarity, with and without the first two turns."""
    table = tables.get("similarity")
    if table is None:
        raise FigureSkipped("no rewrites in this input")
    if not any(r["pairs"] for r in _rows(table)):
        raise FigureSkipped("no pair of successful rewrites of one task")
    rows = _rows(table)
    metrics = ["jaccard", "order_similarity", "jaccard_without_first_2_turns",
               "order_similarity_without_first_2_turns"]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.38
    for i, row in enumerate(rows):
        ys = [row[m] or 0.0 for m in metrics]
        bars = ax.bar([x + i * width for x in range(len(metrics))], ys, width, label=row["pairs_of"])
        ax.bar_label(bars, labels=[f"{y:.3f}" for y in ys], fontsize=7)
    ax.set_xticks([x + width / 2 for x in range(len(metrics))],
                  ["Jaccard", "order", "Jaccard\n(no first 2)", "order\n(no first 2)"])
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("metric (definitions in the similarity table)")
    ax.set_ylabel("mean similarity over pairs (0 to 1)")
    ax.set_title("Command similarity of rewrite pairs")
    ax.legend(fontsize=8)
    return fig


def rewrite_pass_rates(tables: dict[str, Table]) -> Any:
    """Histogram of per-source rewrite pass rates."""
    table = tables.get("rewrite_sources")
    if table is None:
        raise FigureSkipped("no rewrites in this input")
    rates = [r["pass_rate"] for r in _rows(table) if r["pass_rate"] is not None]
    if not rates:
        raise FigureSkipped("no source has a graded rewrite execution")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(rates, bins=[i / 10 for i in range(11)], edgecolor="black")
    ax.set_xlabel("rewrite pass rate of a source")
    ax.set_ylabel("sources")
    ax.set_title(f"Rewrite pass rate per source ({len(rates)} sources)")
    return fig


FIGURES: dict[str, Callable[[dict[str, Table]], Any]] = {
    "upset": upset,
    "coverage_by_subset": coverage_bars,
    "domain_heatmap": domain_heatmap,
    "similarity": similarity_bars,
    "rewrite_pass_rates": rewrite_pass_rates,
}
"""Figure name (its PNG's stem) → what draws it (:class:`FigureSkipped`: nothing to draw)."""


def _stamp(fig: Any) -> None:
    """The stand-in mark, across the middle of the image and in its top-left corner."""
    fig.text(0.5, 0.5, SCRIPTED_MARK, ha="center", va="center", rotation=20, fontsize=13,
             color="red", alpha=0.35, weight="bold", zorder=1000)
    fig.text(0.01, 0.995, SCRIPTED_MARK, ha="left", va="top", fontsize=8, color="red",
             weight="bold", zorder=1000)


def draw_figures(
    tables: list[Table], out_dir: Path, *, scripted: bool = False
) -> tuple[list[Path], dict[str, str], dict[str, str]]:
    """Every figure the tables allow, as ``out_dir/<name>.png``; the figures that failed
    to draw, with why (a plotting library's bug must not cost the tables); and the
    figures skipped, with why (nothing to draw). ``scripted``: stamp every figure with
    :data:`SCRIPTED_MARK`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    by_name = {t.name: t for t in tables}
    written: list[Path] = []
    failed: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for name, draw in FIGURES.items():
        path = out_dir / f"{name}.png"
        fig = None
        try:
            fig = draw(by_name)
            metadata = {"Software": "rsr_async analyze"}
            if scripted:
                _stamp(fig)
                metadata["Description"] = SCRIPTED_MARK  # a PNG tEXt chunk, for tools
            fig.savefig(path, dpi=110, bbox_inches="tight", metadata=metadata)
            written.append(path)
        except FigureSkipped as why:
            skipped[name] = str(why)
        except Exception as exc:  # noqa: BLE001 - reported with the figure's name
            failed[name] = f"{type(exc).__name__}: {exc}"
            path.unlink(missing_ok=True)
            _pyplot().close("all")  # what the failed drawing had opened
        finally:
            if fig is not None:
                _pyplot().close(fig)
    return written, failed, skipped
