"""The verifier in real containers: every reward form, every error form, legacy pytest."""

from __future__ import annotations

import math
from pathlib import Path

import anyio
import msgspec
import pytest

from rsr_async.config import SandboxConfig
from rsr_async.errors import TaskError
from rsr_async.sandbox import SandboxPool
from rsr_async.schema import Task
from rsr_async.tasks import (
    VerificationError,
    load_task,
    parse_pytest_summary,
    parse_reward_json,
    parse_reward_txt,
    run_oracle,
    try_verify,
    verify,
)

BASE = SandboxConfig().base_image
pytestmark = pytest.mark.docker


def harbor_task(tmp_path: Path, test_sh: str, **fields: object) -> Task:
    """A Harbor task on the base image whose tests/test.sh is ``test_sh``."""
    tests = tmp_path / "tests"
    tests.mkdir(parents=True, exist_ok=True)
    (tests / "test.sh").write_text("#!/bin/bash\nmkdir -p /logs/verifier\n" + test_sh)
    base = Task(name="verifier-fixture", path=str(tmp_path), instruction="-", docker_image=BASE,
                tests_dir=str(tests), verifier_timeout_s=20, workdir="/tmp")
    return msgspec.structs.replace(base, **fields)  # type: ignore[arg-type]


# -- pure parsing -----------------------------------------------------------------------


def test_parse_reward_forms() -> None:
    assert parse_reward_txt(" 1\n") == 1.0 and parse_reward_txt("0.25") == 0.25
    assert parse_reward_json('{"reward": 0.5, "a": 1, "b": 0}') == {"reward": 0.5, "a": 1.0, "b": 0.0}
    for bad in ("", "  \n", "yes", "nan", "inf"):
        with pytest.raises(ValueError):
            parse_reward_txt(bad)
    for bad in ("", "[]", "{}", '{"a": "1"}', '{"a": true}', '{"a": NaN}', "{", '{"a": {"b": 1}}'):
        with pytest.raises(ValueError):
            parse_reward_json(bad)


def test_parse_pytest_summary() -> None:
    summary = (
        "...F\n=========================== short test summary info ============================\n"
        "PASSED tests/test_outputs.py::test_a\nPASSED tests/test_outputs.py::test_b\n"
        "FAILED tests/test_outputs.py::test_c - assert 1 == 2\n========= 1 failed, 2 passed in 0.03s =========\n"
    )
    assert parse_pytest_summary(summary) == {"reward": 0.0, "tests_passed": 2 / 3}
    # terminal-bench's PytestParser reads only the -rA summary: a bare final line is unparseable
    for unparseable in ("== 3 passed in 0.01s ==", "bash: pytest: command not found\n"):
        with pytest.raises(ValueError, match="short test summary info"):
            parse_pytest_summary(unparseable)


# -- real containers ------------------------------------------------------------------------


REWARDS = [
    ("echo 1 > /logs/verifier/reward.txt", 1.0, {"reward": 1.0}),
    ("echo 0 > /logs/verifier/reward.txt; exit 1", 0.0, {"reward": 0.0}),
    ("printf '0.375' > /logs/verifier/reward.txt", 0.375, {"reward": 0.375}),
    ("""echo '{"reward": 0.6, "parse": 1, "totals": 0}' > /logs/verifier/reward.json""",
     0.6, {"reward": 0.6, "parse": 1.0, "totals": 0.0}),
    ("""echo '{"parse": 1, "totals": 0.5}' > /logs/verifier/reward.json""", 0.75, {"parse": 1.0, "totals": 0.5}),
    # reward.json wins over reward.txt
    ("""echo 0 > /logs/verifier/reward.txt; echo '{"reward": 1}' > /logs/verifier/reward.json""",
     1.0, {"reward": 1.0}),
]


async def test_every_reward_form(pool: SandboxPool, tmp_path: Path) -> None:
    first = harbor_task(tmp_path / "0", REWARDS[0][0])
    async with pool.sandbox(first, key="rewards") as sandbox:
        for index, (script, reward, rewards) in enumerate(REWARDS):
            task = harbor_task(tmp_path / str(index), f"echo checking {index}\n{script}")
            result = await verify(sandbox, task)
            assert result.reward == pytest.approx(reward), script
            assert result.rewards == pytest.approx(rewards), script
            assert f"checking {index}" in result.output
            assert result.error is None


