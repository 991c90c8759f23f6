"""What killing the agent's processes before the hidden tests costs per episode.

Before the tests run, :func:`rsr_async.tasks.verifier.clear_for_tests` kills every process
the agent left and empties ``/tests`` and ``/logs/verifier`` in one exec. Before it, the
verifier only emptied the directories (one exec too). Both are measured here on the same
containers, alternating, in the same run:

- ``clear_only``: the former step, ``rm -rf /tests /logs/verifier && mkdir -p /logs/verifier``;
- ``kill_and_clear``: the step the verifier takes now, with ``--leftovers`` agent processes
  to kill each time (an interactive bash on a pty, as the agent's shell is, plus
  background loops), started afresh before every measurement and not timed;
- ``kill_and_clear_idle``: the same step with nothing to kill.

Each figure is the median latency of one step over ``--repeat`` rounds of all
``--containers`` containers at once (the verifier step is taken concurrently by many
episodes at a time). ``delta_ms`` is the extra per episode.

``python -m rsr_async bench verifier [--containers 8] [--repeat 15] [--json FILE]``
"""

from __future__ import annotations

import statistics
import sys
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
from rsr_async.tasks.verifier import clear_for_tests  # noqa: E402

CLEAR = "rm -rf /tests /logs/verifier && mkdir -p /logs/verifier"


async def _leave_processes(sandbox: DockerSandbox, loops: int) -> None:
    """An agent's leftovers: its shell (bash on a pty) and ``loops`` background loops."""
    shell = await sandbox.open_shell()
    for _ in range(loops):
        await shell.send("(while true; do sleep 0.05; done) > /dev/null 2>&1 &\n")
    await shell.wait(10)


async def _round(sandboxes: list[DockerSandbox], step: Callable[[DockerSandbox], Awaitable[Any]]) -> list[float]:
    times: list[float] = []

    async def one(sandbox: DockerSandbox) -> None:
        started = time.perf_counter()
        await step(sandbox)
        times.append(time.perf_counter() - started)

    async with anyio.create_task_group() as tg:
        for sandbox in sandboxes:
            tg.start_soon(one, sandbox)
    return times


async def _clear_only(sandbox: DockerSandbox) -> None:
    result = await sandbox.run(CLEAR, time_limit=60)
    assert result.exit_code == 0, result.output


async def _main(args: Any) -> dict[str, Any]:
    config = SandboxConfig(starts_per_s=50.0)
    task = Task(name="bench-verifier", path=".", instruction="bench", docker_image=config.base_image)
    samples: dict[str, list[float]] = {"clear_only": [], "kill_and_clear": [], "kill_and_clear_idle": []}
    killed: list[int] = []
    async with SandboxPool(config, run_id=f"bench-verifier-{uuid.uuid4().hex[:8]}") as pool:
        contexts = [pool.sandbox(task, key=f"bench-{i}") for i in range(args.containers)]
        sandboxes = [await context.__aenter__() for context in contexts]
        try:
            for _ in range(args.repeat):
                samples["clear_only"] += await _round(sandboxes, _clear_only)
                async with anyio.create_task_group() as tg:
                    for sandbox in sandboxes:
                        tg.start_soon(_leave_processes, sandbox, args.leftovers)

                async def kill(sandbox: DockerSandbox) -> None:
                    killed.append(await clear_for_tests(sandbox))

                samples["kill_and_clear"] += await _round(sandboxes, kill)
                samples["kill_and_clear_idle"] += await _round(sandboxes, clear_for_tests)
        finally:
            for context in reversed(contexts):
                await context.__aexit__(None, None, None)
    medians = {name: statistics.median(values) * 1000 for name, values in samples.items()}
    return {
        "benchmark": "verifier",
        "containers": args.containers,
        "repeat": args.repeat,
        "leftover_loops": args.leftovers,
        "processes_killed_median": statistics.median(killed) if killed else 0,
        "median_ms": {name: round(value, 1) for name, value in medians.items()},
        "p90_ms": {
            name: round(statistics.quantiles(values, n=10)[-1] * 1000, 1) for name, values in samples.items()
        },
        "delta_ms": round(medians["kill_and_clear"] - medians["clear_only"], 1),
        "delta_idle_ms": round(medians["kill_and_clear_idle"] - medians["clear_only"], 1),
    }


def main(argv: list[str]) -> int:
    p = parser(__doc__.splitlines()[0] if __doc__ else "verifier benchmark")
    p.set_defaults(repeat=15)
    p.add_argument("--containers", type=int, default=8)
    p.add_argument("--leftovers", type=int, default=3, help="background loops the agent leaves")
    args = p.parse_args(argv)
    emit(anyio.run(_main, args), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
