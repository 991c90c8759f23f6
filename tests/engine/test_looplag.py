"""The loop-lag monitor counts what the loop itself caused (issue 30): a blocking call in
the loop in full, and not the time the kernel kept the loop's thread waiting for a CPU
while other processes load the machine. Real processes compete for a real CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import anyio
import pytest

from rsr_async.engine.looplag import SCHEDSTAT, LoopLagMonitor


async def _measure(monitor: LoopLagMonitor, seconds: float, block_s: float = 0.0) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(monitor.run)
        await anyio.sleep(0.2)
        if block_s:
            time.sleep(block_s)  # noqa: ASYNC251 - the blocking call the monitor must see
        await anyio.sleep(seconds)
        tg.cancel_scope.cancel()


def test_a_blocking_call_in_the_loop_counts_in_full() -> None:
    monitor = LoopLagMonitor(0.02)
    anyio.run(_measure, monitor, 0.2, 0.3)
    assert monitor.max_s >= 0.25, (monitor.max_s, monitor.raw_max_s)
    assert monitor.raw_max_s >= monitor.max_s


@pytest.mark.skipif(not os.path.exists(SCHEDSTAT) or not hasattr(os, "sched_setaffinity"),
                    reason="needs Linux's per-thread schedstat and CPU affinity")
def test_waiting_for_a_cpu_is_the_machines_load_not_a_stall() -> None:
    cpu = min(os.sched_getaffinity(0))
    hog = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])}); sys.stdout.write('go\\n'); sys.stdout.flush()\nwhile True: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", hog, str(cpu)], stdout=subprocess.PIPE, text=True)
            for _ in range(12)]
    before = os.sched_getaffinity(0)
    try:
        for process in hogs:  # each says so once it spins on that CPU
            assert process.stdout is not None and process.stdout.readline() == "go\n"
        os.sched_setaffinity(0, {cpu})  # this (the loop's) thread shares the CPU with twelve hogs
        monitor = LoopLagMonitor(0.01)
        anyio.run(_measure, monitor, 2.0)
    finally:
        os.sched_setaffinity(0, before)
        for process in hogs:
            process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()
    # The raw lateness shows the wait for the CPU; the loop's own lag leaves it out.
    assert monitor.raw_max_s > 0.01, monitor.raw_max_s
    assert monitor.percentile(0.99) < monitor.raw_max_s / 2, (monitor.percentile(0.99), monitor.raw_max_s)
    assert monitor.percentile(0.99) < 0.02, monitor.percentile(0.99)
