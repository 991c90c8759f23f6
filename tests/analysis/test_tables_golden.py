"""Golden tables: every value below is worked out by hand from the scenario in
``scenario.py`` (the arithmetic is in the comments), on a real run directory and on the
same results as JSONL. Covers ties for best harness, a harness missing on some tasks,
infrastructure errors and cancelled attempts, and a task with no graded rollout."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rsr_async.analysis.commands import external_input
from rsr_async.analysis.rollouts import read_results_jsonl
from rsr_async.analysis.runs import read_run
from rsr_async.analysis.tables import (
    AnalysisInput,
    Table,
    all_tables,
)

from ..conftest import PYTHON, REPO, run_cli_env
from . import scenario

ALL3 = "terminus2=statem=rsrt"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scenario.write_run(tmp_path_factory.mktemp("golden") / "run")


@pytest.fixture(scope="module")
def from_store(run_dir: Path) -> dict[str, Table]:
    return {t.name: t for t in all_tables(read_run(run_dir, subset_key="metadata.source"))}


@pytest.fixture(scope="module")
def from_jsonl(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Table]:
    path = scenario.write_jsonl(tmp_path_factory.mktemp("jsonl") / "results.jsonl")
    rollouts, known = read_results_jsonl(path)
    data: AnalysisInput = external_input(rollouts, known, "test", None)
    return {t.name: t for t in all_tables(data)}


def records(table: Table) -> list[dict[str, object]]:
    return [dict(zip(table.columns, row, strict=True)) for row in table.rows]


def approx_rows(rows: list[list[object]]) -> list[list[object]]:
    return [[pytest.approx(v) if isinstance(v, float) else v for v in row] for row in rows]


# Solved sets: terminus2 {t1, t3}, statem {t2, t3, t6}, rsrt {t1, t3}; union {t1, t2, t3, t6}.
# Graded rollouts per harness: terminus2 t1 2 + t2 2 + t3 2 + t4 2 + t6 2 = 10 (t5: I, C);
# statem t1 2 + t2 1 (one I) + t3 2 + t4 2 + t6 2 = 9; rsrt t1 2 + t2 2 + t3 2 + t6 2 = 8.
# Subset A = {t1, t2, t6}: terminus2 6, statem 5, rsrt 6 rollouts; solved t2h {t1},
# statem {t2, t6}, rsrt {t1}; union {t1, t2, t6}.
# Subset B = {t3, t4, t5}: terminus2 4, statem 4, rsrt 2; each solves {t3}: a three-way tie.
COVERAGE = [
    # subset, harness, tasks, rollouts, solved, rate, best, gain_abs, gain_rel
    ["A", "terminus2", 3, 6, 1, 1 / 3, None, None, None],
    ["A", "statem", 3, 5, 2, 2 / 3, None, None, None],
    ["A", "rsrt", 3, 6, 1, 1 / 3, None, None, None],
    ["A", "union", 3, 17, 3, 1.0, "statem", 1, 0.5],  # 3 - 2 = 1; 1 / 2
    ["B", "terminus2", 3, 4, 1, 1 / 3, None, None, None],
    ["B", "statem", 3, 4, 1, 1 / 3, None, None, None],
    ["B", "rsrt", 3, 2, 1, 1 / 3, None, None, None],
    ["B", "union", 3, 10, 1, 1 / 3, ALL3, 0, 0.0],
    ["all", "terminus2", 6, 10, 2, 2 / 6, None, None, None],
    ["all", "statem", 6, 9, 3, 3 / 6, None, None, None],
    ["all", "rsrt", 6, 8, 2, 2 / 6, None, None, None],
    ["all", "union", 6, 27, 4, 4 / 6, "statem", 1, 1 / 3],  # 4 - 3; 1 / 3
]

# Graded rollouts per task (t2h, statem, rsrt): t1 (2,2,2), t2 (2,1,2), t3 (2,2,2),
# t4 (2,2,0), t5 (0,0,0: excluded, nothing to compare), t6 (2,2,2) → {t1, t3, t6}.
# A = {t1, t6}: t2h {t1}, statem {t6}, rsrt {t1}: tie at 1, union 2. B = {t3}: all 1.
EQUAL = [
    ["A", "terminus2", 2, 4, 1, 0.5, None, None, None],
    ["A", "statem", 2, 4, 1, 0.5, None, None, None],
    ["A", "rsrt", 2, 4, 1, 0.5, None, None, None],
    ["A", "union", 2, 12, 2, 1.0, ALL3, 1, 1.0],
    ["B", "terminus2", 1, 2, 1, 1.0, None, None, None],
    ["B", "statem", 1, 2, 1, 1.0, None, None, None],
    ["B", "rsrt", 1, 2, 1, 1.0, None, None, None],
    ["B", "union", 1, 6, 1, 1.0, ALL3, 0, 0.0],
    ["all", "terminus2", 3, 6, 2, 2 / 3, None, None, None],
    ["all", "statem", 3, 6, 2, 2 / 3, None, None, None],
    ["all", "rsrt", 3, 6, 2, 2 / 3, None, None, None],
    ["all", "union", 3, 18, 3, 1.0, ALL3, 1, 0.5],
]

# Harnesses solving each task: t1 {t2h, rsrt}, t2 {statem}, t3 {all}, t6 {statem}.
EXCLUSIVITY = [
    ["solved by exactly 1", 2],  # t2, t6
    ["solved by exactly 2", 1],  # t1
    ["solved by exactly all", 1],  # t3
    ["solved by none", 2],  # t4, t5
    ["only terminus2", 0],
    ["only statem", 2],
    ["only rsrt", 0],
]
INTERSECTIONS = [
    ["terminus2+statem+rsrt", 3, 1],
    ["terminus2+statem", 2, 0],
    ["terminus2+rsrt", 2, 1],
    ["statem+rsrt", 2, 0],
    ["terminus2", 1, 0],
    ["statem", 1, 2],
    ["rsrt", 1, 0],
]
# files = {t1, t2, t6}: t2h {t1}, statem {t2, t6}, rsrt {t1}, union all 3; only statem 2.
# net = {t3, t4, t5}: each {t3}; union {t3}; a tie; nobody alone.
DOMAINS = [
    ["files", 3, 1 / 3, 2 / 3, 1 / 3, 1.0, "statem", 0, 2, 0],
    ["net", 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3, ALL3, 0, 0, 0],
]


@pytest.mark.parametrize("source", ["store", "jsonl"])
def test_coverage_equal_rollouts_exclusivity_domains(
    source: str, from_store: dict[str, Table], from_jsonl: dict[str, Table]
) -> None:
    tables = from_store if source == "store" else from_jsonl
    assert tables["coverage"].rows == approx_rows(COVERAGE)
    assert tables["equal_rollouts"].rows == approx_rows(EQUAL)
    assert tables["exclusivity"].rows == EXCLUSIVITY
    assert tables["intersections"].rows == INTERSECTIONS
    assert tables["domains"].rows == approx_rows(DOMAINS)


def test_style_from_the_store(from_store: dict[str, Table]) -> None:
    # terminus2 successes: turns 10, 20, 30 → median 20; explore 5 + 2 + 5 = 12 of 40
    # commands; claims 1, 1, 1; no rejected claim.
    # statem: turns 5, 7, 9, 11 → 8; explore 2 + 2 + 2 + 2 = 8 of 16; state 1 + 2 + 1 + 0
    # = 4 of 16; claims 1, 1, 2, 1 → 1.25.
    # rsrt: turns 4, 6, 8 → 6; explore 1 + 2 + 1 = 4 of 20; claims 3, 1, 2 → 2; rejected 1 of 3.
    assert from_store["style"].rows == approx_rows([
        ["terminus2", 3, 20.0, 0.3, 0.0, 1.0, 0.0],
        ["statem", 4, 8.0, 0.5, 0.25, 1.25, 0.0],
        ["rsrt", 3, 6.0, 0.2, 0.0, 2.0, 1 / 3],
    ])


def test_style_from_jsonl_has_turns_only(from_jsonl: dict[str, Table]) -> None:
    assert from_jsonl["style"].rows == [
        ["terminus2", 3, 20.0, None, None, None, None],
        ["statem", 4, 8.0, None, None, None, None],
        ["rsrt", 3, 6.0, None, None, None, None],
    ]


# k = 2. terminus2: (n, c) t1 (2,1), t2 (2,0), t3 (2,2), t4 (2,0), t6 (2,0); t5 none graded.
#   pass@1 = (.5 + 0 + 1 + 0 + 0) / 5 = .3; pass@2 = (1 + 0 + 1 + 0 + 0) / 5 = .4
#   runs: first graded of each: P F P F F → .4; second: F F P F F → .2; mean .3, std √.02.
#   partial credit: t4 only, rewards .25 and .5 → .375.
# statem: t1 (2,0), t2 (1,1) not scored, t3 (2,2), t4 (2,0), t6 (2,1): 4 scored.
#   pass@1 = (0 + 1 + 0 + .5) / 4 = .375; pass@2 = (0 + 1 + 0 + 1) / 4 = .5
#   runs: F P F P → .5; F P F F → .25; mean .375, std √.03125; t4: .75 and 0 → .375.
# rsrt: t1 (2,1), t2 (2,0), t3 (2,2), t6 (2,0); pass@1 .375, pass@2 .5;
#   runs: F F P F → .25; P F P F → .5; no partial-credit task.
STD_T2 = 0.02**0.5
STD_ST = 0.03125**0.5


def test_outcomes_from_the_store(from_store: dict[str, Table]) -> None:
    assert from_store["outcomes"].columns[5:9] == ["pass_at_1", "pass_at_2", "mean_of_2", "std_of_2"]
    assert from_store["outcomes"].rows == approx_rows([
        ["terminus2", 6, 5, 10, 3, 0.3, 0.4, 0.3, STD_T2, 1, 0.375, 1, 1],
        ["statem", 6, 4, 9, 4, 0.375, 0.5, 0.375, STD_ST, 1, 0.375, 1, 0],
        ["rsrt", 6, 4, 8, 3, 0.375, 0.5, 0.375, STD_ST, 0, None, 0, 0],
    ])


def test_outcomes_from_jsonl(from_jsonl: dict[str, Table]) -> None:
    # Identical, except that JSONL has no 'cancelled': t5's two null rewards are infra errors.
    assert from_jsonl["outcomes"].rows == approx_rows([
        ["terminus2", 6, 5, 10, 3, 0.3, 0.4, 0.3, STD_T2, 1, 0.375, 2, 0],
        ["statem", 6, 4, 9, 4, 0.375, 0.5, 0.375, STD_ST, 1, 0.375, 1, 0],
        ["rsrt", 6, 4, 8, 3, 0.375, 0.5, 0.375, STD_ST, 0, None, 0, 0],
    ])


def test_rewrites(from_store: dict[str, Table]) -> None:
    # 10 successful discover episodes; 3 accepted runbooks; graded executions 4 (t1) + 1
    # (t3) = 5, passed 3 + 1 = 4 → .8; kept 2 + 1 = 3; expansion 3 / 10; one infra error.
    assert from_store["rewrites"].rows == approx_rows([[10, 3, 5, 4, 0.8, 3, 0, 0.3, 1]])
    cases = {row[0]: row[1:] for row in from_store["rewrite_sources"].rows}
    assert len(cases) == 10
    # t1/terminus2/a0: turns of successful rewrites 8, 12, 6 → median 8; source turns 10.
    assert cases["t1/terminus2/a0"] == approx_rows([[2, 4, 3, 0.75, 2, 10, 8.0]])[0]
    assert cases["t3/statem/a0"] == approx_rows([[1, 1, 1, 1.0, 1, 7, 4.0]])[0]
    assert cases["t6/statem/a0"] == [0, 0, 0, None, 0, 11, None]


def test_no_rewrite_tables_without_rewrites(from_jsonl: dict[str, Table]) -> None:
    assert {"rewrites", "rewrite_sources", "similarity"}.isdisjoint(from_jsonl)


def test_similarity(from_store: dict[str, Table]) -> None:
    # Successful executions of t1: A = r0d0/e0 [ls, cat a, make, make test],
    # B = r0d0/e1 [ls, cat b, make], C = r1d1/e1 [pwd, ls, make test] (t3 has one only).
    # Same runbook: (A, B): Jaccard {ls, make} / 5 = .4; LCS 2 / 4 = .5.
    # Different: (A, C): 2/5 = .4, LCS (ls, make test) 2/4 = .5; (B, C): 1/5 = .2, 1/3.
    # Without the first two turns: A [make, make test], B [make], C [make test]:
    # (A, B) 1/2, LCS 1/2; (A, C) 1/2, 1/2; (B, C) 0, 0.
    assert from_store["similarity"].rows == approx_rows([
        ["same runbook", 1, 0.4, 0.5, 0.5, 0.5],
        ["different runbook", 2, 0.3, (0.5 + 1 / 3) / 2, 0.25, 0.25],
    ])
    assert "Jaccard" in from_store["similarity"].notes[0]


def test_analyze_cli_writes_every_format(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "analysis"
    proc = subprocess.run(
        [PYTHON, "-m", "rsr_async", "analyze", str(run_dir), "--out", str(out),
         "--subset-key", "metadata.source"],
        cwd=REPO, env=run_cli_env(), capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    names = ["coverage", "equal_rollouts", "exclusivity", "intersections", "domains", "style",
             "rewrites", "rewrite_sources", "similarity", "outcomes"]
    for name in names:
        for ext in ("md", "csv", "json"):
            assert (out / "tables" / f"{name}.{ext}").is_file(), (name, ext)
    coverage = json.loads((out / "tables" / "coverage.json").read_text())
    assert coverage["records"][3]["best_single"] == "statem"
    assert (out / "tables" / "coverage.csv").read_text().splitlines()[0] == (
        "subset,harness,tasks,rollouts,solved,solved_rate,best_single,gain_abs,gain_rel")
    figures = sorted(p.name for p in (out / "figures").iterdir())
    assert figures == ["coverage_by_subset.png", "domain_heatmap.png", "rewrite_pass_rates.png",
                       "similarity.png", "upset.png"]
    for figure in figures:
        assert (out / "figures" / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 5 and "Coverage per harness" in html
    assert "| A | union | 3 | 17 | 3 | 1.000 | statem | 1 | 0.500 |" in proc.stdout
