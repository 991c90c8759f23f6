"""The verifier keeps what Harbor keeps of /logs/verifier, bounded (issue 15)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from rsr_async.errors import SandboxError
from rsr_async.sandbox import SandboxPool
from rsr_async.schema import EpisodeResult, JobKey
from rsr_async.tasks import try_verify, verify
from rsr_async.tasks.verifier import MAX_LOG_FILE_CHARS, MAX_LOGS_CHARS, STDOUT_LOG, cap_logs

from .test_verifier import harbor_task

CTRF = {"results": {"tool": {"name": "pytest"}, "summary": {"tests": 2, "passed": 1, "failed": 1},
                    "tests": [{"name": "test_a", "status": "passed"}, {"name": "test_b", "status": "failed"}]}}

TEST_SH = f"""
cat > /logs/verifier/ctrf.json <<'JSON'
{json.dumps(CTRF)}
JSON
printf 'collected 2 items\\ntest_b FAILED\\n' > /logs/verifier/test.log
mkdir -p /logs/verifier/sub && echo nested > /logs/verifier/sub/extra.txt
head -c 150000 /dev/zero | tr '\\0' x > /logs/verifier/big.log
echo "stdout of the test script"
echo 0.5 > /logs/verifier/reward.txt
"""


@pytest.mark.docker
async def test_verifier_logs_are_kept_capped(pool: SandboxPool, tmp_path: Path) -> None:
    task = harbor_task(tmp_path, TEST_SH)
    async with pool.sandbox(task, key="logs-kept") as sandbox:
        verdict = await verify(sandbox, task)
        gone = await sandbox.run("ls /logs/verifier 2>&1; echo done", time_limit=10)
    assert verdict.reward == 0.5
    logs = verdict.logs
    assert json.loads(logs["ctrf.json"]) == CTRF
    assert logs["test.log"] == "collected 2 items\ntest_b FAILED\n"
    assert logs["sub/extra.txt"] == "nested\n"
    assert logs["reward.txt"] == "0.5\n"
    assert logs[STDOUT_LOG].strip() == "stdout of the test script"
    big = logs["big.log"]
    assert len(big) <= MAX_LOG_FILE_CHARS and big.startswith("xxx") and big.endswith("xxx")
    assert "bytes omitted ...]" in big
    assert sum(len(v) for v in logs.values()) <= MAX_LOGS_CHARS
    assert "No such file" in gone.output  # removed afterwards, as before


@pytest.mark.docker
async def test_logs_are_kept_when_no_reward_was_written(pool: SandboxPool, tmp_path: Path) -> None:
    task = harbor_task(tmp_path, "echo 'E   assert 1 == 2' > /logs/verifier/test.log\necho boom\n")
    async with pool.sandbox(task, key="logs-no-reward") as sandbox:
        verdict = await try_verify(sandbox, task)
    assert verdict.reward is None and verdict.error
    assert verdict.logs["test.log"] == "E   assert 1 == 2\n"
    assert "boom" in verdict.logs[STDOUT_LOG]


def test_cap_logs_bounds_the_total_with_a_marker() -> None:
    files = {f"f{i}.log": "y" * 100_000 for i in range(5)}
    capped = cap_logs(files)
    assert list(capped) == list(files)
    assert all(len(v) <= MAX_LOG_FILE_CHARS for v in capped.values())
    assert sum(len(v) for v in capped.values()) <= MAX_LOGS_CHARS
    assert "not kept" in capped["f4.log"] and "omitted" in capped["f0.log"]


def test_episode_results_keep_logs_in_the_heavy_part_and_old_ones_decode() -> None:
    old = {"key": {"stage": "discover", "task": "t"}, "status": "failed", "end_reason": "completed", "reward": 0.0}
    decoded = msgspec.json.decode(json.dumps(old).encode(), type=EpisodeResult)
    assert decoded.verifier_logs == {}
    result = EpisodeResult(key=JobKey(stage="discover", task="t"), status="failed",
                           verifier_logs={"ctrf.json": "{}"})
    assert "verifier_logs" in EpisodeResult.heavy
    light = result.light()
    assert isinstance(light, EpisodeResult) and light.verifier_logs == {}
    again = msgspec.json.decode(msgspec.json.encode(result), type=EpisodeResult)
    assert again.verifier_logs == {"ctrf.json": "{}"}


class _RefusesFirstExec:
    """A real sandbox whose first exec is refused, as a sandbox full of the agent's
    processes (a fork bomb at the pids limit) refuses one."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def run(self, command: str, **kwargs: Any) -> Any:
        if not self.refused:
            self.refused += 1
            raise SandboxError("OCI runtime exec failed: resource temporarily unavailable")
        return await self._inner.run(command, **kwargs)


@pytest.mark.docker
async def test_the_opt_in_stop_tries_a_fresh_exec_when_one_is_refused(pool: SandboxPool, tmp_path: Path) -> None:
    task = harbor_task(tmp_path, "echo 1 > /logs/verifier/reward.txt\n")
    async with pool.sandbox(task, key="clean-up-retry") as sandbox:
        flaky = _RefusesFirstExec(sandbox)
        verdict = await verify(flaky, task, stop_agent=True)  # type: ignore[arg-type]
    assert flaky.refused == 1 and verdict.reward == 1.0
