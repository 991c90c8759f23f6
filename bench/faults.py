"""The fault suite: ``python -m rsr_async bench faults [--json FILE] [--only a,b]``.

A bounded, repeatable run of the fault matrix against the real stack: the real Docker
daemon, the simulator over HTTP (with the scripted stand-in behind it: a test double,
so no figure here is a model's), SQLite, and ``python -m rsr_async run`` as a real
subprocess. For each fault it reports the episodes expected, stored, lost, duplicated
(run again after being stored), wrongly blamed (an infrastructure fault that changed a
graded outcome, or a model-caused one stored as infrastructure or retried), containers
and processes left behind, and the event loop's worst p99 and longest stall, plus named
checks of what the user sees (exit codes, one-line errors, files left untouched).

Groups: ``process`` (SIGKILL at random points five times in one run directory, SIGINT
once and twice, SIGTERM), ``model`` (server errors, dropped connections, a stalled
server, a server that dies and comes back), ``sandbox`` (containers killed or removed
under running episodes, an unreachable second Docker URL), ``abuse`` (what an agent does
to its own sandbox: fork bomb, output flood, disk fill, memory over the limit,
``kill -9 -1``, ``exit``), ``input`` (malformed tasks, bad config values, a damaged or
foreign store). Floors: 0 lost, duplicated, misblamed and left behind; loop stall p99
under 100 ms during every fault. Runs in about ten minutes on two cores.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from _common import emit, parser
from _faultkit import (
    GRADED,
    Fault,
    Launch,
    containers,
    final,
    launch,
    leaked_processes,
    loop_lag,
    remove_containers,
    rows,
)

from rsr_async.config import Config, EngineConfig, RunConfig, SandboxConfig
from rsr_async.engine import Engine, Job
from rsr_async.engine.reader import RunReader
from rsr_async.harness.fakes import ReplayModel
from rsr_async.rsr.episode import EpisodeRunner
from rsr_async.rsr.runtime import run_id_for
from rsr_async.sandbox import SandboxPool
from rsr_async.schema import EpisodeSpec, JobKey, Task
from rsr_async.tasks import BUNDLED_SUITE

STALL_FLOOR_MS = 100.0
TASKS = ["word-frequency", "merge-intervals", "csv-sales-summary", "fix-app-config",
         "markdown-toc", "normalize-line-endings"]
"""Bundled tasks quick to build and to run: the suite's episodes are these × attempts."""
RUN_TIMEOUT_S = 600.0


class Suite:
    """The shared state of one suite run: its directory, tag, dataset and baseline."""

    def __init__(self, workdir: Path, *, tasks: int, attempts: int, concurrency: int, seed: int) -> None:
        self.workdir = workdir
        self.tag = uuid.uuid4().hex[:12]
        self.rng = random.Random(seed)
        self.attempts = attempts
        self.concurrency = concurrency
        self.task_dirs = [BUNDLED_SUITE / name for name in TASKS[:tasks]]
        self.dataset = self.listing("dataset.txt", self.task_dirs)
        self.baseline: dict[str, str] = {}

    def listing(self, name: str, dirs: list[Path]) -> Path:
        path = self.workdir / name
        path.write_text("".join(f"{d}\n" for d in dirs))
        return path

    def run_args(self, run_dir: Path, *extra: str, dataset: Path | None = None,
                 attempts: int | None = None) -> list[str]:
        return ["run", "--dataset", str(dataset or self.dataset), "--run-dir", str(run_dir),
                "--attempts", str(attempts or self.attempts), "--concurrency", str(self.concurrency),
                "--progress", "none", *extra]

    def start(self, run_dir: Path, *extra: str, **kw: Any) -> Launch:
        return launch(self.run_args(run_dir, *extra, **kw), log=run_dir.parent / f"{run_dir.name}.log",
                      tag=self.tag)

    def fault(self, name: str, group: str, expected: set[str] | None = None) -> Fault:
        return Fault(name=name, group=group, expected=set(self.baseline) if expected is None else expected,
                     baseline=self.baseline)

    def settle(self, fault: Fault, run_dir: Path) -> None:
        """After the fault's last process ended: what it left behind, and the loop's lag."""
        fault.leaked_processes += len(leaked_processes(self.tag))
        left = containers(run_dir)
        fault.leaked_containers += len(left)
        remove_containers(left)
        p99, longest = loop_lag(run_dir)
        fault.loop_stall_p99_ms = max(fault.loop_stall_p99_ms, p99)
        fault.loop_stall_max_ms = max(fault.loop_stall_max_ms, longest)


