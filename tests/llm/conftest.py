"""Fixtures for the model room: simulators on loopback ports, tiny Harbor task dirs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import msgspec
import pytest

from rsr_async.config import SimConfig
from rsr_async.llm.sim import SimServer

FAST = SimConfig(port=0, prefill_us_per_token=0.0, decode_us_per_token=0.0)

SOLVE = """#!/bin/bash
set -e
cd "$WORKDIR"
cat > notes.txt <<'EOF'
alpha
beta
EOF
for n in 1 2 3; do
  echo "line $n" >> numbers.txt
done
if [ -f notes.txt ]; then
  wc -l notes.txt > count.txt
fi
echo done > status.txt
"""

INSTRUCTION = "Create notes.txt with two lines, numbers.txt with three lines, and status.txt."


def write_task(root: Path, name: str, instruction: str, solve: str) -> Path:
    task = root / name
    (task / "solution").mkdir(parents=True)
    (task / "instruction.md").write_text(instruction + "\n")
    (task / "solution" / "solve.sh").write_text(solve)
    (task / "task.toml").write_text(f'[task]\nname = "{name}"\n')
    return task


@pytest.fixture
def tasks_dir(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    write_task(root, "notes", INSTRUCTION, SOLVE)
    for i in range(20):
        write_task(root, f"t{i}", f"Task number {i}: write {i} into out{i}.txt.",
                   f"#!/bin/bash\necho {i} > out{i}.txt\n")
    return root


@pytest.fixture
async def sims() -> AsyncIterator[Callable[..., Any]]:
    """``await sims(n, **sim_overrides)`` -> n running SimServers (closed at teardown)."""
    async with AsyncExitStack() as stack:
        async def start(count: int = 1, **overrides: Any) -> list[SimServer]:
            config = msgspec.structs.replace(FAST, **overrides)
            return [await stack.enter_async_context(SimServer(config)) for _ in range(count)]

        yield start


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll ``predicate`` (state in another task or process) until true, or fail."""
    import anyio

    steps = int(timeout_s / 0.02)
    for _ in range(steps):
        if predicate():
            return
        await anyio.sleep(0.02)
    raise AssertionError(f"condition not met within {timeout_s} s")
