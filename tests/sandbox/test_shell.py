"""The persistent shell over one exec stream, against the real Docker daemon."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rsr_async.errors import ShellClosedError
from rsr_async.harness import protocol
from rsr_async.sandbox import DockerSandbox, DockerShell, SandboxPool

from .conftest import make_task

pytestmark = pytest.mark.docker


async def test_early_return_and_prompt(pool: SandboxPool) -> None:
    async with pool.sandbox(make_task(workdir="/tmp"), key="early") as sandbox:
        shell = await sandbox.shell()
        assert shell.screen() == "root@sandbox:/tmp#"
        started = time.monotonic()
        await shell.send("echo hello\n")
        assert await shell.wait(10.0)
        assert time.monotonic() - started < 1.0
        assert shell.observe() == "echo hello\nhello\nroot@sandbox:/tmp# "
        # A 60 s wait for a 1.5 s command ends when the command does.
        started = time.monotonic()
        await shell.send("sleep 1.5; echo slept\n")
        assert await shell.wait(60.0)
        assert 1.4 < time.monotonic() - started < 4.0
        assert "slept" in shell.observe()
        # Several commands typed at once: done only after the last one.
        await shell.send("echo one\nsleep 0.5\necho two\n")
        assert await shell.wait(10.0)
        text = shell.observe()
        assert text.endswith("two\nroot@sandbox:/tmp# "), text
        # The exit status survives the prompt machinery.
        await shell.send("false\n")
        await shell.wait(5)
        assert shell.last_exit_status == 1
        await shell.send("echo $?\n")
        await shell.wait(5)
        assert "\n1\n" in shell.observe()
        # Nothing new: an empty observation (the harness shows the screen then).
        assert shell.observe() == ""
        assert shell.screen().endswith("echo $?\n1\nroot@sandbox:/tmp#")


async def test_wait_without_a_prompt_takes_the_whole_duration(pool: SandboxPool) -> None:
    async with pool.sandbox(make_task(), key="partial") as sandbox:
        shell = await sandbox.shell()
        await shell.send("echo typed-not-run")  # no Enter: nothing runs
        started = time.monotonic()
        assert not await shell.wait(0.5)
        assert time.monotonic() - started >= 0.5
        await shell.send("Enter")
        assert await shell.wait(5)
        assert "typed-not-run\nroot@" in shell.observe()


async def test_ctrl_c_interrupts_a_program_that_never_ends(pool: SandboxPool) -> None:
    async with pool.sandbox(make_task(), key="ctrlc") as sandbox:
        shell = await sandbox.shell()
        await shell.send("sleep 100\n")
        assert not await shell.wait(0.5)
        started = time.monotonic()
        await shell.send("C-c")
        assert await shell.wait(5)
        assert time.monotonic() - started < 2
        assert shell.last_exit_status == 130
        await shell.send("echo after\n")
        assert await shell.wait(5)
        assert "after" in shell.observe()


async def test_flood_stays_bounded_and_can_be_interrupted(pool: SandboxPool) -> None:
    async with pool.sandbox(make_task(), key="flood") as sandbox:
        shell = await sandbox.shell()
        await shell.send("yes flood-line\n")
        await shell.wait(2.0)  # megabytes arrive meanwhile
        buffer = shell._buffer
        assert buffer.total_bytes > 1_000_000
        assert len(buffer._head) + len(buffer._tail) <= 3 * 256 * 1024
        await shell.send("C-c")
        assert await shell.wait(10)
        text = shell.observe()
        assert "output limited to 10000 bytes" in text
        assert len(text.encode()) < 10200
        assert text.startswith("yes flood-line\nflood-line\n")
        assert text.endswith("root@sandbox:/# ")


async def test_truncation_of_a_long_observation(pool: SandboxPool) -> None:
    async with pool.sandbox(make_task(), key="trunc") as sandbox:
        shell = await sandbox.shell()
        await shell.send("seq 1 20000\n")
        assert await shell.wait(10)
        text = shell.observe()
        head, _, tail = text.partition("\n[... output limited to 10000 bytes; ")
        assert head.startswith("seq 1 20000\n1\n2\n3\n")
        assert tail.endswith("19999\n20000\nroot@sandbox:/# ")
        omitted = int(tail.split(" ", 1)[0])
        assert omitted == len("seq 1 20000\n") + sum(len(f"{i}\n") for i in range(1, 20001)) + len("root@sandbox:/# ") - 10000


async def test_binary_output_and_invalid_utf8(pool: SandboxPool) -> None:
    async with pool.sandbox(make_task(), key="binary") as sandbox:
        shell = await sandbox.shell()
        await shell.send("head -c 200000 /dev/urandom; printf '\\xff\\xfe\\n'; echo; echo survived\n")
        assert await shell.wait(15)
        text = shell.observe(max_bytes=1_000_000)
        assert "\ufffd" in text
        assert text.rstrip().endswith("survived\nroot@sandbox:/#")
        await shell.send("stty sane; echo still-here\n")
        assert await shell.wait(5)
        assert "still-here" in shell.observe()


async def until_screen_shows(shell: DockerShell, text: str, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while text not in shell.screen():
        assert time.monotonic() < deadline, f"{text!r} never showed:\n{shell.screen()}"
        await shell.wait(0.05)


async def test_interactive_python_repl(pool: SandboxPool) -> None:
    async with pool.sandbox(make_task(), key="repl") as sandbox:
        shell = await sandbox.shell()
        await shell.send("python3\n")
        await until_screen_shows(shell, ">>>")
        started = time.monotonic()
        await shell.send("print(6 * 7)\n")
        assert not await shell.wait(0.5)  # no bash prompt inside the REPL: the whole wait
        assert time.monotonic() - started >= 0.5
        assert "42\n>>> " in shell.observe()
        await shell.send("while True: pass\n")
        await shell.wait(0.2)
        await shell.send("C-c")
        await until_screen_shows(shell, "KeyboardInterrupt")
        assert "KeyboardInterrupt" in shell.observe()
        await shell.send("C-d")
        assert await shell.wait(5)
        assert shell.observe().endswith("root@sandbox:/# ")


async def test_full_screen_program_shows_on_the_screen(pool: SandboxPool) -> None:
    async with pool.sandbox(make_task(), key="screen") as sandbox:
        shell = await sandbox.shell()
        await shell.send("seq 1 200 > /tmp/numbers; less /tmp/numbers\n")
        await until_screen_shows(shell, "\n39\n")
        screen = shell.screen()
        lines = screen.splitlines()
        assert lines[0] == "1" and "39" in lines  # less fills the 40-line screen
        await shell.send("G")
        await until_screen_shows(shell, "\n200\n")
        await shell.send("q")
        assert await shell.wait(5)
        assert shell.screen().splitlines()[-1].startswith("root@sandbox:/#")


async def test_shell_exit_is_reported_and_a_new_one_can_start(pool: SandboxPool) -> None:
    async with pool.sandbox(make_task(), key="exit") as sandbox:
        shell = await sandbox.shell()
        await shell.send("cd /etc; exit\n")
        assert await shell.wait(5)
        assert not shell.alive
        with pytest.raises(ShellClosedError):
            await shell.send("echo nope\n")
        fresh = await sandbox.shell()
        assert fresh is not shell and fresh.alive
        await fresh.send("pwd\n")
        assert await fresh.wait(5)
        assert "\n/\n" in fresh.observe()


async def test_run_exit_code_output_env_workdir_and_timeout(pool: SandboxPool) -> None:
    async with pool.sandbox(make_task(env={"FROM_TASK": "task-env"}), key="run") as sandbox:
        result = await sandbox.run("echo out; echo err >&2; exit 7", time_limit=10)
        assert result.exit_code == 7 and not result.timed_out
        assert sorted(result.output.split()) == ["err", "out"]
        result = await sandbox.run("echo $FROM_TASK $EXTRA; pwd", time_limit=10, env={"EXTRA": "x"}, workdir="/usr")
        assert result.output == "task-env x\n/usr\n"
        started = time.monotonic()
        result = await sandbox.run("echo begin; sleep 100", time_limit=1.0)
        assert result.timed_out and result.exit_code == 124
        assert result.output == "begin\n"
        assert time.monotonic() - started < 5
        # A command ignoring SIGTERM is killed a grace period later.
        result = await sandbox.run("trap '' TERM; sleep 100", time_limit=0.5)
        assert result.timed_out and result.exit_code == 137
        result = await sandbox.run("head -c 5000000 /dev/zero | tr '\\0' a; printf '\\xff'", time_limit=20)
        assert result.exit_code == 0
        assert "bytes of output not kept" in result.output and result.output.endswith("a\ufffd")


async def test_upload_and_download_files_and_directories(pool: SandboxPool, tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "sub").mkdir(parents=True)
    (source / "a.txt").write_text("alpha\n")
    (source / "sub" / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (source / "sub" / "run.sh").chmod(0o755)
    single = tmp_path / "one.bin"
    single.write_bytes(bytes(range(256)))
    sandbox: DockerSandbox
    async with pool.sandbox(make_task(), key="files") as sandbox:
        await sandbox.upload(source, "/tests")
        await sandbox.upload(single, "/deep/new/dir/one.bin")
        result = await sandbox.run("cat /tests/a.txt; /tests/sub/run.sh; wc -c < /deep/new/dir/one.bin", time_limit=10)
        assert result.output == "alpha\nran\n256\n"
        await sandbox.run("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt", time_limit=10)
        await sandbox.download("/logs/verifier", tmp_path / "got")
        assert (tmp_path / "got" / "reward.txt").read_text() == "1\n"
        await sandbox.download("/deep/new/dir/one.bin", tmp_path / "copy.bin")
        assert (tmp_path / "copy.bin").read_bytes() == bytes(range(256))
        with pytest.raises(FileNotFoundError):
            await sandbox.download("/no/such/file", tmp_path / "x")


CORPUS = Path(__file__).resolve().parent / "golden" / "tmux_corpus.json"


async def test_terminal_corpus_matches_harbor_tmux(pool: SandboxPool) -> None:
    """Every observation equals what Harbor's TmuxSession showed for the same keys with
    real tmux (recorded by scripts/record_tmux_corpus.py)."""
    corpus = json.loads(CORPUS.read_text("utf-8"))
    assert len(corpus["turns"]) >= 25
    differences: list[str] = []
    started = time.monotonic()
    full_waits = 0.0
    async with pool.sandbox(make_task(workdir=corpus["workdir"]), key="corpus") as sandbox:
        shell = await sandbox.shell()
        shell.observe()
        if protocol.screen_text(shell) != corpus["initial"]:
            differences.append(f"initial screen: {protocol.screen_text(shell)!r}")
        for turn in corpus["turns"]:
            for keys, duration in turn["commands"]:
                await shell.send(keys)
                if not await shell.wait(duration):
                    full_waits += duration
            got = protocol.observe(shell)
            if got != turn["observation"]:
                differences.append(f"{turn['name']}:\n  want {turn['observation']!r}\n  got  {got!r}")
    total = len(corpus["turns"]) + 1
    print(f"corpus: {total - len(differences)}/{total} identical; "
          f"{time.monotonic() - started:.1f} s, {full_waits:.1f} s of it full waits")
    assert not differences, "\n".join(differences)
