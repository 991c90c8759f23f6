"""Event-loop lag: how late a timer fires. A loop that blocks (CPU work, a blocking call)
shows it here first, long before throughput suffers.
"""

from __future__ import annotations

import collections
import time

import anyio

__all__ = ["LoopLagMonitor"]


class LoopLagMonitor:
    """Sleeps ``interval_s`` again and again and records how much later than asked it woke.

    Keeps the last ``window`` samples (p99 over them) and the maximum since start.
    """

    def __init__(self, interval_s: float = 0.05, *, window: int = 4096) -> None:
        self.interval_s = interval_s
        self._samples: collections.deque[float] = collections.deque(maxlen=window)
        self.max_s = 0.0

    async def run(self) -> None:
        """Measure until cancelled."""
        interval = self.interval_s
        samples = self._samples
        while True:
            start = time.perf_counter()
            await anyio.sleep(interval)
            lag = max(0.0, time.perf_counter() - start - interval)
            samples.append(lag)
            if lag > self.max_s:
                self.max_s = lag

    def reset(self) -> None:
        """Forget the samples so far (e.g. after a warm-up)."""
        self._samples.clear()
        self.max_s = 0.0

    def percentile(self, q: float) -> float:
        """The ``q`` quantile (0..1) of recent lag, in seconds (0 before any sample)."""
        if not self._samples:
            return 0.0
        ordered = sorted(self._samples)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def count(self) -> int:
        """Samples held."""
        return len(self._samples)
