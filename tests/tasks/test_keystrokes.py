"""terminal-bench keystroke solutions (``solution.yaml``), checked against terminal-bench
0.2.18 itself: ``scripts/record_tb_solution_yaml.py`` recorded what its ``TerminalCommand``
makes of each entry and what its ``OracleAgent`` sends to tmux, in
``fixtures/terminal_bench_solution_yaml.json``. No Docker here (the runs are in
``test_validate.py``)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest

from rsr_async.errors import TaskError
from rsr_async.sandbox.fake import FakeShellSandbox
from rsr_async.tasks import load_task, run_oracle
from rsr_async.tasks.keystrokes import (
    TerminalCommand,
    parse_solution_yaml,
    read_solution_yaml,
    send_plan,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RECORDED = json.loads((FIXTURES / "terminal_bench_solution_yaml.json").read_text())
TASK = FIXTURES / "keystrokes" / "tb-keystrokes"


def _finite(value: Any) -> Any:
    return math.inf if value == "inf" else value


def _calls(commands: list[TerminalCommand]) -> list[dict[str, Any]]:
    """What terminal-bench's recording session saw, from our plan: ``send-keys`` execs,
    then the wait for the done signal (with its limit) or the ``min_timeout_sec`` pause
    (the recording's clock stood still, so the pause is the whole of it)."""
    calls: list[dict[str, Any]] = []
    for command in commands:
        keys, blocking = send_plan(command)
        calls.append({"exec": ["tmux", "send-keys", "-t", "agent", *keys]})
        if blocking:
            calls.append({"exec": ["timeout", f"{command.max_timeout_sec}s", "tmux", "wait", "done"]})
        elif command.min_timeout_sec > 0:
            calls.append({"sleep": command.min_timeout_sec})
    return calls


def test_recording_is_terminal_bench_0_2_18() -> None:
    assert RECORDED["terminal_bench"] == "0.2.18"
    assert RECORDED["completion_command"] == "; tmux wait -S done"


def test_fields_and_defaults_are_terminal_bench_s() -> None:
    recorded = RECORDED["terminal_command_fields"]
    ours = {f.name: f for f in msgspec.structs.fields(TerminalCommand)}
    assert set(ours) == set(recorded)
    for name, field in recorded.items():
        assert (ours[name].required, None if ours[name].required else ours[name].default) == (
            field["required"], field["default"]), name
    assert RECORDED["terminal_command_extra"] == "ignore"  # we ignore unknown keys too


@pytest.mark.parametrize("name", sorted(RECORDED["entries"]))
def test_each_entry_is_read_as_terminal_bench_validates_it(name: str) -> None:
    case = RECORDED["entries"][name]
    text = json.dumps([_finite(case["entry"])])  # JSON is YAML: the same value reaches both
    if "refused" in case:
        with pytest.raises(TaskError, match=r"solution\.yaml entry 1"):
            parse_solution_yaml(text)
        return
    [command] = parse_solution_yaml(text)
    assert msgspec.structs.asdict(command) == {k: _finite(v) for k, v in case["fields"].items()}


@pytest.mark.parametrize("name", sorted(RECORDED["oracle_runs"]))
def test_keys_sent_are_the_oracle_s(name: str) -> None:
    run = RECORDED["oracle_runs"][name]
    if name == "tb-keystrokes-and-sh":  # both files: terminal-bench's oracle takes solution.sh
        assert run == {"solution_type": "sh", "file": "solution.sh"}
        return
    if name.startswith("plan:"):
        commands = [*parse_solution_yaml(json.dumps(run["commands"]))]
    else:
        commands = [*read_solution_yaml(FIXTURES / "keystrokes" / name / "solution.yaml")]
    assert [{k: _finite(v) for k, v in c.items()} for c in run["commands"]] == [
        msgspec.structs.asdict(c) for c in commands]
    assert _calls(commands) == run["calls"]


def test_the_fixture_task_exercises_each_rule() -> None:
    """The Docker test's task needs every rule: a background job, keys for a running
    program (text without Enter, C-d), blocking commands."""
    commands = read_solution_yaml(TASK / "solution.yaml")
    plans = [send_plan(c) for c in commands]
    assert any(c.command.endswith("&") and not b for c, (_, b) in zip(commands, plans, strict=True))
    assert (["second line"], False) in plans and (["C-d"], False) in plans
    assert [b for _, b in plans][-2:] == [True, True]


def test_loader_prefers_solution_sh_then_solution_yaml(tmp_path: Path) -> None:
    root = tmp_path / "tb-keystrokes"
    shutil.copytree(TASK, root)
    assert load_task(root).solution_path == str(root / "solution.yaml")
    (root / "solution.sh").write_text("echo from solution.sh\n")
    assert load_task(root).solution_path == str(root / "solution.sh")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"must be a list of commands .*got an empty file"),
        ("command: ls\n", r"must be a list of commands .*got dict"),
        ("- command: [unclosed\n", r"not valid YAML"),
        ("- ls -l\n", r"entry 1 must be a mapping with a command, got 'ls -l'"),
        ("- command: ls\n- block: true\n", r"entry 2 has no command"),
        ("- command: 42\n", r"entry 1: command must be text, got 42"),
        ("- command: ls\n- command: make\n  block: maybe\n", r"entry 2: block must be true or false, got 'maybe'"),
        ("- command: ls\n  max_timeout_sec: soon\n", r"entry 1: max_timeout_sec must be a number of seconds"),
        ("- command: ls\n  append_enter: 2\n", r"entry 1: append_enter must be true or false, got 2"),
    ],
)
def test_bad_files_name_the_file_and_the_entry(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "solution.yaml"
    path.write_text(text)
    with pytest.raises(TaskError, match=message) as caught:
        read_solution_yaml(path, task="t")
    assert str(path) in str(caught.value) and "task 't'" in str(caught.value)
    assert not getattr(caught.value, "retryable", False)  # the task's fault: never retried


async def test_a_bad_solution_yaml_fails_before_the_sandbox_is_used(tmp_path: Path) -> None:
    root = tmp_path / "bad"
    shutil.copytree(TASK, root)
    (root / "solution.yaml").write_text("- command: ls\n  block: sometimes\n")
    sandbox = FakeShellSandbox()
    with pytest.raises(TaskError, match=r"entry 1: block must be true or false"):
        await run_oracle(sandbox, load_task(root))


async def test_a_shell_without_tmux_is_a_task_error() -> None:
    """terminal-bench refuses a container without tmux; so does our oracle (the fake
    shell is not a tmux pane)."""
    with pytest.raises(TaskError, match="no tmux"):
        await run_oracle(FakeShellSandbox(), load_task(TASK))
