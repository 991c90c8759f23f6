"""The figures: axes labelled, a figure not drawn says why, the stand-in mark on every PNG
of a scripted run, the UpSet plot with a harness that solved nothing."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from rsr_async.analysis.commands import external_input
from rsr_async.analysis.plots import FIGURES, SCRIPTED_MARK, FigureSkipped, draw_figures
from rsr_async.analysis.report import write_analysis
from rsr_async.analysis.rollouts import Rollout
from rsr_async.analysis.runs import read_run
from rsr_async.analysis.tables import AnalysisInput, all_tables
from tests.analysis import scenario

pytest.importorskip("matplotlib")
pytest.importorskip("upsetplot")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> AnalysisInput:
    return read_run(scenario.write_run(tmp_path_factory.mktemp("plots") / "run"))


def _input(outcomes: dict[tuple[str, str], str]) -> AnalysisInput:
    rollouts = [
        Rollout(task=task, harness=harness, attempt=i,
                status="succeeded" if letter == "P" else "failed",
                reward=1.0 if letter == "P" else 0.0)
        for (task, harness), letters in outcomes.items()
        for i, letter in enumerate(letters)
    ]
    return external_input(rollouts, {}, "test", None)


def test_every_figure_has_both_axes_labelled(data: AnalysisInput) -> None:
    import matplotlib.pyplot as plt

    tables = {t.name: t for t in all_tables(data)}
    for name, draw in FIGURES.items():
        if name == "upset":
            continue  # upsetplot's own matrix layout: its totals and bars name themselves
        fig = draw(tables)
        try:
            for ax in fig.axes:
                if ax.get_label() == "<colorbar>":
                    continue
                assert ax.get_xlabel() and ax.get_ylabel(), (name, ax.get_xlabel(), ax.get_ylabel())
        finally:
            plt.close(fig)


def test_upset_with_a_harness_that_solved_nothing(tmp_path: Path) -> None:
    two = _input({("t1", "a"): "PP", ("t2", "a"): "FP", ("t1", "b"): "FF", ("t2", "b"): "FF"})
    drawn, failed, not_drawn = draw_figures(all_tables(two), tmp_path)
    assert failed == {}
    assert "upset" not in not_drawn and (tmp_path / "upset.png").is_file()
    for path in drawn:  # not a scripted run: no mark
        assert SCRIPTED_MARK.encode() not in path.read_bytes()


def test_a_figure_not_drawn_says_why_in_the_report(tmp_path: Path) -> None:
    one = msgspec.structs.replace(_input({("t1", "a"): "PF", ("t2", "a"): "FF"}), scripted=True)
    report = write_analysis(one, tmp_path / "out")
    assert report.figures  # coverage and domains: each with the stand-in's mark
    for name in report.figures:
        assert SCRIPTED_MARK.encode() in (tmp_path / "out" / "figures" / f"{name}.png").read_bytes()
    assert "one harness (a)" in report.figures_not_drawn["upset"]
    assert "no rewrites" in report.figures_not_drawn["similarity"]
    page = (tmp_path / "out" / "report.html").read_text()
    assert "Figure upset not drawn: one harness (a): no intersections to show." in page
    with pytest.raises(FigureSkipped, match="no harness solved any task"):
        FIGURES["upset"]({t.name: t for t in all_tables(_input({("t1", "a"): "FF"}))})


def test_every_png_of_a_scripted_run_carries_the_mark(data: AnalysisInput, tmp_path: Path) -> None:
    marked, failed, _ = draw_figures(all_tables(data), tmp_path, scripted=True)
    assert failed == {} and len(marked) == len(FIGURES)
    for path in marked:
        assert SCRIPTED_MARK.encode() in path.read_bytes()  # PNG tEXt Description, and drawn
