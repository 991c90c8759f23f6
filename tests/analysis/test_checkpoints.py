"""The checkpoint table (Table 5) from hand-made rollouts; every figure worked out by hand."""

from __future__ import annotations

import json
import math

import msgspec
import pytest

from rsr_async.analysis.checkpoints import (
    SCRIPTED_LABEL,
    Checkpoint,
    CheckpointTable,
    checkpoint_table,
    encode_table,
    render_markdown,
)
from rsr_async.analysis.outcomes import OUTCOME_DEFINITIONS
from rsr_async.analysis.rollouts import Rollout, RolloutStatus

BENCHMARKS = {"alpha": ["a1", "a2", "a3"], "beta": ["b1", "b2"]}
CHECKPOINTS = [
    Checkpoint(name="base", url="http://gpu1:30000", model="org/base-8b", run_dir="/e/base"),
    Checkpoint(name="rsr-sft", url="http://127.0.0.1:30001", model="scripted-b",
               scripted=True, simulator=True, run_dir="/e/rsr-sft"),
]


def _r(ckpt: str, task: str, attempt: int, status: RolloutStatus, reward: float | None = None,
       rewards: dict[str, float] | None = None) -> Rollout:
    if reward is None and status in ("succeeded", "failed"):
        reward = 1.0 if status == "succeeded" else 0.0
    return Rollout(task=task, harness=ckpt, attempt=attempt, status=status, reward=reward,
                   rewards=rewards)


S, F, INFRA, CANCELLED = "succeeded", "failed", "infra_error", "cancelled"


def _partial(reward: float) -> dict[str, float]:
    """A reward.json with several keys: the task gives partial credit."""
    return {"reward": reward, "check_a": 1.0 if reward > 0 else 0.0, "check_b": 0.0}


ROLLOUTS = [
    # base, alpha: every task has its 3 graded runs.
    _r("base", "a1", 0, S), _r("base", "a1", 1, F), _r("base", "a1", 2, S),
    _r("base", "a2", 0, F), _r("base", "a2", 1, F), _r("base", "a2", 2, F),
    _r("base", "a3", 0, S), _r("base", "a3", 1, S), _r("base", "a3", 2, S),
    # rsr-sft, alpha: a1 lost a run (cancelled), a2 has no rollout at all.
    _r("rsr-sft", "a1", 0, CANCELLED), _r("rsr-sft", "a1", 1, S), _r("rsr-sft", "a1", 2, S),
    _r("rsr-sft", "a3", 0, F), _r("rsr-sft", "a3", 1, S), _r("rsr-sft", "a3", 2, F),
    # base, beta: b1 gives partial credit.
    _r("base", "b1", 0, F, 0.5, _partial(0.5)), _r("base", "b1", 1, S, 1.0, _partial(1.0)),
    _r("base", "b1", 2, F, 0.0, _partial(0.0)),
    _r("base", "b2", 0, F), _r("base", "b2", 1, F), _r("base", "b2", 2, F),
    # rsr-sft, beta: b1's last run was an infrastructure error.
    _r("rsr-sft", "b1", 0, F, 0.25, _partial(0.25)), _r("rsr-sft", "b1", 1, F, 0.5, _partial(0.5)),
    _r("rsr-sft", "b1", 2, INFRA),
    _r("rsr-sft", "b2", 0, S), _r("rsr-sft", "b2", 1, F), _r("rsr-sft", "b2", 2, S),
    # Ignored: a task in no benchmark, and a checkpoint that is not a column.
    _r("base", "elsewhere", 0, S), _r("other", "a1", 0, S),
]

