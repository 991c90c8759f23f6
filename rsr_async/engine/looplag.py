"""Event-loop lag: how late a timer fires. A loop that blocks (CPU work, a blocking call)
shows it here first, long before throughput suffers.

What counts is the lateness the loop itself caused. On Linux the time the loop's thread
spent runnable but waiting for a CPU (``/proc/thread-self/schedstat``, the run-queue
wait) is taken out of each sample: on a machine busy with other work (another benchmark,
a sandbox's fork bomb or memory hog) the kernel can keep the thread off the CPU for
hundreds of milliseconds, which is the machine's load, not a blocked loop (issue 30:
346 ms under load, 30 ms idle, for the same episode). A blocking call still counts in
full: a thread asleep in a syscall, or busy on the CPU, is not waiting in the run queue.
The raw lateness is kept too (:attr:`LoopLagMonitor.raw_max_s`).
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Callable

import anyio

__all__ = ["LoopLagMonitor"]

SCHEDSTAT = "/proc/thread-self/schedstat"
"""Per-thread scheduler figures: time on a CPU, time waiting in the run queue (ns), slices."""


def _run_queue_clock() -> tuple[Callable[[], float], int] | None:
    """A reader of the calling thread's total run-queue wait (seconds), and its open file;
    None where the kernel does not say (not Linux, no schedstat)."""
    try:
        fd = os.open(SCHEDSTAT, os.O_RDONLY)
    except OSError:
        return None

    def waited() -> float:
        return int(os.pread(fd, 128, 0).split()[1]) / 1e9

    try:
        waited()
    except (OSError, ValueError, IndexError):
        os.close(fd)
        return None
    return waited, fd


class LoopLagMonitor:
    """Sleeps ``interval_s`` again and again and records how much later than asked it woke,
    less the time the thread waited for a CPU meanwhile (see the module doc).

    Keeps the last ``window`` samples (p99 over them) and the maximum since start.
    """

    def __init__(self, interval_s: float = 0.05, *, window: int = 4096) -> None:
        self.interval_s = interval_s
        self._samples: collections.deque[float] = collections.deque(maxlen=window)
        self.max_s = 0.0
        self.raw_max_s = 0.0
        """The longest lateness as measured, run-queue wait included."""

    async def run(self) -> None:
        """Measure until cancelled (on the loop's own thread: it reads that thread's figures)."""
        interval = self.interval_s
        samples = self._samples
        clock = _run_queue_clock()
        waited: Callable[[], float] = clock[0] if clock else (lambda: 0.0)
        try:
            while True:
                start = time.perf_counter()
                queued = waited()
                await anyio.sleep(interval)
                raw = max(0.0, time.perf_counter() - start - interval)
                lag = max(0.0, raw - (waited() - queued))
                samples.append(lag)
                self.max_s = max(self.max_s, lag)
                self.raw_max_s = max(self.raw_max_s, raw)
        finally:
            if clock is not None:
                os.close(clock[1])

    def reset(self) -> None:
        """Forget the samples so far (e.g. after a warm-up)."""
        self._samples.clear()
        self.max_s = 0.0
        self.raw_max_s = 0.0

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
