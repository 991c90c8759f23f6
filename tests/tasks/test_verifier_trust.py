"""Only the hidden tests decide the reward, and the agent's services stay up for them (issue 27).

Each attack is a hostile agent's move, made from the agent's own shell in a real
container. Each gets a control run first: the same tests graded by a *naive* verifier
(the sandbox's own ``bash``, ``rm`` and ``cat`` on the sandbox's own ``/tests`` and
``/logs/verifier``, the way verifiers are usually written, with the agent's processes
alive as Harbor leaves them), where the attack wins. Then :func:`verify` grades the same
failing work 0. The agent's processes are not killed: they are still running afterwards.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import msgspec
import pytest

from rsr_async.config import SandboxConfig
from rsr_async.sandbox import SandboxPool
from rsr_async.sandbox.base import Sandbox
from rsr_async.schema import Task
from rsr_async.tasks.verifier import (
    parse_reward_json,
    parse_reward_txt,
    stop_agent_processes,
    verify,
)

BASE = SandboxConfig().base_image
pytestmark = pytest.mark.docker

REWARD = "/logs/verifier/reward.txt"
LOOP = f"while true; do mkdir -p /logs/verifier; echo 1 > {REWARD}; sleep 0.02; done"
THROUGH_PROC = ("while true; do for p in /proc/[0-9]*; do echo 1 > $p/root/logs/verifier/reward.txt; "
                "done 2>/dev/null; sleep 0.02; done")
WRITERS = {
    "job": f"({LOOP}) &",  # the plain attack, typed at the prompt
    "nohup": f"nohup bash -c '{LOOP}' > /dev/null 2>&1 &",
    "setsid": f"setsid bash -c '{LOOP}' > /dev/null 2>&1 < /dev/null &",
    "double-fork": f"( ( {LOOP} ) > /dev/null 2>&1 & )",  # the loop's parent exits at once
    "through-proc": f"setsid bash -c '{THROUGH_PROC}' > /dev/null 2>&1 < /dev/null &",
}
FAILING_TEST = (
    "#!/bin/bash\n"
    'echo "before: [$(ls -A /logs/verifier | grep -v test-stdout.txt)]"\n'
    f"echo 0 > {REWARD}\n"
    "sleep 0.5\n"  # a live loop rewrites the reward many times over meanwhile
)


def task_with(tmp_path: Path, test_sh: str, name: str = "reward-attack", **files: str) -> Task:
    tests = tmp_path / name / "tests"
    tests.mkdir(parents=True, exist_ok=True)
    (tests / "test.sh").write_text(test_sh)
    for file, text in files.items():
        (tests / file).write_text(text)
    return Task(name=name, path=str(tmp_path / name), instruction="-", docker_image=BASE,
                tests_dir=str(tests), verifier_timeout_s=30, workdir="/tmp")


async def naive_verify(sandbox: Sandbox, task: Task, *, until_reward: str | None = None,
                       until_tests: str | None = None) -> float:
    """The control: clean up, upload, run and read with the sandbox's own tools and paths.
    With ``until_reward``, the read waits (20 s at most) until the reward says that, as a
    live writer's next whole write lands after the tests' own; with ``until_tests`` (a
    shell condition), the run waits until it holds: the attack on /tests has landed."""
    await sandbox.run("rm -rf /tests /logs/verifier; mkdir -p /logs/verifier", time_limit=20)
    await sandbox.upload(Path(task.tests_dir), "/tests")
    if until_tests:
        await sandbox.run(f"until {until_tests}; do sleep 0.01; done", time_limit=20)
    await sandbox.run(f"bash /tests/{task.test_script}", time_limit=20)
    if until_reward:  # one whole read (a read can land between a writer's truncate and write)
        command = (f'v=; until [ "$v" = {until_reward} ]; do v=$(cat {REWARD} 2>/dev/null); sleep 0.01; done; '
                   'echo txt; echo "$v"')
    else:
        command = (f"if [ -f /logs/verifier/reward.json ]; then echo json; cat /logs/verifier/reward.json; "
                   f"else echo txt; cat {REWARD}; fi")
    read = await sandbox.run(command, time_limit=20)
    assert not read.timed_out, read.output
    kind, _, text = read.output.partition("\n")
    return parse_reward_json(text)["reward"] if kind == "json" else parse_reward_txt(text)


async def agent_types(sandbox: Sandbox, keys: str) -> None:
    shell = await sandbox.shell()
    await shell.send(keys + "\n")
    await shell.wait(0.5)  # a command that leaves a job running waits its full duration


async def alive(sandbox: Sandbox, pattern: str) -> int:
    """How many processes' command lines match ``pattern`` (its first character bracketed,
    so the listing's own shell, whose command line holds the pattern, is not counted)."""
    regex = f"[{pattern[0]}]{pattern[1:]}"
    found = await sandbox.run(f"pgrep -f -c -- '{regex}' || true", time_limit=20)
    return int(found.output.strip().splitlines()[-1])