def _tail(launch_: Launch, lines: int = 3) -> str:
    return " | ".join(launch_.stderr().strip().splitlines()[-lines:])[-600:]


def _wait_for(predicate: Callable[[], bool], launch_: Launch, timeout_s: float) -> bool:
    """Poll ``predicate`` while the run lives (a bench, not a test: polling is fine)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        if launch_.proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


def _finish(suite: Suite, fault: Fault, run_dir: Path, *extra: str, expect_rc: tuple[int, ...] = (0,),
            **kw: Any) -> None:
    """Run (or resume) ``run_dir`` to the end and check its exit code."""
    done = suite.start(run_dir, *extra, **kw)
    rc = done.wait(RUN_TIMEOUT_S)
    fault.check(f"the run to the end exits {'/'.join(map(str, expect_rc))}", rc in expect_rc,
                f"exit {rc}: {_tail(done)}")


# -- baseline ----------------------------------------------------------------------------


def baseline(suite: Suite) -> dict[str, Any]:
    run_dir = suite.workdir / "baseline"
    started = time.monotonic()
    done = suite.start(run_dir)
    rc = done.wait(RUN_TIMEOUT_S)
    if rc != 0:
        raise SystemExit(f"bench faults: the fault-free baseline run failed (exit {rc}): {_tail(done, 10)}")
    suite.baseline = {k: r.status for k, r in final(run_dir / "run.db").items()}
    lag = loop_lag(run_dir)
    remove_containers(containers(run_dir))
    return {"episodes": len(suite.baseline), "succeeded": sum(s == "succeeded" for s in suite.baseline.values()),
            "seconds": round(time.monotonic() - started, 1), "loop_stall_p99_ms": round(lag[0], 1),
            "loop_stall_max_ms": round(lag[1], 1)}


# -- process: signals --------------------------------------------------------------------


def sigkill_x5(suite: Suite) -> Fault:
    """SIGKILL of the run process (only it: its children must die on their own) at five
    random points in one run directory, then a run to the end."""
    fault = suite.fault("sigkill_x5", "process")
    run_dir = suite.workdir / "sigkill"
    db = run_dir / "run.db"
    snapshots = []
    kills = launches = 0
    while kills < 5 and launches < 10:
        launches += 1
        before = len(final(db))
        run = suite.start(run_dir, "--concurrency", "1")  # slower, so five kills land mid-run
        if launches % 2:  # a moment in start-up or mid-run
            _wait_for(lambda: False, run, suite.rng.uniform(1.0, 7.0))
        else:  # just after a job was stored
            _wait_for(lambda before=before: len(final(db)) > before, run, 120)
        if run.proc.poll() is None:
            os.kill(run.proc.pid, signal.SIGKILL)
            kills += 1
        run.wait(30)
        fault.leaked_processes += len(leaked_processes(suite.tag))
        snapshots.append(final(db))
    fault.check("five kills landed while the run was alive", kills == 5, f"{kills} in {launches} launches")
    fault.notes.append(f"stored before each kill: {[len(s) for s in snapshots]}")
    _finish(suite, fault, run_dir)
    fault.judge(final(db), earlier=snapshots)
    suite.settle(fault, run_dir)
    return fault


def _interrupt(suite: Suite, name: str, signals: list[signal.Signals], expect_rc: int) -> Fault:
    fault = suite.fault(name, "process")
    run_dir = suite.workdir / name
    db = run_dir / "run.db"
    run = suite.start(run_dir)
    _wait_for(lambda: len(final(db)) >= 2, run, 120)
    for i, sig in enumerate(signals):
        if i:
            time.sleep(0.3)  # a user pressing Ctrl-C again
        run.proc.send_signal(sig)
    rc = run.wait(120)
    fault.check(f"the interrupted run exits {expect_rc}", rc == expect_rc, f"exit {rc}: {_tail(run)}")
    fault.check("no traceback", "Traceback" not in run.stderr())
    fault.leaked_processes += len(leaked_processes(suite.tag))
    snapshot = final(db)
    _finish(suite, fault, run_dir)
    fault.judge(final(db), earlier=[snapshot])
    suite.settle(fault, run_dir)
    return fault


def sigint_once(suite: Suite) -> Fault:
    return _interrupt(suite, "sigint_once", [signal.SIGINT], 130)


def sigint_twice(suite: Suite) -> Fault:
    return _interrupt(suite, "sigint_twice", [signal.SIGINT, signal.SIGINT], 130)


def sigterm(suite: Suite) -> Fault:
    return _interrupt(suite, "sigterm", [signal.SIGTERM], 143)


# -- model servers -----------------------------------------------------------------------


def _injected(suite: Suite, name: str, setting: str) -> Fault:
    fault = suite.fault(name, "model")
    run_dir = suite.workdir / name
    _finish(suite, fault, run_dir, "--set", setting, expect_rc=(0, 4))
    fault.judge(final(run_dir / "run.db"))
    suite.settle(fault, run_dir)
    return fault


def server_errors(suite: Suite) -> Fault:
    """15% of requests answered with HTTP 500 by the embedded simulator."""
    return _injected(suite, "server_errors", "sim.error_rate=0.15")


def server_drops(suite: Suite) -> Fault:
    """15% of connections dropped before any answer."""
    return _injected(suite, "server_drops", "sim.drop_rate=0.15")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start_server(suite: Suite, port: int, log: Path) -> Launch:
    """A separate simulator the suite can stop and kill (tagged apart from the runs)."""
    server = launch(["sim-server", "--port", str(port), "--tasks", str(BUNDLED_SUITE)], log=log,
                    tag="server-" + suite.tag)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return server
        except OSError:
            if server.proc.poll() is not None:
                break
            time.sleep(0.1)
    raise SystemExit(f"bench faults: the simulator on port {port} did not start: {_tail(server, 10)}")


def _stop_server(suite: Suite, server: Launch, fault: Fault) -> None:
    server.proc.send_signal(signal.SIGCONT)
    server.proc.terminate()
    server.wait(30)
    fault.leaked_processes += len(leaked_processes("server-" + suite.tag))


def _short_tasks(suite: Suite, agent_timeout_s: int) -> Path:
    """Copies of the suite's tasks (same names, so the same episodes) whose agent time
    limit is ``agent_timeout_s``: a stall longer than it must still not fail them."""
    root = suite.workdir / f"tasks-{agent_timeout_s}s"
    dirs = []
    for task in suite.task_dirs:
        copy = root / task.name
        if not copy.exists():
            shutil.copytree(task, copy, symlinks=True)
            toml = copy / "task.toml"
            text = toml.read_text()
            head, sep, rest = text.partition("[agent]")
            line_end = rest.index("\n", rest.index("timeout_sec"))
            start = rest.index("timeout_sec")
            toml.write_text(head + sep + rest[:start] + f"timeout_sec = {agent_timeout_s}" + rest[line_end:])
        dirs.append(copy)
    return suite.listing(f"dataset-{agent_timeout_s}s.txt", dirs)


def server_stall(suite: Suite) -> Fault:
    """The only model server stops answering (SIGSTOP) for 20 s, longer than the agents'
    15 s time limit, then goes on: the stall is the server's time, not the agents'."""
    fault = suite.fault("server_stall", "model")
    run_dir = suite.workdir / "server_stall"
    port = _free_port()
    server = _start_server(suite, port, suite.workdir / "server_stall-sim.log")
    dataset = _short_tasks(suite, 15)
    try:
        run = suite.start(run_dir, "--llm-url", f"http://127.0.0.1:{port}", "--set",
                          "harness.model_call_budget_s=2", dataset=dataset)
        _wait_for(lambda: len(final(run_dir / "run.db")) >= 1, run, 180)
        server.proc.send_signal(signal.SIGSTOP)
        at_stall = len(final(run_dir / "run.db"))
        time.sleep(20)
        server.proc.send_signal(signal.SIGCONT)
        fault.check("episodes were running through the stall", at_stall < len(fault.expected),
                    f"{at_stall} of {len(fault.expected)} stored when it began")
        rc = run.wait(RUN_TIMEOUT_S)
        fault.check("the run exits 0 or 4", rc in (0, 4), f"exit {rc}: {_tail(run)}")
    finally:
        _stop_server(suite, server, fault)
    fault.judge(final(run_dir / "run.db"))
    suite.settle(fault, run_dir)
    return fault


def server_dies_and_returns(suite: Suite) -> Fault:
    """The only model server is killed mid-run and restarted on its port 3 s later."""
    fault = suite.fault("server_dies_and_returns", "model")
    run_dir = suite.workdir / "server_dies"
    port = _free_port()
    log = suite.workdir / "server_dies-sim.log"
    server = _start_server(suite, port, log)
    try:
        run = suite.start(run_dir, "--llm-url", f"http://127.0.0.1:{port}")
        _wait_for(lambda: len(final(run_dir / "run.db")) >= 2, run, 180)
        server.proc.kill()
        at_death = len(final(run_dir / "run.db"))
        fault.check("episodes were running when it died", at_death < len(fault.expected),
                    f"{at_death} of {len(fault.expected)} stored")
        server.wait(30)
        time.sleep(3)
        server = _start_server(suite, port, log)
        rc = run.wait(RUN_TIMEOUT_S)
        fault.check("the run exits 0 or 4", rc in (0, 4), f"exit {rc}: {_tail(run)}")
    finally:
        _stop_server(suite, server, fault)
    fault.judge(final(run_dir / "run.db"))
    suite.settle(fault, run_dir)
    return fault


# -- sandboxes ---------------------------------------------------------------------------


def _running(run_dir: Path) -> list[str]:
    out = subprocess.run(["docker", "ps", "-q", "--filter", f"label=rsr_async.run={run_id_for(run_dir)}",
                          "--filter", "status=running"], capture_output=True, text=True, timeout=60)
    return out.stdout.split()


def _under_episodes(suite: Suite, name: str, command: list[str]) -> Fault:
    """``command`` (docker kill / rm -f) on three containers while their episodes run."""
    fault = suite.fault(name, "sandbox")
    run_dir = suite.workdir / name
    run = suite.start(run_dir)
    hit = 0
    for _ in range(3):
        if not _wait_for(lambda: bool(_running(run_dir)), run, 120):
            break
        time.sleep(suite.rng.uniform(0.2, 1.0))  # somewhere in the episode
        live = _running(run_dir)
        if live and subprocess.run([*command, live[0]], capture_output=True, timeout=60).returncode == 0:
            hit += 1
        time.sleep(1.0)
    rc = run.wait(RUN_TIMEOUT_S)
    fault.check("containers were hit under running episodes", hit > 0, f"{hit} hit")
    fault.check("the run exits 0 or 4", rc in (0, 4), f"exit {rc}: {_tail(run)}")
    end = final(run_dir / "run.db")
    # A hit can land as its episode ends (verified, being removed): not every hit costs
    # a retry. What must hold is judged below: the graded outcomes are the fault-free ones.
    fault.notes.append(f"{hit} containers hit, {sum(1 for r in end.values() if r.tries > 1)} episodes retried")
    fault.judge(end)
    suite.settle(fault, run_dir)
    return fault


def container_killed(suite: Suite) -> Fault:
    return _under_episodes(suite, "container_killed", ["docker", "kill"])


def container_removed(suite: Suite) -> Fault:
    return _under_episodes(suite, "container_removed", ["docker", "rm", "-f"])


def docker_host_unreachable(suite: Suite) -> Fault:
    """A second Docker URL that refuses every connection from the start: the run goes on
    with the reachable daemon and names the other (a second live daemon that dies and
    comes back mid-run: tests/sandbox/test_hosts.py)."""
    fault = suite.fault("docker_host_unreachable", "sandbox")
    run_dir = suite.workdir / "docker_unreachable"
    nowhere = suite.workdir / "no-docker.sock"
    urls = json.dumps(["unix:///var/run/docker.sock", f"unix://{nowhere}"])
    done = suite.start(run_dir, "--set", f"sandbox.docker_urls={urls}")
    rc = done.wait(RUN_TIMEOUT_S)
    fault.check("the run exits 0 with the reachable daemon", rc == 0, f"exit {rc}: {_tail(done)}")
    fault.check("the unreachable URL is named", str(nowhere) in done.stderr())
    fault.judge(final(run_dir / "run.db"))
    suite.settle(fault, run_dir)
    return fault


# -- abuse: what an agent does to its own sandbox ----------------------------------------


def _act(keys: str = "", done: bool = False, duration: float = 0.5) -> str:
    commands = [{"keystrokes": keys, "duration": duration}] if keys else []
    return json.dumps({"analysis": "a", "plan": "p", "commands": commands, "task_complete": done})


def _abuse_task(suite: Suite) -> Task:
    """Passes when /root/out.txt says hello: what the agent left on disk is graded."""
    root = suite.workdir / "abuse-task"
    tests = root / "tests"
    tests.mkdir(parents=True, exist_ok=True)
    (tests / "test.sh").write_text(
        "mkdir -p /logs/verifier\n"
        "if grep -qx hello /root/out.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")
    return Task(name="leave-hello", path=str(root), instruction="Write hello to /root/out.txt.",
                docker_image=SandboxConfig().base_image, tests_dir=str(tests), verifier_timeout_s=60,
                agent_timeout_s=120, memory_mb=256, storage_mb=64)


ABUSE: dict[str, tuple[str, float, str, str]] = {
    "fork_bomb": ("b() { b | b & }; b\n", 3.0, "succeeded", ""),
    "output_flood": ("yes rsr-flood-line | head -c 30000000\n", 8.0, "succeeded", "rsr-flood-line"),
    "disk_fill": ("dd if=/dev/zero of=/tmp/fill bs=1M count=512\n", 5.0, "succeeded",
                  "No space left on device"),
    "memory_over_limit": ("head -c 700m /dev/zero | tail >/dev/null; echo tail exit $?\n", 8.0,
                          "succeeded", "tail exit 137"),
    "kill_all": ("kill -9 -1\n", 1.0, "failed", ""),
    "exit_shell": ("exit\n", 1.0, "succeeded", ""),
}
"""Abuse → (keystrokes, wait, the graded outcome expected, what the agent must have been
shown). The agent first writes the answer, then abuses its sandbox (a 256 MiB, 256-pid,
64 MiB-of-/tmp sandbox), then claims completion: what is left is graded, except after
``kill -9 -1`` (the container is gone, nothing is left to grade: the model's failure).
A fork bomb keeps running through the tests, as the agent's processes do in Harbor; the
tests start outside the sandbox's full pids cgroup (cgroup v1) and grade the answer."""


async def _abuse_episode(suite: Suite, name: str) -> tuple[Fault, str]:
    keys, wait, expected, _ = ABUSE[name]
    task = _abuse_task(suite)
    key = JobKey(stage="discover", task=f"{task.name}-{name.replace('_', '-')}", harness="terminus2")
    fault = suite.fault(name, "abuse", expected={str(key)})
    fault.baseline = {}
    spec = EpisodeSpec(key=key, task=task, deadline_s=180)
    replies = [_act("echo hello > /root/out.txt\n"), _act(keys, duration=wait), _act(done=True), _act(done=True)]
    model = ReplayModel(replies * 3, model_name="saboteur")  # enough for every retry
    config = Config(run=RunConfig(concurrency=1),
                    engine=EngineConfig(progress="none", infra_retries=2, retry_backoff_s=0.1, store_batch_ms=10.0))
    run_dir = suite.workdir / f"abuse-{name}"
    sandbox_config = SandboxConfig(api_timeout_s=60.0, pids_limit=256)
    async with SandboxPool(sandbox_config, run_id=run_id_for(run_dir), run_dir=run_dir) as pool:
        runner = EpisodeRunner(pool=pool, model=model, harness=config.harness, scripted=True)
        async with Engine(config, runner=runner, run_dir=run_dir) as engine:
            [_ async for _ in engine.run([Job.episode(spec)], stage="discover")]
            stats = engine.statistics()
        fault.loop_stall_p99_ms = stats.loop_lag_p99_ms
        fault.loop_stall_max_ms = stats.loop_lag_max_ms
    return fault, expected


def abuse(name: str) -> Callable[[Suite], Fault]:
    def scenario(suite: Suite) -> Fault:
        fault, expected = anyio.run(_abuse_episode, suite, name)
        run_dir = suite.workdir / f"abuse-{name}"
        end = final(run_dir / "run.db")
        fault.judge(end, model_caused=True)
        [row] = end.values() or [None]
        fault.check(f"graded {expected}", row is not None and row.status == expected,
                    f"{row.status if row else 'nothing stored'}: {row.error if row else ''}")
        evidence = ABUSE[name][3]
        if evidence:
            with RunReader.open_readonly(run_dir / "run.db") as store:
                shown = "".join(m.content for r in store.results(stage="discover") if r.trajectory
                                for m in r.trajectory.messages if m.origin == "env")
            fault.check(f"the agent was shown {evidence!r}", evidence in shown)
        fault.leaked_processes += len(leaked_processes(suite.tag, wait_s=0))
        left = containers(run_dir)
        fault.leaked_containers += len(left)
        remove_containers(left)
        return fault

    scenario.__name__ = name
    scenario.__doc__ = f"The agent's own sandbox: {ABUSE[name][0].strip()}"
    return scenario


# -- bad input ---------------------------------------------------------------------------


def _bad_tasks(root: Path, good: list[Path]) -> dict[str, str]:
    """Good copies plus one task per kind of damage; name -> where it must end."""
    for task in good:
        shutil.copytree(task, root / task.name, symlinks=True, dirs_exist_ok=True)
    template = good[0]

    def copy(name: str) -> Path:
        target = root / name
        shutil.copytree(template, target, symlinks=True, dirs_exist_ok=True)
        toml = target / "task.toml"
        text = toml.read_text().replace(f'name = "{template.name}"', f'name = "{name}"')
        toml.write_text(text.replace(f'name = "rsr-async/{template.name}"', f'name = "rsr-async/{name}"'))
        return target

    copy("bad-toml").joinpath("task.toml").write_text("[task\nname = ")
    copy("no-instruction").joinpath("instruction.md").unlink()
    copy("huge-instruction").joinpath("instruction.md").write_bytes(b"word " * (10 * 1024 * 1024))
    copy("binary-instruction").joinpath("instruction.md").write_bytes(bytes(range(256)) * 64)
    # Under the 1 MiB load limit, far over the simulator's 32768-token context (issue 30).
    copy("unfitting-instruction").joinpath("instruction.md").write_text("Read this note. " * 40_000)
    link = copy("symlink-out").joinpath("instruction.md")
    link.unlink()
    link.symlink_to("/etc/hostname")
    docker = copy("dockerfile-fails").joinpath("environment", "Dockerfile")
    docker.write_text(docker.read_text() + "\nRUN echo this build fails on purpose && false\n")
    copy("no-reward").joinpath("tests", "test.sh").write_text("#!/bin/bash\necho writes no reward\n")
    copy("garbage-reward").joinpath("tests", "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\necho banana > /logs/verifier/reward.txt\n")
    return {"bad-toml": "refused", "no-instruction": "refused", "huge-instruction": "refused",
            "binary-instruction": "refused", "symlink-out": "refused", "dockerfile-fails": "permanent",
            "unfitting-instruction": "permanent",
            "no-reward": "permanent", "garbage-reward": "permanent"}


def malformed_tasks(suite: Suite) -> Fault:
    """A dataset of good tasks and nine damaged ones: the good ones run as without them;
    the damaged ones are refused by name, or stored as the task's fault, never graded."""
    root = suite.workdir / "malformed"
    kinds = _bad_tasks(root, suite.task_dirs[:2])
    expected = {k for k in suite.baseline if k.split("/")[1] in {t.name for t in suite.task_dirs[:2]}}
    fault = suite.fault("malformed_tasks", "input", expected=expected)
    run_dir = suite.workdir / "malformed-run"
    done = suite.start(run_dir, dataset=root)
    rc = done.wait(RUN_TIMEOUT_S)
    log = done.stderr()
    fault.check("the run exits 0 or 4 (not 1: one bad task never costs the others)", rc in (0, 4),
                f"exit {rc}: {_tail(done)}")
    fault.check("no traceback", "Traceback" not in log)
    end = final(run_dir / "run.db")
    for name, fate in kinds.items():
        mine = {k: r for k, r in rows(run_dir / "run.db").items() if k.split("/")[1] == name}
        if fate == "refused":
            fault.check(f"{name}: refused at load time, named", not mine and name in log)
        elif fate == "permanent":
            ok = bool(mine) and all(r.tries == 1 and (r.error or "").startswith("permanent:") for r in mine.values())
            fault.check(f"{name}: stored once as the task's fault", ok, str(list(mine.values()))[:300])
        else:
            ok = bool(mine) and all(r.status not in GRADED for r in mine.values())
            fault.check(f"{name}: a verifier error, never graded", ok, str(list(mine.values()))[:300])
    fault.judge(end)
    suite.settle(fault, run_dir)
    return fault


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "absent"


def _refused(suite: Suite, fault: Fault, what: str, run_dir: Path, *extra: str) -> None:
    """``run`` with bad input: exit 1 (or 2 for usage), one line naming it, nothing touched."""
    db = run_dir / "run.db"
    before = _digest(db)
    done = launch(suite.run_args(run_dir, *extra), log=suite.workdir / "refusals.log", tag=suite.tag)
    rc = done.wait(120)
    text = done.log.read_text(errors="replace").strip().splitlines()
    last = text[-1] if text else ""
    fault.check(f"{what}: refused with one line", rc in (1, 2) and "error" in last and
                "Traceback" not in "\n".join(text[-30:]), f"exit {rc}: {last[:300]}")
    fault.check(f"{what}: the store is untouched", _digest(db) == before)
    fault.check(f"{what}: no container started", not containers(run_dir))
    done.log.unlink()


def bad_config(suite: Suite) -> Fault:
    fault = suite.fault("bad_config", "input", expected=set())
    run_dir = suite.workdir / "bad-config"
    shutil.copytree(suite.workdir / "baseline", run_dir, dirs_exist_ok=True)
    for setting in ["sandbox.max_concurrent_verifiers=0", "sandbox.api_timeout_s=-1",
                    "engine.grace_period_s=nan", "llm.max_retries=-2", "run.concurrency=0"]:
        _refused(suite, fault, f"--set {setting}", run_dir, "--set", setting)
    _refused(suite, fault, "--metrics-port 70000", run_dir, "--metrics-port", "70000")
    # Issue 30: upper bounds, one URL check, no silent default.
    for flags in (["--set", "run.concurrency=99999999999999999999"], ["--set", "llm.total_timeout_s=1e300"],
                  ["--llm-url", "http://127.0.0.1:99999"], ["--llm-url", "http://[::1"],
                  ["--llm-url", "ftp://x"], ["--sim-servers", "100000"], ["--stages", ""]):
        _refused(suite, fault, " ".join(flags), run_dir, *flags)
    not_dir = suite.workdir / "a-file"
    not_dir.write_text("precious\n")
    _refused(suite, fault, "--run-dir naming a file", not_dir)
    fault.check("--run-dir naming a file: the file is untouched", not_dir.read_text() == "precious\n")
    bad_toml = suite.workdir / "bad.toml"
    bad_toml.write_text("[engine]\ngrace_period_s = 'soon'\n")
    _refused(suite, fault, "a config file with a wrong type", run_dir, "--config", str(bad_toml))
    fault.leaked_processes += len(leaked_processes(suite.tag))
    return fault


def damaged_store(suite: Suite) -> Fault:
    fault = suite.fault("damaged_store", "input", expected=set())
    original = (suite.workdir / "baseline" / "run.db").read_bytes()
    cases: dict[str, Callable[[Path], None]] = {
        "truncated": lambda db: db.write_bytes(original[: len(original) // 2]),
        "garbage": lambda db: db.write_bytes(b"this is not a database\n" * 100),
        "foreign": lambda db: _foreign(db),
    }
    for name, make in cases.items():
        run_dir = suite.workdir / f"store-{name}"
        run_dir.mkdir()
        make(run_dir / "run.db")
        _refused(suite, fault, f"a {name} run.db", run_dir)
    fault.leaked_processes += len(leaked_processes(suite.tag))
    return fault


def _foreign(db: Path) -> None:
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
    con.execute("INSERT INTO notes (text) VALUES ('someone else''s database')")
    con.commit()
    con.close()


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` by content, less SQLite's -wal/-shm (a reader may leave them)."""
    return {str(p.relative_to(root)): _digest(p) for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.endswith(("-wal", "-shm"))}


def _cli(suite: Suite, log: Path, *args: str) -> tuple[int, list[str]]:
    done = launch(list(args), log=log, tag=suite.tag)
    rc = done.wait(120)
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    log.unlink()
    return rc, lines


def out_not_ours(suite: Suite) -> Fault:
    """``--out`` naming what export/analyze did not write (issue 30: they deleted it):
    refused in one line, every file kept; an earlier output of their own is replaced."""
    fault = suite.fault("out_not_ours", "input", expected=set())
    run_dir = suite.workdir / "out-not-ours"
    shutil.copytree(suite.workdir / "baseline", run_dir, dirs_exist_ok=True)
    log = suite.workdir / "out-not-ours.log"
    data = suite.workdir / "out-not-ours-results"
    data.mkdir(exist_ok=True)
    (data / "f.jsonl").write_text('{"task": "a", "harness": "h", "attempt": 0, "reward": 1}\n')
    for what, args, kept in (
        ("export RUN --out RUN", ["export", str(run_dir), "--out", str(run_dir), "--allow-scripted"], run_dir),
        ("analyze RUN --out RUN", ["analyze", str(run_dir), "--out", str(run_dir), "--no-figures"], run_dir),
        ("analyze --results D/f.jsonl --out D",
         ["analyze", "--results", str(data / "f.jsonl"), "--out", str(data), "--no-figures"], data),
    ):
        before = _tree(kept)
        rc, lines = _cli(suite, log, *args)
        fault.check(f"{what}: refused with one line", rc == 1 and len(lines) == 1 and "error" in lines[0],
                    f"exit {rc}: {lines[-3:]}")
        fault.check(f"{what}: every file kept", _tree(kept) == before)
    out = suite.workdir / "out-not-ours-export"
    codes = [_cli(suite, log, "export", str(run_dir), "--out", str(out), "--allow-scripted")[0] for _ in range(2)]
    fault.check("an earlier export of ours is replaced", codes == [0, 0], str(codes))
    fault.leaked_processes += len(leaked_processes(suite.tag))
    return fault


def read_only_run(suite: Suite) -> Fault:
    """A finished run on a read-only mount (issue 30: "unreadable ... restore it"):
    analyze and export read it, and nothing is created there."""
    fault = suite.fault("read_only_run", "input", expected=set())
    run_dir = suite.workdir / "baseline"
    point = suite.workdir / "read-only"
    point.mkdir(exist_ok=True)
    before = sorted(p.name for p in run_dir.iterdir())
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind -o ro {run_dir} {point}"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        fault.check("a read-only bind mount can be made here (unshare -m, as root)", False, probe.stderr[-300:])
        return fault
    for what, args in (("analyze", ["analyze", str(point), "--out", str(suite.workdir / "ro-analysis"),
                                    "--no-figures"]),
                       ("export", ["export", str(point), "--out", str(suite.workdir / "ro-export"),
                                   "--allow-scripted"])):
        argv = [sys.executable, "-m", "rsr_async", *args]
        shell = f"mount --bind -o ro {run_dir} {point} && exec " + " ".join(shlex.quote(a) for a in argv)
        proc = subprocess.run(["unshare", "-m", "sh", "-c", shell], capture_output=True, text=True, timeout=240)
        fault.check(f"{what} reads the read-only run", proc.returncode == 0, proc.stderr[-300:])
    fault.check("nothing was created in the run directory", sorted(p.name for p in run_dir.iterdir()) == before)
    return fault


DEFERRED: dict[str, str] = {}
"""Faults in the matrix that wait for another issue: not run unless named in --only."""

SCENARIOS: list[Callable[[Suite], Fault]] = [
    sigkill_x5, sigint_once, sigint_twice, sigterm,
    server_errors, server_drops, server_stall, server_dies_and_returns,
    container_killed, container_removed, docker_host_unreachable,
    *(abuse(name) for name in ABUSE),
    malformed_tasks, bad_config, damaged_store, out_not_ours, read_only_run,
]


def main(argv: list[str]) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=6, help=f"bundled tasks per run (at most {len(TASKS)})")
    p.add_argument("--attempts", type=int, default=4, help="attempts per task")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--seed", type=int, default=0, help="seeds the kill points")
    p.add_argument("--only", default="", help="comma-separated faults to run (default: all)")
    p.add_argument("--workdir", help="keep the run directories here (default: a temporary one)")
    args = p.parse_args(argv)
    names = [s.__name__ for s in SCENARIOS]
    only = [n for n in args.only.split(",") if n]
    unknown = sorted(set(only) - set(names))
    if unknown:
        p.error(f"--only: unknown fault(s) {', '.join(unknown)} (known: {', '.join(names)})")
    if not 1 <= args.tasks <= len(TASKS):
        p.error(f"--tasks: expected 1..{len(TASKS)}")
    scratch = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="rsr-faults-"))
    scratch.mkdir(parents=True, exist_ok=True)
    suite = Suite(scratch, tasks=args.tasks, attempts=args.attempts, concurrency=args.concurrency,
                  seed=args.seed)
    started = time.monotonic()
    try:
        base = baseline(suite)
        results = []
        for scenario in SCENARIOS:
            if (only and scenario.__name__ not in only) or (not only and scenario.__name__ in DEFERRED):
                continue
            t0 = time.monotonic()
            fault = scenario(suite)
            fault.seconds = time.monotonic() - t0
            results.append(fault.as_json(STALL_FLOOR_MS))
            print(f"bench faults: {fault.name}: {'ok' if results[-1]['passed'] else 'FAILED'} "
                  f"({fault.seconds:.0f} s)", flush=True)
    finally:
        if not args.workdir:
            shutil.rmtree(scratch, ignore_errors=True)
    totals = {name: sum(r[name] for r in results) for name in
              ("lost", "duplicated", "misblamed", "leaked_containers", "leaked_processes")}
    emit({
        "benchmark": "faults",
        "model": "scripted stand-in (a test double): no figure here is a model's",
        **totals,
        "loop_stall_p99_ms": max((r["loop_stall_p99_ms"] for r in results), default=0.0),
        "loop_stall_max_ms": max((r["loop_stall_max_ms"] for r in results), default=0.0),
        "faults": len(results),
        "faults_passed": sum(r["passed"] for r in results),
        "checks_failed": sum(not c["ok"] for r in results for c in r["checks"]),
        "floors": {"lost": 0, "duplicated": 0, "misblamed": 0, "leaked_containers": 0,
                   "leaked_processes": 0, "loop_stall_p99_ms_under": STALL_FLOOR_MS},
        "deferred": {name: why for name, why in DEFERRED.items() if name not in only},
        "baseline": base,
        "settings": {"tasks": args.tasks, "attempts": args.attempts, "concurrency": args.concurrency,
                     "seed": args.seed, "only": only},
        "seconds": round(time.monotonic() - started, 1),
        "results": results,
    }, args.json)
    return 0 if all(r["passed"] for r in results) else 1
