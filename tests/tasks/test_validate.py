"""``validate`` and the ``tasks`` CLI: real image builds, real containers."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import msgspec
import pytest

from rsr_async.config import SandboxConfig
from rsr_async.errors import ContainerError
from rsr_async.sandbox import Sandbox, SandboxPool
from rsr_async.sandbox.images import task_image_repository
from rsr_async.schema import Task
from rsr_async.tasks import BUNDLED_SUITE, load_task, run_oracle, validate
from rsr_async.tasks.keystrokes import COMPLETION_COMMAND, TerminalCommand, send_plan
from tests.conftest import run_cli_env

BASE = SandboxConfig().base_image


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rsr_async", "tasks", *args], env=run_cli_env(),
                          capture_output=True, text=True, timeout=timeout)


def _variant(root: Path, fixtures: Path, name: str, edits: dict[str, str] | None = None) -> Path:
    """A copy of the full Harbor fixture named ``name`` with some files replaced."""
    target = root / name
    shutil.copytree(fixtures / "harbor/full-harbor", target)
    toml = target / "task.toml"
    toml.write_text(toml.read_text().replace('name = "full-harbor"', f'name = "{name}"'))
    for rel, text in (edits or {}).items():
        (target / rel).write_text(text)
    return target


def _remove_images(names: list[str]) -> None:
    """Remove the throwaway images built for ``names`` (ours alone: named after them)."""
    for name in names:
        ids = subprocess.run(["docker", "images", "-q", task_image_repository(name)],
                             capture_output=True, text=True, timeout=60).stdout.split()
        if ids:
            subprocess.run(["docker", "rmi", "-f", *ids], capture_output=True, timeout=120)


def test_list_prints_a_table_and_reports_broken_tasks(fixtures: Path) -> None:
    out = _cli("list", str(fixtures / "harbor"), str(fixtures / "broken"))
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["name", "domain", "difficulty", "format", "agent", "verifier", "build"]
    assert lines[2].split() == ["full-harbor", "shell-scripting", "easy", "harbor", "120s", "45s", "90s"]
    assert lines[3].split()[0] == "minimal-harbor"
    assert "3 tasks" in out.stdout and "8 errors" in out.stdout
    assert "bad-toml" in out.stderr and str(fixtures / "broken/bad-toml/task.toml") in out.stderr


def test_list_defaults_to_the_bundled_suite() -> None:
    out = _cli("list")
    assert out.returncode == 0, out.stderr
    names = {p.name for p in BUNDLED_SUITE.iterdir() if p.is_dir()}
    listed = {line.split()[0] for line in out.stdout.splitlines()[2:] if line.strip() and line.split()[0] in names}
    assert listed == names


def test_list_shows_a_multi_step_task_step_by_step(tmp_path: Path) -> None:
    """A multi-step task's timeouts are its steps', in order (the task-level ones are only
    their defaults): one figure when they agree, each step's when they differ."""
    uneven = tmp_path / "uneven-steps"
    shutil.copytree(BUNDLED_SUITE / "log-triage-steps", uneven)
    toml = uneven / "task.toml"
    text = toml.read_text().replace('name = "rsr-async/log-triage-steps"', 'name = "rsr-async/uneven-steps"')
    text = text.replace('name = "count"\n', 'name = "count"\nagent.timeout_sec = 45\nverifier.timeout_sec = 20\n')
    toml.write_text(text)
    out = _cli("list", str(BUNDLED_SUITE / "log-triage-steps"), str(uneven))
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split()[3:] for line in out.stdout.splitlines()[2:] if line.strip()}
    assert rows["log-triage-steps"] == ["harbor/3-steps", "3x300s", "3x60s", "300s"]
    assert rows["uneven-steps"] == ["harbor/3-steps", "300s+45s+300s", "60s+20s+60s", "300s"]


