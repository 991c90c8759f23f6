"""Only the hidden tests write the reward: processes the agent left behind are killed first.

The attack: the agent starts a loop that keeps writing ``1`` to ``/logs/verifier/reward.txt``
and leaves it running (plain ``&``, ``nohup``, ``setsid``, a double fork), so that a
task whose tests fail would read as passed. Real containers, real processes.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from rsr_async.config import SandboxConfig
from rsr_async.sandbox import SandboxPool
from rsr_async.schema import Task
from rsr_async.tasks.verifier import stop_agent_processes, verify

BASE = SandboxConfig().base_image
pytestmark = pytest.mark.docker

LOOP = "while true; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done"
ATTACKS = [
    f"({LOOP}) &",  # the exact attack, typed at the prompt
    f"nohup bash -c '{LOOP}' > /dev/null 2>&1 &",
    f"setsid bash -c '{LOOP}' > /dev/null 2>&1 < /dev/null &",
    f"( ( {LOOP} ) > /dev/null 2>&1 & )",  # double fork: the loop's parent exits at once
]
FAILING_TEST = (
    "#!/bin/bash\n"
    "echo \"before: [$(ls -A /logs/verifier)]\"\n"
    "echo 0 > /logs/verifier/reward.txt\n"
    "sleep 0.5\n"  # a live loop rewrites the reward ten times over meanwhile
)


def failing_task(tmp_path: Path) -> Task:
    tests = tmp_path / "tests"
    tests.mkdir(parents=True, exist_ok=True)
    (tests / "test.sh").write_text(FAILING_TEST)
    return Task(name="reward-attack", path=str(tmp_path), instruction="-", docker_image=BASE,
                tests_dir=str(tests), verifier_timeout_s=30, workdir="/tmp")


async def processes(sandbox: object) -> list[str]:
    """``pid ppid args`` of every process but the listing's own exec."""
    run = sandbox.run  # type: ignore[attr-defined]
    out = await run("ps -eo pid=,ppid=,args= | grep -v -e 'ps -eo' -e 'timeout -k'", time_limit=20)
    return [line.strip() for line in out.output.splitlines() if line.strip()]


async def test_background_reward_writers_cannot_turn_a_failure_into_a_pass(
    pool: SandboxPool, tmp_path: Path
) -> None:
    task = failing_task(tmp_path)
    async with pool.sandbox(task, key="attack") as sandbox:
        await sandbox.upload(Path(task.tests_dir), "/tmp/control")
        for attack in ATTACKS:
            shell = await sandbox.shell()  # a new one each round: the last one was killed
            await shell.send(f"mkdir -p /logs/verifier; {attack}\n")
            # A command that leaves a job running waits its full duration (Harbor's rule);
            # the loop's first write below is what we synchronise on.
            await shell.wait(0.5)
            # The loop is live and writing (synchronised on the file it writes, not a sleep).
            await sandbox.run("rm -f /logs/verifier/reward.txt; until [ -s /logs/verifier/reward.txt ]; "
                              "do sleep 0.01; done; echo extra > /logs/verifier/notes", time_limit=20)
            # Control: the same tests run without the kill, and the attack wins.
            # Synchronised on the loop's next whole write after the test's 0 (a bare `cat` can
            # land between its truncate and its write, and read nothing); no win in 20 s: fails.
            control = await sandbox.run(
                "bash /tmp/control/test.sh; until grep -qx 1 /logs/verifier/reward.txt; "
                "do sleep 0.01; done; cat /logs/verifier/reward.txt", time_limit=20)
            assert not control.timed_out and control.output.strip().endswith("1"), (attack, control.output)

            result = await verify(sandbox, task)
            assert result.reward == 0.0 and not result.passed, (attack, result.output)
            assert "before: []" in result.output, attack  # planted reward and notes cleared first
            left = await processes(sandbox)
            # Only the container's own processes remain: docker-init and the command it started.
            assert len(left) == 2 and "docker-init" in left[0] and left[1].endswith("sleep infinity"), left
            assert not shell.alive, attack  # the agent's shell went with its children


async def test_stopping_spares_the_container_and_counts_what_it_killed(pool: SandboxPool, tmp_path: Path) -> None:
    task = failing_task(tmp_path)
    async with pool.sandbox(task, key="count") as sandbox:
        assert await stop_agent_processes(sandbox) == 0  # a fresh sandbox: nothing to kill
        await sandbox.run("for i in 1 2 3; do setsid sleep 1000 > /dev/null 2>&1 < /dev/null & done", time_limit=20)
        before = await processes(sandbox)
        assert sum("sleep 1000" in line for line in before) == 3, before
        assert await stop_agent_processes(sandbox) == 3
        assert await stop_agent_processes(sandbox) == 0
        after = await processes(sandbox)
        assert after == before[:2], (before, after)
        # the sandbox still works: the next verification runs normally
        passing = msgspec.structs.replace(task, name="reward-attack-pass")
        (Path(task.tests_dir) / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
        assert (await verify(sandbox, passing)).passed
