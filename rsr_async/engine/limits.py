"""Per-resource limiters shared by all jobs of an engine.

The global ``run.concurrency`` caps jobs in flight; these cap what the jobs share:
container starts per second on a Docker host, requests in flight per model server.
Names are free-form (``"sandbox.starts:unix:///var/run/docker.sock"``,
``"llm:http://10.0.0.5:30000"``); the sandbox and model layers pick them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType

import anyio

__all__ = ["Limits", "RateLimiter"]


class RateLimiter:
    """Token bucket: at most ``rate`` acquisitions per second, bursts up to ``burst``.

    Waiters are served in arrival order: a lock serialises them so that one slow-starting
    caller cannot be overtaken forever. Use as ``await limiter.acquire()`` or
    ``async with limiter:`` (nothing to release).
    """

    def __init__(self, rate: float, *, burst: float = 1.0) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"RateLimiter: expected rate > 0 and burst >= 1, got {rate}, {burst}")
        self.rate = rate
        self.burst = burst
        self._tokens = burst
        self._stamp: float | None = None
        self._lock = anyio.Lock()

    async def acquire(self) -> None:
        """Wait until a token is available and take it."""
        async with self._lock:
            now = anyio.current_time()
            if self._stamp is None:
                self._stamp = now
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            if self._tokens < 1.0:
                wait = (1.0 - self._tokens) / self.rate
                await anyio.sleep(wait)
                self._stamp = anyio.current_time()
                self._tokens = 1.0
            self._tokens -= 1.0

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


class Limits:
    """Named capacity limiters (in flight at once) and rate limiters (per second).

    Limiters are created on first use from the configured numbers; a name without a
    configured number gets ``default_capacity`` / ``default_rate`` (unlimited when 0).
    """

    def __init__(
        self,
        capacities: Mapping[str, int] | None = None,
        rates: Mapping[str, float] | None = None,
        *,
        default_capacity: int = 0,
        default_rate: float = 0.0,
    ) -> None:
        self._capacity_numbers = dict(capacities or {})
        self._rate_numbers = dict(rates or {})
        self._default_capacity = default_capacity
        self._default_rate = default_rate
        self._capacities: dict[str, anyio.CapacityLimiter] = {}
        self._rates: dict[str, RateLimiter | None] = {}

    def capacity(self, name: str) -> anyio.CapacityLimiter:
        """The capacity limiter for ``name`` (``async with limits.capacity(name):``)."""
        limiter = self._capacities.get(name)
        if limiter is None:
            number = self._capacity_numbers.get(name, self._default_capacity)
            limiter = anyio.CapacityLimiter(number if number > 0 else float("inf"))
            self._capacities[name] = limiter
        return limiter

    async def rate(self, name: str) -> None:
        """Wait for the rate limiter of ``name`` (returns at once when unlimited)."""
        if name not in self._rates:
            number = self._rate_numbers.get(name, self._default_rate)
            self._rates[name] = RateLimiter(number) if number > 0 else None
        limiter = self._rates[name]
        if limiter is not None:
            await limiter.acquire()
        else:
            await anyio.lowlevel.checkpoint()

    def in_use(self) -> dict[str, float]:
        """Borrowed tokens per capacity limiter, e.g. for a live display."""
        return {name: lim.borrowed_tokens for name, lim in self._capacities.items()}