@pytest.mark.docker
async def test_validate_flags_each_kind_of_bad_task(pool: SandboxPool, fixtures: Path, tmp_path: Path) -> None:
    good = _variant(tmp_path, fixtures, "v-good")
    passes_untouched = _variant(tmp_path, fixtures, "v-trivial",
                                {"tests/test.sh": "#!/bin/bash\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\n"})
    wrong_solution = _variant(tmp_path, fixtures, "v-wrong", {"solution/solve.sh": "echo nope > /app/out.txt\n"})
    no_reward = _variant(tmp_path, fixtures, "v-silent", {"tests/test.sh": "#!/bin/bash\necho forgot the reward\n"})
    unbuildable = _variant(tmp_path, fixtures, "v-unbuildable",
                           {"environment/Dockerfile": "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN exit 3\n"})
    tasks = [load_task(p) for p in (good, passes_untouched, wrong_solution, no_reward, unbuildable)]
    try:
        rows = await validate(tasks, pool, concurrency=3)
    finally:
        await anyio.to_thread.run_sync(_remove_images, [t.name for t in tasks])
    by_name = {r.name: r for r in rows}
    assert [r.name for r in rows] == [t.name for t in tasks]
    assert by_name["v-good"].ok and by_name["v-good"].oracle_reward == 1.0 and by_name["v-good"].nop_reward == 0.0
    assert by_name["v-trivial"].problems == ["untouched: the environment passes without any work"]
    assert by_name["v-wrong"].problems == ["oracle: reward 0, expected 1"]
    assert "$ solve.sh (exit 0)" in by_name["v-wrong"].oracle_output
    silent = by_name["v-silent"].problems
    assert len(silent) == 2 and all("no /logs/verifier/reward.json" in p for p in silent)
    assert "forgot the reward" in by_name["v-silent"].nop_output
    build = by_name["v-unbuildable"].problems
    assert len(build) == 1 and build[0].startswith("build: ImageBuildError")


@pytest.mark.docker
def test_validate_cli_exits_non_zero_on_a_bad_task(fixtures: Path, tmp_path: Path) -> None:
    _variant(tmp_path, fixtures, "c-good")
    _variant(tmp_path, fixtures, "c-trivial",
             {"tests/test.sh": "#!/bin/bash\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\n"})
    try:
        out = _cli("validate", str(tmp_path), timeout=300)
    finally:
        _remove_images(["c-good", "c-trivial"])
    assert out.returncode == 1, out.stdout + out.stderr
    rows = {line.split()[0]: line for line in out.stdout.splitlines()[2:] if line.strip()}
    assert rows["c-good"].split()[3:5] == ["1.00", "0.00"] and rows["c-good"].endswith("ok")
    assert rows["c-trivial"].endswith("BAD: untouched: the environment passes without any work")
    assert "1/2 tasks valid" in out.stdout


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(900)  # on a fresh machine it builds all 36 images first (~5 min here)
def test_bundled_suite_validates(tmp_path: Path) -> None:
    """Every bundled task: image builds, oracle passes, untouched environment fails."""
    report = tmp_path / "rows.json"
    out = _cli("validate", "--concurrency", "4", "--set", "sandbox.build_concurrency=3",
               "--json", str(report), timeout=840)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    rows = json.loads(report.read_text())
    assert len(rows) == len([p for p in BUNDLED_SUITE.iterdir() if p.is_dir()]) >= 30
    assert all(not r["problems"] and r["oracle_reward"] == 1.0 and r["nop_reward"] < 1.0 for r in rows)
    partial = [r for r in rows if len(r["oracle_rewards"]) > 1]
    assert len(partial) >= 5
    assert f"{len(rows)}/{len(rows)} tasks valid" in out.stdout


def _without_solution(root: Path, fixtures: Path, name: str, edits: dict[str, str] | None = None) -> Path:
    target = _variant(root, fixtures, name, edits)
    shutil.rmtree(target / "solution")
    return target


