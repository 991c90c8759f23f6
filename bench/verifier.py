"""What one verification costs, before and after the hidden tests left the agent's reach.

Three ways to grade the same Harbor task (tests that write a log and a reward) on the same
containers, alternating round by round, in the same run:

- ``before``: the verifier as it was until issue 27, six execs through the sandbox's own
  tools: kill the agent's processes and empty ``/tests`` and ``/logs/verifier`` (one
  exec), upload the tests (Docker's archive API), ``bash /tests/test.sh``, ``cat`` the
  reward, list and read ``/logs/verifier``, ``rm -rf`` the tests;
- ``after``: :func:`rsr_async.tasks.verifier.verify` now, the agent's processes left
  running: one exec into the host's verifier station (``rsr-verify``: namespaces, private
  tmpfs mounts, the tests, the reward and logs sent back);
- ``after_stop_agent``: the same with the opt-in kill of the agent's processes first.

Before every round each container gets an agent's leftovers afresh, not timed: an
interactive bash on a pty and ``--leftovers`` background loops. Each figure is the median
latency of one verification over ``--repeat`` rounds of all ``--containers`` containers at
once (many episodes verify at a time). ``ratio`` is ``after`` over ``before``.

``python -m rsr_async bench verifier [--containers 8] [--repeat 15] [--json FILE]``
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import emit, parser  # noqa: E402

from rsr_async.config import SandboxConfig  # noqa: E402
from rsr_async.sandbox import DockerSandbox, SandboxPool  # noqa: E402
from rsr_async.schema import Task  # noqa: E402
from rsr_async.tasks.verifier import _STOP_SCRIPT, verify  # noqa: E402

TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
echo "collected 3 items" > /logs/verifier/test.log
echo '{"results": {"summary": {"tests": 3, "passed": 3}}}' > /logs/verifier/ctrf.json
echo 1 > /logs/verifier/reward.txt
"""
# The pre-issue-27 steps, verbatim in what they ran (see the module doc).
_CLEAR = _STOP_SCRIPT + "rm -rf /tests /logs/verifier && mkdir -p /logs/verifier || exit 4\n"
_READ_REWARD = ("if [ -f /logs/verifier/reward.json ]; then echo jsonM; cat /logs/verifier/reward.json; "
                "elif [ -f /logs/verifier/reward.txt ]; then echo txtM; cat /logs/verifier/reward.txt; "
                "else echo noneM; fi")
_LIST_LOGS = r"""
cd /logs/verifier 2>/dev/null || exit 0
n=0
while IFS= read -r -d '' f; do
  n=$((n + 1))
  if [ $n -gt 32 ]; then echo "@@more ${f#./}"; continue; fi
  size=$(stat -c %s "$f" 2>/dev/null || echo 0)
  echo "@@file $size ${f#./}"
  head -c 31900 "$f" 2>/dev/null
  if [ "$size" -gt 63800 ]; then echo "@@cut"; tail -c 31900 "$f" 2>/dev/null; fi
  echo
  echo "@@end"
done < <(find . -maxdepth 3 -type f -print0 2>/dev/null | sort -z)
"""


async def _before(sandbox: DockerSandbox, task: Task) -> None:
    assert (await sandbox.run(_CLEAR, time_limit=120)).exit_code == 0
    await sandbox.upload(Path(task.tests_dir), "/tests")
    ran = await sandbox.run("bash /tests/test.sh", time_limit=60, workdir=task.workdir)
    reward = await sandbox.run(_READ_REWARD, time_limit=120)
    assert "txtM" in reward.output and reward.output.strip().endswith("1"), reward.output
    await sandbox.run(_LIST_LOGS, time_limit=120)
    await sandbox.run("rm -rf /tests /logs/verifier", time_limit=120)
    assert ran.exit_code == 0


async def _after(sandbox: DockerSandbox, task: Task) -> None:
    assert (await verify(sandbox, task)).passed


async def _after_stop_agent(sandbox: DockerSandbox, task: Task) -> None:
    assert (await verify(sandbox, task, stop_agent=True)).passed


async def _leave_processes(sandbox: DockerSandbox, loops: int) -> None:
    """An agent's leftovers: its shell (bash on a pty) and ``loops`` background loops."""
    shell = await sandbox.open_shell()
    for _ in range(loops):
        await shell.send("(while true; do sleep 0.05; done) > /dev/null 2>&1 &\n")
    await shell.wait(10)


async def _round(sandboxes: list[DockerSandbox], task: Task,
                 step: Callable[[DockerSandbox, Task], Awaitable[None]]) -> list[float]:
    times: list[float] = []

    async def one(sandbox: DockerSandbox) -> None:
        started = time.perf_counter()
        await step(sandbox, task)
        times.append(time.perf_counter() - started)

    async with anyio.create_task_group() as tg:
        for sandbox in sandboxes:
            tg.start_soon(one, sandbox)
    return times


async def _main(args: Any, tests: Path) -> dict[str, Any]:
    config = SandboxConfig(starts_per_s=50.0)
    (tests / "test.sh").write_text(TEST_SH)
    task = Task(name="bench-verifier", path=str(tests.parent), instruction="bench",
                docker_image=config.base_image, tests_dir=str(tests), verifier_timeout_s=60, workdir="/tmp")
    steps = {"before": _before, "after": _after, "after_stop_agent": _after_stop_agent}
    samples: dict[str, list[float]] = {name: [] for name in steps}
    async with SandboxPool(config, run_id=f"bench-verifier-{uuid.uuid4().hex[:8]}") as pool:
        contexts = [pool.sandbox(task, key=f"bench-{i}") for i in range(args.containers)]
        sandboxes = [await context.__aenter__() for context in contexts]
        try:
            await _round(sandboxes, task, _after)  # warm-up, not kept: the station starts here
            for _ in range(args.repeat):
                for name, step in steps.items():
                    async with anyio.create_task_group() as tg:
                        for sandbox in sandboxes:
                            tg.start_soon(_leave_processes, sandbox, args.leftovers)
                    samples[name] += await _round(sandboxes, task, step)
        finally:
            for context in reversed(contexts):
                await context.__aexit__(None, None, None)
    medians = {name: statistics.median(values) * 1000 for name, values in samples.items()}
    return {
        "benchmark": "verifier",
        "containers": args.containers,
        "repeat": args.repeat,
        "leftover_loops": args.leftovers,
        "median_ms": {name: round(value, 1) for name, value in medians.items()},
        "p90_ms": {
            name: round(statistics.quantiles(values, n=10)[-1] * 1000, 1) for name, values in samples.items()
        },
        "ratio_after_to_before": round(medians["after"] / medians["before"], 3),
    }


def main(argv: list[str]) -> int:
    p = parser(__doc__.splitlines()[0] if __doc__ else "verifier benchmark")
    p.set_defaults(repeat=15)
    p.add_argument("--containers", type=int, default=8)
    p.add_argument("--leftovers", type=int, default=3, help="background loops the agent leaves")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rsr-bench-verifier-") as scratch:
        tests = Path(scratch) / "task" / "tests"
        tests.mkdir(parents=True)
        emit(anyio.run(_main, args, tests), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