async def test_background_writers_of_the_reward_lose(pool: SandboxPool, tmp_path: Path) -> None:
    task = task_with(tmp_path, FAILING_TEST)
    async with pool.sandbox(task, key="writers") as sandbox:
        for attack, keys in WRITERS.items():
            await agent_types(sandbox, keys)
            # the writer is live (synchronised on what it writes, not on a sleep)
            await sandbox.run(f"until grep -qx 1 {REWARD}; do sleep 0.01; done", time_limit=20)
            assert await naive_verify(sandbox, task, until_reward="1") == 1.0, attack  # it wins there
            result = await verify(sandbox, task)
            assert result.reward == 0.0 and not result.passed, (attack, result.output)
            assert "before: []" in result.output, attack  # the tests saw a fresh, empty /logs/verifier
            assert result.tampered is None, attack
            # Harbor's shared mode: what the agent started is still running after the tests
            still = await sandbox.run(f"rm -f {REWARD}; until grep -qx 1 {REWARD}; do sleep 0.01; done; "
                                      "echo live", time_limit=20)
            assert still.output.strip().endswith("live"), (attack, still.output)
            await stop_agent_processes(sandbox)  # the next attack starts from a quiet sandbox


async def test_a_background_writer_of_the_tests_loses(pool: SandboxPool, tmp_path: Path) -> None:
    test_sh = ("#!/bin/bash\nsleep 0.5\n"
               f'if [ "$(cat /tests/expected)" = "$(cat /app/out)" ]; then echo 1; else echo 0; fi > {REWARD}\n')
    task = task_with(tmp_path, test_sh, expected="right\n")
    async with pool.sandbox(task, key="tests-writer") as sandbox:
        await sandbox.run("mkdir -p /app && echo wrong > /app/out", time_limit=20)
        # the agent keeps "correcting" whatever answer key appears in /tests
        await agent_types(sandbox, "setsid bash -c 'while true; do [ -d /tests ] && echo wrong > /tests/.e && "
                                   "mv /tests/.e /tests/expected; sleep 0.01; done' > /dev/null 2>&1 < /dev/null &")
        assert await naive_verify(sandbox, task, until_tests="grep -qx wrong /tests/expected") == 1.0
        result = await verify(sandbox, task)
        assert result.reward == 0.0, result.output
        # and nothing of the hidden tests is left where the agent can read it
        after = await sandbox.run("ls -A /tests 2>&1; cat /tests/expected 2>&1", time_limit=20)
        assert "right" not in after.output


SHADOW_CAT = ('#!/bin/bash\ncase "$*" in *logs/verifier*) echo 1 ;; *) exec /bin/cat "$@" ;; esac\n')
NOOP_RM = "#!/bin/bash\nexit 0\n"


async def test_a_shadowed_cat_cannot_forge_the_reward(pool: SandboxPool, tmp_path: Path) -> None:
    task = task_with(tmp_path, f"#!/bin/bash\necho 0 > {REWARD}\n")
    async with pool.sandbox(task, key="shadow-cat") as sandbox:
        await sandbox.run(f"cat > /usr/local/bin/cat <<'EOF'\n{SHADOW_CAT}EOF\nchmod +x /usr/local/bin/cat",
                          time_limit=20)
        assert await naive_verify(sandbox, task) == 1.0
        result = await verify(sandbox, task)
        assert result.reward == 0.0 and result.logs["reward.txt"] == "0\n"


@pytest.mark.parametrize("planted", ["reward.json", "reward.txt"])
async def test_a_shadowed_rm_with_a_planted_reward_cannot_forge_it(
    pool: SandboxPool, tmp_path: Path, planted: str
) -> None:
    # The tests write nothing when the work is missing: a planted reward would stand.
    task = task_with(tmp_path, "#!/bin/bash\n[ -f /app/done ] && echo 1 > /logs/verifier/reward.txt\ntrue\n")
    body = '{"reward": 1}' if planted == "reward.json" else "1"
    async with pool.sandbox(task, key=f"shadow-rm-{planted}") as sandbox:
        await sandbox.run(f"printf '{NOOP_RM}' > /usr/local/bin/rm && chmod +x /usr/local/bin/rm && "
                          f"mkdir -p /logs/verifier && echo '{body}' > /logs/verifier/{planted}", time_limit=20)
        assert await naive_verify(sandbox, task) == 1.0
        with pytest.raises(Exception, match="no /logs/verifier/reward.json or reward.txt") as info:
            await verify(sandbox, task)
        assert getattr(info.value, "permanent", False)  # the task's fault: never graded, never retried


async def test_moving_the_verifier_directories_voids_the_run(pool: SandboxPool, tmp_path: Path) -> None:
    task = task_with(tmp_path, FAILING_TEST)
    async with pool.sandbox(task, key="detach") as sandbox:
        # Removing /logs/verifier from outside detaches a mount there in another mount
        # namespace (Linux's rule since 3.18); the agent then plants its own.
        await agent_types(sandbox, "setsid bash -c 'while true; do rm -rf /logs/verifier; mkdir -p "
                                   f"/logs/verifier; echo 1 > {REWARD}; sleep 0.01; done' > /dev/null 2>&1 < /dev/null &")
        result = await verify(sandbox, task)
        assert result.reward == 0.0 and not result.passed
        assert result.tampered and "/logs/verifier" in result.tampered