ERRORS = [
    ("true", "no /logs/verifier/reward.json or reward.txt"),
    (": > /logs/verifier/reward.txt", "reward.txt is empty"),
    ("echo passed > /logs/verifier/reward.txt", "not a number"),
    ("echo '[1, 2]' > /logs/verifier/reward.json", "non-empty object"),
    ("""echo '{"reward": "high"}' > /logs/verifier/reward.json""", "not a finite number"),
    ("echo '{not json' > /logs/verifier/reward.json", "not JSON"),
    ("echo started; sleep 30; echo 1 > /logs/verifier/reward.txt", "timed out after 2s"),
]


async def test_every_error_form(pool: SandboxPool, tmp_path: Path) -> None:
    first = harbor_task(tmp_path / "0", "true")
    async with pool.sandbox(first, key="errors") as sandbox:
        for index, (script, words) in enumerate(ERRORS):
            task = harbor_task(tmp_path / str(index), f"echo case {index}\n{script}", verifier_timeout_s=2)
            with pytest.raises(VerificationError) as info:
                await verify(sandbox, task)
            assert words in str(info.value), (script, str(info.value))
            assert "verifier-fixture" in str(info.value)
            assert f"case {index}" in info.value.output  # the output is kept with the error
            soft = await try_verify(sandbox, task)
            assert soft.reward is None and soft.error and words in soft.error and not soft.passed


async def test_planted_reward_does_not_count_and_tests_do_not_stay(pool: SandboxPool, tmp_path: Path) -> None:
    task = harbor_task(tmp_path, "ls /tests > /tmp/seen; true")  # writes no reward
    async with pool.sandbox(task, key="planted") as sandbox:
        await sandbox.run("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt", time_limit=10)
        with pytest.raises(VerificationError, match="no /logs/verifier"):
            await verify(sandbox, task)
        seen = await sandbox.run("cat /tmp/seen; ls /tests /logs/verifier", time_limit=10)
        assert seen.output.startswith("test.sh\n")  # the tests were there while they ran ...
        assert "No such file" in seen.output and seen.exit_code != 0  # ... and are gone now


async def test_verifier_env_and_workdir(pool: SandboxPool, tmp_path: Path) -> None:
    task = harbor_task(tmp_path, 'echo "$(pwd) $STRICT"; [ "$STRICT" = 1 ] && echo 1 > /logs/verifier/reward.txt',
                       verifier_env={"STRICT": "1"}, workdir="/var")
    async with pool.sandbox(task, key="env") as sandbox:
        result = await verify(sandbox, task)
        missing = msgspec.structs.replace(task, tests_dir=str(tmp_path / "gone"))
        with pytest.raises(TaskError, match="no tests directory"):
            await verify(sandbox, missing)
    assert result.reward == 1.0 and "/var 1" in result.output


async def test_tests_start_where_docker_exec_starts(pool: SandboxPool, tmp_path: Path) -> None:
    """No workdir given: the tests start in the image's WORKDIR, where `docker exec` starts
    and so where Harbor's and terminal-bench's verifiers run them (terminal-bench's
    run-tests.sh template refuses to run from /)."""
    root = tmp_path / "in-workdir"
    (root / "tests").mkdir(parents=True)
    (root / "task.yaml").write_text("instruction: Nothing to do.\n")
    (root / "Dockerfile").write_text(f"ARG BASE_IMAGE={BASE}\nFROM ${{BASE_IMAGE}}\nWORKDIR /srv/work\n")
    (root / "run-tests.sh").write_text(
        '#!/bin/bash\nif [ "$PWD" = "/" ]; then echo "Error: No working directory set."; exit 1; fi\n'
        'echo "ran in $PWD"\npython3 -m pytest -p no:cacheprovider -rA "$TEST_DIR/test_outputs.py"\n'
    )
    (root / "tests" / "test_outputs.py").write_text("import os\ndef test_cwd(): assert os.getcwd() == '/srv/work'\n")
    task = load_task(root)
    tag = await pool.ensure_image(task)
    try:
        async with pool.sandbox(task, key="workdir") as sandbox:
            result = await verify(sandbox, task)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.run_process(["docker", "rmi", "-f", tag], check=False)
    assert result.passed and "ran in /srv/work" in result.output, result.output


