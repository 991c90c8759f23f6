"""The harness test doubles behave like the contracts they stand in for."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsr_async.errors import HarnessError, ShellClosedError
from rsr_async.harness.fakes import FakeShell, FakeShellSandbox, ReplayModel
from rsr_async.llm.base import Completion
from rsr_async.sandbox.base import HiddenRun
from rsr_async.schema import Usage


async def test_fake_shell_interprets_lines_heredocs_and_keys() -> None:
    shell = FakeShell(files={"in.txt": "data\n"})
    await shell.send("cat in.txt > copy.txt\n")
    await shell.send("echo -n a >> copy.txt\n")
    await shell.send("bash <<'EOF'\necho one > one.txt\nEOF\n")
    await shell.send("cat > two.txt <<EOF\nline 1\nline 2\nEOF\n")
    await shell.send("nope --x\n")
    assert shell.files["copy.txt"] == "data\na"
    assert shell.files["one.txt"] == "one\n"
    assert shell.files["two.txt"] == "line 1\nline 2\n"
    out = shell.observe()
    assert "bash: nope: command not found\n" in out and "> line 1\n" in out
    assert shell.observe() == "\nroot@sandbox:/app# "  # nothing new: Harbor repeats the last line
    await shell.send("echo par")
    await shell.send("tial\n")  # a line typed in two batches runs once, whole
    assert shell.observe().endswith("echo partial\npartial\nroot@sandbox:/app# ")


async def test_fake_shell_waits_on_a_virtual_clock() -> None:
    shell = FakeShell()
    assert await shell.wait(5.0) is True and shell.clock == 0.0  # idle: returns at once
    await shell.send("sleep 10\n")
    assert await shell.wait(4.0) is False and shell.clock == 4.0
    assert await shell.wait(60.0) is True and shell.clock == 10.0
    await shell.send("sleep 100\n")
    await shell.send("C-c")
    assert await shell.wait(1.0) is True and "^C" in shell.screen()
    await shell.send("C-d")
    assert not shell.alive
    with pytest.raises(ShellClosedError):
        await shell.send("echo\n")


async def test_fake_sandbox_shares_files_and_replaces_an_exited_shell(tmp_path: Path) -> None:
    sandbox = FakeShellSandbox()
    first = await sandbox.shell()
    await first.send("echo hi > a.txt\nexit\n")
    second = await sandbox.shell()
    assert second is not first and second.files["a.txt"] == "hi\n"
    result = await sandbox.run("cat a.txt", time_limit=5)
    assert (result.exit_code, result.output) == (0, "hi\n")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "t.sh").write_text("echo t\n")
    await sandbox.upload(tmp_path / "d", "/tests")
    assert second.files["/tests/t.sh"] == "echo t\n"
    await sandbox.download("a.txt", tmp_path / "a.txt")
    assert (tmp_path / "a.txt").read_text() == "hi\n"


async def test_replay_model_replays_records_and_runs_out_loudly() -> None:
    given = Completion(text="x", finish_reason="length", usage=Usage(completion_tokens=7))
    model = ReplayModel(["hello", given, ValueError("scripted failure")])
    first = await model.chat([{"role": "user", "content": "a" * 40}], affinity="k", seed=3)
    assert first.text == "hello" and first.usage.prompt_tokens == 10
    assert await model.chat([], affinity="k") is given
    with pytest.raises(ValueError, match="scripted failure"):
        await model.chat([], affinity="k")
    with pytest.raises(HarnessError, match="no scripted reply left for call 4"):
        await model.chat([], affinity="k")
    assert [c.seed for c in model.calls] == [3, None, None, None]


async def test_fake_hidden_runs_keep_writes_unless_told_to_discard_them(tmp_path: Path) -> None:
    """As the Docker sandbox: a plain hidden run's writes outside /tests and
    /logs/verifier stay; a claim's (``discard_changes``) do not; neither leaves the
    private directories behind."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "key.txt").write_text("secret\n")
    sandbox = FakeShellSandbox(FakeShell(files={"/app/out.txt": "agent\n"}))
    command = "echo tests > /app/out.txt\necho 1 > /logs/verifier/reward.txt\ncat /tests/key.txt"
    run = HiddenRun(files=((str(tests), ""),), command=command, time_limit=5, discard_changes=True)
    report = await sandbox.run_hidden(run)
    assert report.files == {"reward.txt": "1\n"} and "secret" in report.output
    assert sandbox.current.files == {"/app/out.txt": "agent\n"}
    plain = await sandbox.run_hidden(HiddenRun(files=run.files, command=command, time_limit=5))
    assert plain.files == {"reward.txt": "1\n"}
    assert sandbox.current.files == {"/app/out.txt": "tests\n"}