SERVICE_TEST = ("#!/bin/bash\n"
                "if python3 -c \"import urllib.request as u; assert u.urlopen('http://127.0.0.1:8765/health.txt', "
                f"timeout=5).read() == b'ok\\\\n'\"; then echo 1; else echo 0; fi > {REWARD}\n")


async def test_a_service_the_agent_left_running_is_tested_and_stop_agent_is_opt_in(
    pool: SandboxPool, tmp_path: Path
) -> None:
    task = task_with(tmp_path, SERVICE_TEST)
    async with pool.sandbox(task, key="service") as sandbox:
        await agent_types(sandbox, "mkdir -p /srv/www && echo ok > /srv/www/health.txt && cd /srv/www && "
                                   "nohup python3 -m http.server 8765 > /dev/null 2>&1 &")
        await sandbox.run("until python3 -c \"import urllib.request as u; u.urlopen('http://127.0.0.1:8765/')\" "
                          "2>/dev/null; do sleep 0.05; done", time_limit=20)
        assert (await verify(sandbox, task)).passed  # Harbor's default: the server is still up
        # The opt-in kill takes the server down with the agent's other processes.
        assert not (await verify(sandbox, task, stop_agent=True)).passed


async def test_the_tests_run_as_the_verifier_user_with_the_sandbox_environment(
    pool: SandboxPool, tmp_path: Path
) -> None:
    test_sh = (f"#!/bin/bash\necho \"user=$(id -un) dir=$PWD mode=$MODE\"\n"
               f"[ \"$(id -u)\" = 65534 ] && [ \"$MODE\" = strict ] && echo 1 > {REWARD}\ntrue\n")
    task = msgspec.structs.replace(task_with(tmp_path, test_sh), verifier_user="nobody",
                                   verifier_env={"MODE": "strict"}, workdir="/tmp")
    async with pool.sandbox(task, key="user") as sandbox:
        result = await verify(sandbox, task)
    assert result.passed, result.output
    assert "user=nobody dir=/tmp mode=strict" in result.output


async def test_stopping_the_agent_is_opt_in_and_counts_what_it_killed(pool: SandboxPool, tmp_path: Path) -> None:
    task = task_with(tmp_path, f"#!/bin/bash\necho 1 > {REWARD}\n")
    async with pool.sandbox(task, key="count") as sandbox:
        assert await stop_agent_processes(sandbox) == 0  # a fresh sandbox: nothing to kill
        await sandbox.run("for i in 1 2 3; do setsid sleep 1000 > /dev/null 2>&1 < /dev/null & done", time_limit=20)
        assert (await verify(sandbox, task)).passed
        assert await alive(sandbox, "sleep 1000") == 3  # the default keeps them
        assert await stop_agent_processes(sandbox) == 3
        assert await alive(sandbox, "sleep 1000") == 0
        assert (await verify(sandbox, task, stop_agent=True)).passed  # the sandbox still works


def _pids_files(pid: int) -> tuple[Path, Path, bool]:
    """The host's pids.current and pids.max of the cgroup process ``pid`` is in, and
    whether that is a cgroup v1 pids hierarchy (the tests stay out of it) or v2's one."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        v1 = "pids" in controllers.split(",")
        roots = [Path("/sys/fs/cgroup/pids")] if v1 else (
            [Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")] if controllers == "" else [])
        for root in roots:
            if (root / path.lstrip("/") / "pids.max").exists():
                return root / path.lstrip("/") / "pids.current", root / path.lstrip("/") / "pids.max", v1
    raise AssertionError(f"no pids cgroup found for pid {pid}")


async def test_a_fork_bomb_left_running_still_lets_the_tests_grade(tmp_path: Path) -> None:
    config = SandboxConfig(starts_per_s=20.0, api_timeout_s=60.0, pids_limit=64)
    task = task_with(tmp_path, f"#!/bin/bash\n[ -f /tmp/answer ] && echo 1 > {REWARD} || echo 0 > {REWARD}\n")
    async with SandboxPool(config, run_id=f"test-bomb-{uuid.uuid4().hex[:8]}", run_dir=tmp_path / "run") as pool:
        async with pool.sandbox(task, key="bomb") as sandbox:
            info = await sandbox._container.show()
            current, limit, v1 = _pids_files(int(info["State"]["Pid"]))
            await agent_types(sandbox, "touch /tmp/answer; b() { b | b & }; b")
            for _ in range(1200):  # synchronised on the cgroup's own count (60 s at most)
                if int(current.read_text()) >= int(limit.read_text()):
                    break
                await anyio.sleep(0.05)
            else:
                raise AssertionError("the fork bomb never filled the process limit")
            result = await verify(sandbox, task)
        assert await pool.containers() == []
    if v1:  # the tests start outside the full pids cgroup and grade what is on disk
        assert result.passed and result.tampered is None, result.output
    else:  # one cgroup holds them all: no room to start, the agent's doing
        assert result.reward == 0.0 and result.tampered and "process limit" in result.tampered
