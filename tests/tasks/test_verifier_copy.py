"""RSRT's claims grade a throwaway copy of the sandbox (issue 31): ``verify(...,
discard_changes=True)`` against real Docker.

The tests see the agent's files as they are at the claim (its root, a tmpfs ``/tmp``, its
``/etc/hosts``, ``/dev/shm``), in the working directory and with ``/proc`` and ``/dev`` as
in the sandbox; everything they write there, install or leave running is gone afterwards,
and the agent's own processes run on. Each guarantee is checked twice: in the test's
output (the write happened, in the copy) and in the agent's sandbox afterwards (it did
not stay). A control run without ``discard_changes`` shows the same writes do stay when
the tests run in the sandbox itself, so the checks can fail.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import aiodocker
import anyio
import msgspec
import pytest

from rsr_async.config import SandboxConfig
from rsr_async.sandbox import SandboxPool
from rsr_async.sandbox.base import CopyUnavailableError, HiddenRun
from rsr_async.sandbox.container import DockerSandbox
from rsr_async.sandbox.hidden import VerifierStation, decode_records, report_from_records
from rsr_async.sandbox.pool import LABEL_RUN, SNAPSHOT_REPOSITORY
from rsr_async.schema import Task
from rsr_async.tasks.verifier import hidden_run, verify

BASE = SandboxConfig().base_image
pytestmark = pytest.mark.docker

# What the agent leaves before its claim: files on the root, the tmpfs /tmp (storage_mb on
# a driver without quotas) and /dev/shm, and a process that must survive the claim.
AGENT_SETUP = (
    "mkdir -p /app && echo agent-work > /app/result.txt && echo agent-tmp > /tmp/agent.txt && "
    "echo agent-shm > /dev/shm/agent.txt && "
    "(setsid bash -c 'exec -a agent-keeper-7c1 sleep 600' > /dev/null 2>&1 < /dev/null &)"
)
# The hidden tests: report what they see, then write everywhere they can, install a
# program and start a background process.
WRITING_TEST = r"""#!/bin/bash
echo "cwd=$(pwd)"
echo "sees=$(cat /app/result.txt) $(cat /tmp/agent.txt) $(cat /dev/shm/agent.txt)"
echo "proc1=$(tr '\0' ' ' < /proc/1/cmdline | cut -c1-40)"
echo "keeper=$(pgrep -f -c '[a]gent-keeper-7c1')"
echo "null=$(head -c 3 /dev/zero | wc -c)"
[ -e /root/claim-marker ] && echo "saw-earlier-claim"
echo tests-wrote > /app/result.txt
echo tests-new > /root/claim-marker
echo tests-tmp > /tmp/agent.txt
echo tests-shm > /dev/shm/tests.txt
echo "10.9.9.9 tests-host" >> /etc/hosts
printf '#!/bin/sh\necho installed\n' > /usr/local/bin/tests-tool && chmod +x /usr/local/bin/tests-tool
echo "tool=$(tests-tool)"
rm -f /app/delete-me
(setsid bash -c 'exec -a tests-leftover-9d2 sleep 600' > /dev/null 2>&1 < /dev/null &)
echo 1 > /logs/verifier/reward.txt
"""
AGENT_CHECK = (
    "cat /app/result.txt /tmp/agent.txt; ls /dev/shm; tail -n 1 /etc/hosts; "
    "ls /root/claim-marker /usr/local/bin/tests-tool /app/delete-me 2>&1; "
    "echo keeper=$(pgrep -f -c '[a]gent-keeper-7c1'); echo leftover=$(pgrep -f -c '[t]ests-leftover-9d2'); "
    "ls -d /tests /logs/verifier 2>&1 | grep -c 'No such'"
)


def writing_task(tmp_path: Path) -> Task:
    tests = tmp_path / "copy-task" / "tests"
    tests.mkdir(parents=True)
    (tests / "test.sh").write_text(WRITING_TEST)
    return Task(name="copy-task", path=str(tmp_path / "copy-task"), instruction="-",
                docker_image=BASE, tests_dir=str(tests), verifier_timeout_s=30,
                workdir="/app", storage_mb=64)


async def _agent_state(sandbox: DockerSandbox) -> str:
    result = await sandbox.run(AGENT_CHECK, time_limit=30)
    return result.output


async def test_a_claim_sees_the_sandbox_and_leaves_nothing_behind(pool: SandboxPool, tmp_path: Path) -> None:
    task = writing_task(tmp_path)
    async with pool.sandbox(task, key="copy-guarantees") as sandbox:
        assert isinstance(sandbox, DockerSandbox)
        await sandbox.run(AGENT_SETUP + " && touch /app/delete-me", time_limit=30)
        # /dev/shm is a tmpfs mount of its own in every Docker container; /tmp is one
        # where the storage driver has no quota (storage_mb, e.g. fuse-overlayfs here).
        mounts = await sandbox.run("grep -c ' /dev/shm tmpfs' /proc/mounts", time_limit=30)
        assert mounts.output.strip() == "1", mounts.output

        for claim in (1, 2):
            verdict = await verify(sandbox, task, discard_changes=True)
            out = verdict.output
            assert verdict.reward == 1.0, out
            # What the tests saw: the sandbox as the agent left it, cwd, /proc, /dev ...
            assert "cwd=/app" in out and "sees=agent-work agent-tmp agent-shm" in out, out
            assert "proc1=" in out and "keeper=1" in out and "null=3" in out, out
            assert "tool=installed" in out, out
            # ... and never what an earlier claim wrote.
            assert "saw-earlier-claim" not in out, f"claim {claim}: {out}"
            state = await _agent_state(sandbox)
            assert state.startswith("agent-work\nagent-tmp\nagent.txt\n"), state
            assert "tests-host" not in state and "tests.txt" not in state, state
            for path in ("/root/claim-marker", "/usr/local/bin/tests-tool"):
                assert f"cannot access '{path}'" in state, state
            assert "cannot access '/app/delete-me'" not in state, state  # the tests' rm did not stay
            assert "keeper=1" in state and "leftover=0" in state, state
            assert state.rstrip().endswith("2"), state  # no /tests, no /logs/verifier

        # The control: the same tests in the sandbox itself leave their writes (so the
        # checks above can fail), and the agent's process still runs.
        verdict = await verify(sandbox, task)
        assert verdict.reward == 1.0, verdict.output
        state = await _agent_state(sandbox)
        assert state.startswith("tests-wrote\ntests-tmp\n"), state
        assert "cannot access '/root/claim-marker'" not in state, state
        assert "keeper=1" in state, state


async def test_a_host_without_the_copy_grades_on_a_commit(pool: SandboxPool, tmp_path: Path) -> None:
    """Where rsr-verify's copy is refused, the sandbox says so once and grades on a
    committed copy: nothing stays in the sandbox either, and the image is removed."""
    task = writing_task(tmp_path)
    async with pool.sandbox(task, key="copy-fallback") as sandbox:
        assert isinstance(sandbox, DockerSandbox)
        await sandbox.run(AGENT_SETUP + " && touch /app/delete-me", time_limit=30)
        station = sandbox._station
        assert station is not None
        assert station.refuse_copy("refused for this test")  # as a host whose kernel refused it
        assert not station.refuse_copy("again")  # said once
        verdict = await verify(sandbox, task, discard_changes=True)
        assert verdict.reward == 1.0, verdict.output
        # A commit holds the root's files only: not the tmpfs /tmp, /dev/shm, processes.
        assert "sees=agent-work  " in verdict.output and "keeper=0" in verdict.output, verdict.output
        state = await _agent_state(sandbox)
        assert state.startswith("agent-work\nagent-tmp\n"), state
        assert "cannot access '/root/claim-marker'" in state and "keeper=1" in state, state
    images = await _snapshot_images(pool.run_id)
    assert images == []


async def _snapshot_images(run_id: str) -> list[str]:
    with anyio.fail_after(60):
        listed = await anyio.run_process(
            ["docker", "images", "-q", "--filter", f"label={LABEL_RUN}={run_id}", SNAPSHOT_REPOSITORY])
    return listed.stdout.decode().split()


def test_a_refused_copy_is_its_own_error() -> None:
    """rsr-verify's ``C`` record is :class:`CopyUnavailableError` (a SandboxError the
    sandbox answers with the commit path), not a failed setup; "host:" says the host
    cannot copy at all, anything else that only this run could not."""
    for text, host_wide in ((b"host: overlay on /x: Invalid argument", True),
                            (b"copy of /etc/hosts on the scratch: No space left on device", False)):
        record = b"C" + len(text).to_bytes(4, "big") + text
        with pytest.raises(CopyUnavailableError) as caught:
            report_from_records(decode_records(record), "")
        assert caught.value.host_wide is host_wide
        assert "host:" not in str(caught.value) and text.decode().split(": ")[-1] in str(caught.value)


def test_the_claim_flag_travels_in_the_hidden_run(tmp_path: Path) -> None:
    task = writing_task(tmp_path / str(uuid.uuid4()))
    run = hidden_run(task, time_limit=5, discard_changes=True)
    assert run.discard_changes
    assert not hidden_run(task, time_limit=5).discard_changes
    assert msgspec.structs.replace(run, discard_changes=False) == hidden_run(task, time_limit=5)
    assert isinstance(run, HiddenRun)


ESCAPE_TEST = r"""
echo "volume=$(cat /data/agent.txt)"
echo tests > /data/agent.txt && echo tests > /data/tests.txt
perl -e 'mkdir "/esc"; chroot "/esc" or die "chroot: $!"; chdir ".." for 1..64; chroot "." or die;
         open(F, ">/escaped-marker") or die; print F "out"; close F; print "chroot-escape-ran\n"'
