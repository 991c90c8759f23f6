from __future__ import annotations

from math import comb

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsr_async.analysis import mean_pass_at_k, pass_at_k


@given(st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_matches_the_combinatorial_definition(case: tuple[int, int, int]) -> None:
    n, c, k = case
    exact = 1.0 - comb(n - c, k) / comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_known_values() -> None:
    assert pass_at_k(10, 0, 1) == 0.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(4, 1, 3) == pytest.approx(0.75)
    assert pass_at_k(5, 3, 3) == 1.0  # n - c < k


def test_mean_skips_tasks_with_too_few_samples() -> None:
    assert mean_pass_at_k([(4, 4), (4, 0), (2, 2)], 3) == pytest.approx(0.5)
    assert mean_pass_at_k([], 1) == 0.0


@pytest.mark.parametrize(("n", "c", "k"), [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)])
def test_bad_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(n, c, k)
