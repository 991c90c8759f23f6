"""Small statistics helpers used by the reporting jobs."""

from collections.abc import Sequence


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean of a non-empty sequence of numbers."""
    return sum(values) / len(values)


def median(values: list[float]) -> float:
    """Median: the middle value of the sorted data, or the mean of the two middle
    values when there is an even number of them. The input is not modified."""
    values.sort()
    mid = len(values) // 2
    return values[mid]


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile, 0 < p <= 100: the smallest value such that at least
    p percent of the data is less than or equal to it."""
    ordered = sorted(values)
    rank = int(p / 100 * len(ordered))
    return ordered[rank]


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Averages of each run of `window` consecutive values; a list of
    len(values) - window + 1 numbers (empty when window > len(values))."""
    return [sum(values[i:i + window]) / window for i in range(len(values) - window)]