@pytest.mark.docker
async def test_validate_without_a_solution_still_checks_the_untouched_environment(
    pool: SandboxPool, fixtures: Path, tmp_path: Path
) -> None:
    fails = _without_solution(tmp_path, fixtures, "n-fails")
    trivial = _without_solution(tmp_path, fixtures, "n-trivial",
                                {"tests/test.sh": "#!/bin/bash\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\n"})
    tasks = [load_task(p) for p in (fails, trivial)]
    assert all(t.solution_path is None for t in tasks)
    try:
        rows = await validate(tasks, pool, concurrency=2)
    finally:
        await anyio.to_thread.run_sync(_remove_images, [t.name for t in tasks])
    by_name = {r.name: r for r in rows}
    good = by_name["n-fails"]
    assert good.ok and good.oracle_skipped and good.oracle_reward is None and good.oracle_output == ""
    assert good.nop_reward == 0.0 and good.problems == []
    assert good.notes == ["solution check skipped: no reference solution (solution/solve.sh or solution.sh)"]
    bad = by_name["n-trivial"]
    assert not bad.ok and bad.oracle_skipped
    assert bad.problems == ["untouched: the environment passes without any work"]


@pytest.mark.docker
async def test_a_keystroke_solution_is_typed_into_tmux_and_validated(
    pool: SandboxPool, fixtures: Path, tmp_path: Path
) -> None:
    """terminal-bench's other solution form, solution.yaml, is typed into the sandbox's
    tmux pane as its OracleAgent types it. The fixture's solution needs each rule: a
    background job, text and C-d for a running cat with and without Enter, and blocking
    commands (the last must finish before the tests run)."""
    root = tmp_path / "tb-keystrokes"
    shutil.copytree(fixtures / "keystrokes/tb-keystrokes", root)
    task = load_task(root)
    assert Path(task.solution_path or "").name == "solution.yaml"
    try:
        [row] = await validate([task], pool)
    finally:
        await anyio.to_thread.run_sync(_remove_images, [task.name])
    assert row.ok and not row.oracle_skipped and row.notes == [], (row.problems, row.oracle_output)
    assert (row.oracle_reward, row.nop_reward) == (1.0, 0.0)
    # The report shows what the pane showed: the typed lines, the blocking suffix.
    head, _, rest = row.oracle_output.partition("\n")
    assert head == "$ solution.yaml (exit 0)"
    assert "cat > /app/notes.txt" in rest and "seq 1 5 > /app/numbers.txt; tmux wait -S done" in rest


def _broken_plan(rule: str) -> Callable[[TerminalCommand], tuple[list[str], bool]]:
    def plan(command: TerminalCommand) -> tuple[list[str], bool]:
        keys, blocking = send_plan(command)
        if rule == "no-enter":
            return send_plan(msgspec.structs.replace(command, append_enter=False))
        return ([k for k in keys if k not in (COMPLETION_COMMAND, "Enter")] + ["Enter"], False) if blocking \
            else (keys, blocking)
    return plan


