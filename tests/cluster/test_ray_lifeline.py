"""A private Ray instance (``run --ray local``) ends with the process that started it:
Ray fate-shares only its GCS server and raylet with the driver; the raylet's agents are
the :class:`~rsr_async.lifeline.Reaper`'s."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from rsr_async.lifeline import descendants
from tests.conftest import run_cli_env

_DRIVER = textwrap.dedent("""
    import anyio
    from rsr_async.cluster.ray_backend import open_ray

    async def main():
        async with open_ray("local"):
            print("ready", flush=True)
            await anyio.sleep(300)

    anyio.run(main)
""")


def _alive(pid: int, start: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and fields[19] == start


def test_a_sigkilled_driver_leaves_no_process_of_its_local_ray() -> None:
    driver = subprocess.Popen([sys.executable, "-c", _DRIVER], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=run_cli_env(), text=True)
    ray_processes: list[tuple[int, str]] = []
    try:
        assert driver.stdout is not None
        assert driver.stdout.readline().strip() == "ready"
        ray_processes = descendants(driver.pid)
        assert len(ray_processes) >= 3, ray_processes  # GCS, raylet, its agents, the reaper
        driver.kill()
        driver.wait(timeout=10)
        deadline = time.monotonic() + 15  # the agents alone outlived a driver by minutes
        while any(_alive(*p) for p in ray_processes) and time.monotonic() < deadline:
            time.sleep(0.1)  # other processes' ends: polled in /proc, no event reaches us
        left = [(pid, open(f"/proc/{pid}/cmdline").read().replace("\0", " ")[:80])
                for pid, start in ray_processes if _alive(pid, start)]
        assert left == [], left
    finally:
        driver.kill()
        driver.wait()
        for pid, start in ray_processes:  # a failed check leaves none behind either
            if _alive(pid, start):
                os.kill(pid, signal.SIGKILL)
