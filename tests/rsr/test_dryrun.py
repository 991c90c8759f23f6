"""The whole engine on fake sandboxes: the fake pool grades by what the agent typed, and
``bench dryrun`` (small) survives a SIGKILL of its head with every job stored once."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio
import pytest

from rsr_async.harness.fakes import FakeShell
from rsr_async.sandbox.base import SandboxProvider
from rsr_async.tasks import BUNDLED_SUITE, load_dataset, verify
from rsr_async.testing import FakeSandboxPool
from tests.conftest import PYTHON, REPO, run_cli_env


def test_the_fake_pool_passes_an_agent_that_typed_the_reference_solution_and_fails_one_that_did_not() -> None:
    task = next(t for t in load_dataset([str(BUNDLED_SUITE)]).tasks if t.name == "merge-intervals")
    solution = (Path(task.path) / "solution" / "solve.sh").read_text()

    async def episode(keys: str) -> tuple[bool, float | None, str]:
        pool: SandboxProvider = FakeSandboxPool()
        async with pool.sandbox(task, key="discover/merge-intervals/terminus2/a0/-/e-1") as sandbox:
            shell = await sandbox.shell()
            assert isinstance(shell, FakeShell)
            await shell.send(keys)
            verification = await verify(sandbox, task)
        return verification.passed, verification.reward, verification.output

    solved = anyio.run(episode, f"bash <<'RSR_EOF'\n{solution}\nRSR_EOF\n")
    assert solved[:2] == (True, 1.0)
    wrong = anyio.run(episode, "cat /app/answer.txt\n")
    assert wrong[:2] == (False, 0.0)
    assert wrong[2] == "solution missing\n"


@pytest.mark.slow
def test_dryrun_is_killed_mid_run_and_resumes_with_every_job_stored_exactly_once(tmp_path: Path) -> None:
    out = tmp_path / "dryrun.json"
    done = subprocess.run(
        [PYTHON, "-m", "rsr_async", "bench", "dryrun", "--episodes", "200", "--kill-at", "0.4",
         "--run-dir", str(tmp_path / "run"), "--json", str(out)],
        cwd=REPO, env=run_cli_env(), capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    killed, resumed = report["phases"]
    assert killed["exit_code"] == -9 and killed["killed_after_episodes"] >= 80
    assert resumed["exit_code"] == 0
    resume = report["resume"]
    assert resume["checked"] and resume["finished_before_kill"] > 0
    assert resume["finished_jobs"] == resume["expected_jobs"] > report["episodes_done"]
    for key in ("lost", "unexpected", "duplicated", "redone_after_resume", "orphans"):
        assert resume[key] == 0, (key, resume)
    # the whole graph ran: rewrites of discovered successes, and the model-only jobs
    bundled = len(load_dataset([str(BUNDLED_SUITE)]).tasks)
    [attempts] = [int(s.split("=")[1]) for s in report["settings"] if s.startswith("run.attempts=")]
    assert report["discover_episodes"] == bundled * attempts and report["rewrite_episodes"] > 0
    assert all(report["model_jobs"][stage] > 0 for stage in ("plan", "critique", "audit"))
    assert report["statuses"].keys() <= {"succeeded", "failed"}
    assert 0 < report["head_peak_rss_bytes"] < 2 * 1024**3
    assert report["failures"] == []