# Sample std of three run scores x, y, z: sqrt(sum((v - mean)^2) / 2).
EXPECTED = {
    ("alpha", "base"): {
        # pass@3 with n = 3 is "solved at least once": a1 1, a2 0, a3 1 -> 2/3.
        "pass_at_k": 2 / 3,
        # pass@1 = c/n: a1 2/3, a2 0, a3 3/3 -> (2/3 + 0 + 1)/3 = 5/9.
        "pass_at_1": 5 / 9,
        # Runs (share of the 3 tasks passed): r0 {a1, a3} 2/3, r1 {a3} 1/3, r2 {a1, a3} 2/3;
        # mean 5/9; deviations 1/9, -2/9, 1/9 -> squares 6/81, /2 = 1/27.
        "mean_of_k": 5 / 9, "std_of_k": math.sqrt(1 / 27),
        "tasks": 3, "tasks_scored": 3, "rollouts": 9, "passed": 5,
        "infra_errors": 0, "cancelled": 0, "partial_credit_tasks": 0, "process_reward": None,
    },
    ("alpha", "rsr-sft"): {
        # Only a3 has 3 graded runs (a1: 2 graded + 1 cancelled; a2: none): F S F.
        "pass_at_k": 1.0, "pass_at_1": 1 / 3,
        # Runs over {a3}: 0, 1, 0 -> mean 1/3; deviations -1/3, 2/3, -1/3 -> 6/9, /2 = 1/3.
        "mean_of_k": 1 / 3, "std_of_k": math.sqrt(1 / 3),
        # Graded: a1 2 (both passed) + a3 3 (one passed) = 5 rollouts, 3 passed.
        "tasks": 3, "tasks_scored": 1, "rollouts": 5, "passed": 3,
        "infra_errors": 0, "cancelled": 1, "partial_credit_tasks": 0, "process_reward": None,
    },
    ("beta", "base"): {
        # b1 rewards 0.5, 1.0, 0.0 (one pass) -> pass@3 1; b2 never passes -> 0. Mean 1/2.
        "pass_at_k": 0.5,
        # pass@1: b1 1/3, b2 0 -> 1/6.
        "pass_at_1": 1 / 6,
        # Runs: r0 0/2, r1 {b1} 1/2, r2 0/2 -> mean 1/6; deviations -1/6, 1/3, -1/6
        # -> squares 6/36, /2 = 1/12.
        "mean_of_k": 1 / 6, "std_of_k": math.sqrt(1 / 12),
        "tasks": 2, "tasks_scored": 2, "rollouts": 6, "passed": 1,
        # b1 has several reward keys: mean(0.5, 1.0, 0.0) = 0.5 over 1 partial-credit task.
        "infra_errors": 0, "cancelled": 0, "partial_credit_tasks": 1, "process_reward": 0.5,
    },
    ("beta", "rsr-sft"): {
        # Only b2 has 3 graded runs (b1: 2 graded + 1 infra error): S F S -> pass@3 1.
        "pass_at_k": 1.0,
        # pass@1 over {b2}: 2/3.
        "pass_at_1": 2 / 3,
        # Runs over {b2}: 1, 0, 1 -> mean 2/3; deviations 1/3, -2/3, 1/3 -> 6/9, /2 = 1/3.
        "mean_of_k": 2 / 3, "std_of_k": math.sqrt(1 / 3),
        "tasks": 2, "tasks_scored": 1, "rollouts": 5, "passed": 2,
        # Process reward still reads b1's graded runs: mean(0.25, 0.5) = 0.375.
        "infra_errors": 1, "cancelled": 0, "partial_credit_tasks": 1, "process_reward": 0.375,
    },
}

EXPECTED_MARKDOWN = f"""\
# Checkpoint evaluation: plain Terminus 2, 3 runs per task

| benchmark | metric | base | rsr-sft (scripted stand-in) |
|---|---|---:|---:|
| alpha (3 tasks) | pass@3 (%) | 66.7 | 100.0 |
|  | mean of 3 runs (%, ± std) | 55.6 ± 19.2 | 33.3 ± 57.7 |
|  | process reward (partial-credit tasks) | n/a (0 tasks) | n/a (0 tasks) |
|  | tasks scored (with 3 graded runs) | 3/3 | 1/3 |
|  | infra errors excluded | 0 | 0 (+1 cancelled) |
| beta (2 tasks) | pass@3 (%) | 50.0 | 100.0 |
|  | mean of 3 runs (%, ± std) | 16.7 ± 28.9 | 66.7 ± 57.7 |
|  | process reward (partial-credit tasks) | 0.500 (1 task) | 0.375 (1 task) |
|  | tasks scored (with 3 graded runs) | 2/2 | 1/2 |
|  | infra errors excluded | 0 | 1 |

Checkpoints:

- `base`: model `org/base-8b` at http://gpu1:30000
- `rsr-sft`: model `scripted-b` at http://127.0.0.1:30001 (the rsr_async simulator)

Notes:

- **rsr-sft: {SCRIPTED_LABEL} (served by the rsr_async simulator)**
- **1 infra error and 1 cancelled run are excluded from the figures; rerun the same command to retry them**

n/a: no task has 3 graded runs (pass@3, mean), or none gives partial credit (process reward).

Definitions (k = 3): {OUTCOME_DEFINITIONS}
"""
# Percentages: 2/3 = 66.7; 5/9 = 55.6, sqrt(1/27) = 0.19245 -> 19.2; sqrt(1/3) = 0.57735
# -> 57.7; 1/6 = 16.7, sqrt(1/12) = 0.28868 -> 28.9.


