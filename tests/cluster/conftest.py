from __future__ import annotations

from collections.abc import Callable

import anyio


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 60.0, every_s: float = 0.01) -> None:
    """Poll ``predicate`` (the dispatcher's counts, another process's containers: state
    no event reaches this task from) until true, or fail naming the wait."""
    for _ in range(max(1, int(timeout_s / every_s))):
        if predicate():
            return
        await anyio.sleep(every_s)
    raise AssertionError(f"condition not met within {timeout_s} s")