@pytest.mark.docker
@pytest.mark.parametrize("rule", ["no-enter", "no-block"])
async def test_a_wrong_keystroke_rule_fails_the_fixture(
    pool: SandboxPool, fixtures: Path, rule: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control for the test above: keys sent without Enter, or blocking commands not
    waited for, and the same solution scores 0 (so the fixture does test the rules)."""
    from rsr_async.tasks import keystrokes
    from rsr_async.tasks.verifier import try_grade

    task = msgspec.structs.replace(load_task(fixtures / "keystrokes/tb-keystrokes"), docker_image=BASE,
                                   environment_dir=None)
    monkeypatch.setattr(keystrokes, "send_plan", _broken_plan(rule))
    async with pool.sandbox(task, key=f"keystrokes-{rule}") as sandbox:
        await sandbox.run("mkdir -p /app", time_limit=10)
        result = await run_oracle(sandbox, task)
        verdict = await try_grade(sandbox, task, pool=pool, key=f"keystrokes-{rule}")
    assert not result.timed_out, result.output
    assert verdict.reward == 0.0, verdict.output


@pytest.mark.docker
async def test_a_blocking_entry_past_its_max_timeout_stops_the_keystrokes(
    pool: SandboxPool, fixtures: Path, tmp_path: Path
) -> None:
    """terminal-bench raises when ``tmux wait done`` outlasts max_timeout_sec, so no later
    entry is sent; ours stops there too, says so, and leaves no waiting tmux client."""
    root = tmp_path / "tb-slow"
    shutil.copytree(fixtures / "keystrokes/tb-keystrokes", root)
    (root / "solution.yaml").write_text(
        "- command: sleep 30\n  block: true\n  max_timeout_sec: 1\n- command: touch /app/after.txt\n")
    task = msgspec.structs.replace(load_task(root), docker_image=BASE, environment_dir=None)
    async with pool.sandbox(task, key="keystrokes-slow") as sandbox:
        await sandbox.run("mkdir -p /app", time_limit=10)
        with anyio.fail_after(30):
            result = await run_oracle(sandbox, task)
        left = await sandbox.run("ls /app/after.txt 2>&1; grep -l 'wait-fo[r]' /proc/[0-9]*/cmdline 2>/dev/null "
                                 "| wc -l", time_limit=10)  # [r]: not this command itself
    assert result.timed_out and result.exit_code == 124
    assert result.output.startswith("[solution.yaml entry 1: not finished within max_timeout_sec 1s;")
    assert "No such file" in left.output and left.output.split()[-1] == "0", left.output


@pytest.mark.docker
def test_validate_cli_says_the_solution_check_was_skipped(fixtures: Path, tmp_path: Path) -> None:
    _without_solution(tmp_path, fixtures, "s-nosolution")
    try:
        out = _cli("validate", str(tmp_path), timeout=300)
    finally:
        _remove_images(["s-nosolution"])
    assert out.returncode == 0, out.stdout + out.stderr
    [row] = [line for line in out.stdout.splitlines()[2:] if line.startswith("s-nosolution")]
    assert row.split()[3:5] == ["skipped", "0.00"]
    assert row.endswith("ok; solution check skipped: no reference solution (solution/solve.sh or solution.sh)")
    assert "1/1 tasks valid, 1 without a solution check" in out.stdout


class _FlakyStarts:
    """The real pool, except that sandbox starts fail like Docker can: the first attempt of
    each check, or (``always``) every attempt."""

    def __init__(self, pool: SandboxPool, *, always: bool = False) -> None:
        self.pool = pool
        self.always = always
        self.keys: list[str] = []

    async def ensure_image(self, task: Task) -> str:
        return await self.pool.ensure_image(task)

    @contextlib.asynccontextmanager
    async def sandbox(self, task: Task, *, key: str) -> AsyncIterator[Sandbox]:
        self.keys.append(key)
        if self.always or key.endswith("/1"):
            raise ContainerError(f"simulated start failure for {key}")
        async with self.pool.sandbox(task, key=key) as sandbox:
            yield sandbox


@pytest.mark.docker
async def test_validate_retries_infrastructure_failures_once(pool: SandboxPool, fixtures: Path) -> None:
    task = msgspec.structs.replace(load_task(fixtures / "harbor/full-harbor"), docker_image=BASE,
                                   environment_dir=None)
    flaky = _FlakyStarts(pool)
    [row] = await validate([task], flaky, concurrency=1)
    assert row.ok and row.oracle_reward == 1.0 and row.nop_reward == 0.0
    assert len(flaky.keys) == 4 and {k.rsplit("/", 1)[1] for k in flaky.keys} == {"1", "2"}
    broken = _FlakyStarts(pool, always=True)
    [row] = await validate([task], broken, concurrency=1)
    assert sorted(row.problems) == [
        "oracle: infrastructure: ContainerError: simulated start failure for validate/full-harbor/oracle/2",
        "untouched: infrastructure: ContainerError: simulated start failure for validate/full-harbor/nop/2",
    ]