def _table() -> CheckpointTable:
    return checkpoint_table(ROLLOUTS, BENCHMARKS, CHECKPOINTS, runs=3)


def test_figures_per_benchmark_and_checkpoint() -> None:
    table = _table()
    assert [b.name for b in table.benchmarks] == ["alpha", "beta"]
    for bench in table.benchmarks:
        assert list(bench.outcomes) == ["base", "rsr-sft"]  # column order, "other" left out
        assert bench.tasks == BENCHMARKS[bench.name]
        for name, outcome in bench.outcomes.items():
            got = msgspec.to_builtins(outcome)
            want = EXPECTED[(bench.name, name)]
            assert got["group"] == name and got["k"] == 3
            for field, value in want.items():
                assert got[field] == (None if value is None else pytest.approx(value)), (bench.name, name, field)


def test_markdown_is_the_table_layout() -> None:
    assert render_markdown(_table()) == EXPECTED_MARKDOWN


def test_json_is_side_by_side_and_marks_the_scripted_checkpoint() -> None:
    data = json.loads(encode_table(_table()))
    assert list(data) == ["harness", "runs", "checkpoints", "benchmarks", "notes", "definitions"]
    assert data["harness"] == "terminus2" and data["runs"] == 3
    assert [(c["name"], c["scripted"]) for c in data["checkpoints"]] == [("base", False), ("rsr-sft", True)]
    assert data["checkpoints"][1]["simulator"] is True
    assert data["definitions"] == OUTCOME_DEFINITIONS
    assert data["notes"][0] == f"rsr-sft: {SCRIPTED_LABEL} (served by the rsr_async simulator)"
    beta = data["benchmarks"][1]
    assert beta["name"] == "beta" and beta["tasks"] == ["b1", "b2"]
    assert list(beta["outcomes"]) == ["base", "rsr-sft"]
    assert beta["outcomes"]["rsr-sft"]["process_reward"] == pytest.approx(0.375)
    assert beta["outcomes"]["rsr-sft"]["infra_errors"] == 1


def test_no_notes_for_real_checkpoints_without_errors() -> None:
    clean = [r for r in ROLLOUTS if r.status in ("succeeded", "failed")]
    table = checkpoint_table(clean, BENCHMARKS, CHECKPOINTS[:1], runs=3)
    assert table.notes == []
    assert "Notes:" not in render_markdown(table)
    assert "scripted" not in render_markdown(table)


def test_one_run_has_no_spread() -> None:
    table = checkpoint_table(ROLLOUTS, {"alpha": ["a2"]}, CHECKPOINTS[:1], runs=1)
    # a2 under base: F F F; every graded run is a sample, k = 1: pass@1 0, run r0 0/1.
    assert render_markdown(table).splitlines()[4] == "| alpha (1 task) | pass@1 (%) | 0.0 |"
    assert "| mean of 1 runs (%, ± std) | 0.0 |" in render_markdown(table)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="repeat"):
        checkpoint_table([], BENCHMARKS, [CHECKPOINTS[0], CHECKPOINTS[0]], runs=3)
    with pytest.raises(ValueError, match="'a1' is in benchmarks 'alpha' and 'beta'"):
        checkpoint_table([], {"alpha": ["a1"], "beta": ["a1"]}, CHECKPOINTS, runs=3)