echo 1 > /logs/verifier/reward.txt
"""


async def test_a_chroot_escape_and_a_volume_stay_in_the_copy(tmp_path: Path) -> None:
    """A sandbox holding CAP_SYS_CHROOT (Docker's default set; ours drop it) and a bind-
    mounted volume: the tests' classic chroot escape lands in the copy's root, not the
    sandbox's, and what they write to the volume stays out of the host directory."""
    run_id = f"test-copy-{uuid.uuid4().hex[:8]}"
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "agent.txt").write_text("agent\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text(ESCAPE_TEST)
    with anyio.fail_after(60):
        started = await anyio.run_process(
            ["docker", "run", "-d", "--label", f"{LABEL_RUN}={run_id}", "--network", "none",
             "-v", f"{volume}:/data", BASE, "sleep", "600"])
    container = started.stdout.decode().strip()
    docker = aiodocker.Docker()
    station = VerifierStation(docker, url="unix:///var/run/docker.sock",
                              labels={LABEL_RUN: run_id}, api_timeout_s=60)
    try:
        with anyio.fail_after(60):
            info = await docker.containers.get(container)
        pid = int(info["State"]["Pid"])
        run = HiddenRun(files=((str(tests), ""),), command="bash /tests/test.sh", time_limit=30,
                        discard_changes=True)
        report = await station.run(pid, run, name="escape")
        assert report.exit_code == 0, report.output
        assert "volume=agent" in report.output and "chroot-escape-ran" in report.output, report.output
        with anyio.fail_after(60):
            listed = await anyio.run_process(
                ["docker", "exec", container, "sh", "-c", "ls / /data; cat /data/agent.txt"])
        seen = listed.stdout.decode()
        assert "escaped-marker" not in seen and "esc\n" not in seen and "tests.txt" not in seen, seen
        assert seen.rstrip().endswith("agent"), seen
        assert sorted(p.name for p in volume.iterdir()) == ["agent.txt"]
        assert (volume / "agent.txt").read_text() == "agent\n"
        # The control: the same tests in the sandbox itself leave both marks.
        plain = await station.run(pid, msgspec.structs.replace(run, discard_changes=False), name="plain")
        assert "chroot-escape-ran" in plain.output, plain.output
        with anyio.fail_after(60):
            listed = await anyio.run_process(["docker", "exec", container, "ls", "/", "/data"])
        assert "escaped-marker" in listed.stdout.decode() and (volume / "tests.txt").exists()
    finally:
        await station.aclose()
        with anyio.CancelScope(shield=True), anyio.fail_after(60):
            await anyio.run_process(["docker", "rm", "-f", container], check=False)
        await docker.close()
