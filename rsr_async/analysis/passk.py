"""pass@k by the unbiased estimator of Chen et al. (2021).

For one task with ``n`` samples of which ``c`` are correct,
``pass@k = 1 - C(n - c, k) / C(n, k)``, computed stably as
``1 - prod_{i = n - c + 1}^{n} (1 - k / i)``, and 1.0 when ``n - c < k``.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["mean_pass_at_k", "pass_at_k"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of ``k`` samples drawn from ``n`` (``c`` correct) is correct."""
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float:
    """Mean pass@k over tasks, given ``(n, c)`` per task; tasks with ``n < k`` are skipped."""
    values = [pass_at_k(n, c, k) for n, c in counts if n >= k]
    return sum(values) / len(values) if values else 0.0