async def test_legacy_pytest_verdicts(pool: SandboxPool, fixtures: Path, tmp_path: Path) -> None:
    task = msgspec.structs.replace(load_task(fixtures / "legacy/legacy-hello"), docker_image=BASE,
                                   environment_dir=None)
    async with pool.sandbox(task, key="legacy") as sandbox:
        failing = await verify(sandbox, task)
        assert failing.reward == 0.0 and failing.rewards["tests_passed"] == 0.0
        assert "FAILED" in failing.output
        await sandbox.run("mkdir -p /app && echo nope > /app/hello.txt", time_limit=10)
        half = await verify(sandbox, task)
        assert half.reward == 0.0 and half.rewards["tests_passed"] == 0.5
        result = await run_oracle(sandbox, task)
        assert result.exit_code == 0
        passing = await verify(sandbox, task)
        assert passing.reward == 1.0 and passing.passed
        # the solution was uploaded to a temporary path and removed again
        left = await sandbox.run("ls -d /tmp/rsr-oracle-* /solution 2>/dev/null | wc -l", time_limit=10)
        assert left.output.strip() == "0"
    broken = tmp_path / "legacy"
    broken.mkdir()
    (broken / "run-tests.sh").write_text("echo no pytest here\n")
    bad = msgspec.structs.replace(task, path=str(broken))
    async with pool.sandbox(bad, key="legacy-bad") as sandbox:
        with pytest.raises(VerificationError, match="short test summary info"):
            await verify(sandbox, bad)


async def test_legacy_swebench_parser_grades_by_its_markers(pool: SandboxPool, fixtures: Path) -> None:
    """parser_name: swebench reads the verdict between SWE-bench's markers; the output's
    "1 passed" would fool a pytest-summary grader, and must not count."""
    task = msgspec.structs.replace(load_task(fixtures / "legacy/legacy-swebench"), docker_image=BASE,
                                   environment_dir=None)
    assert task.test_parser == "swebench"
    async with pool.sandbox(task, key="swebench") as sandbox:
        await sandbox.run("mkdir -p /app", time_limit=10)
        failing = await verify(sandbox, task)
        assert "1 passed" in failing.output and failing.reward == 0.0
        assert failing.rewards == {"reward": 0.0, "tests_passed": 0.0}
        assert (await run_oracle(sandbox, task)).exit_code == 0
        passing = await verify(sandbox, task)
        assert passing.passed and passing.rewards == {"reward": 1.0, "tests_passed": 1.0}
        await sandbox.run("rm /app/fixed", time_limit=10)
        no_markers = msgspec.structs.replace(task, test_parser="sweperf")  # its markers are absent
        with pytest.raises(VerificationError, match="no SWE-Perf results"):
            await verify(sandbox, no_markers)


async def test_oracle_on_harbor_fixture(pool: SandboxPool, fixtures: Path) -> None:
    task = msgspec.structs.replace(load_task(fixtures / "harbor/full-harbor"), docker_image=BASE,
                                   environment_dir=None)
    async with pool.sandbox(task, key="oracle") as sandbox:
        await sandbox.run("mkdir -p /app", time_limit=10)
        before = await verify(sandbox, task)
        assert before.reward == 0.0
        result = await run_oracle(sandbox, task)
        assert result.exit_code == 0 and not result.timed_out
        after = await verify(sandbox, task)
        assert after.passed and not math.isnan(after.reward or 0)


async def test_a_lost_verifier_station_is_replaced(pool: SandboxPool, tmp_path: Path) -> None:
    """The station container removed under a live pool (a daemon restart, an operator's
    `docker rm`): that verification is infrastructure, and the next one starts a new one."""
    from rsr_async.errors import SandboxError
    from rsr_async.sandbox.hidden import STATION_EPISODE
    from rsr_async.sandbox.ownership import LABEL_EPISODE, LABEL_RUN

    task = harbor_task(tmp_path, "echo 1 > /logs/verifier/reward.txt")
    async with pool.sandbox(task, key="station-lost") as sandbox:
        assert (await verify(sandbox, task)).passed
        listing = await anyio.run_process(["docker", "ps", "-q", "--filter", f"label={LABEL_RUN}={pool.run_id}",
                                           "--filter", f"label={LABEL_EPISODE}={STATION_EPISODE}"])
        [station] = listing.stdout.decode().split()
        await anyio.run_process(["docker", "rm", "-f", station])
        with pytest.raises(SandboxError):
            await verify(sandbox, task)
        assert (await verify(sandbox, task)).passed
