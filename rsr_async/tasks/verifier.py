"""Grade a finished episode the way the reference harnesses do, out of the agent's reach.

Harbor (its default, shared verifier mode): the agent's processes stay alive — a task may
test the server the agent left running — while ``tests/`` is put in ``/tests``,
``/tests/test.sh`` runs as ``bash -c "(/tests/test.sh) > /logs/verifier/test-stdout.txt
2>&1"`` (made executable first) under the verifier timeout, and the reward is read from
``/logs/verifier/reward.json`` (a flat map name → number) or else
``/logs/verifier/reward.txt`` (one number). Legacy terminal-bench: ``tests/`` and
``run-tests.sh`` go to ``/tests``, ``bash /tests/run-tests.sh`` runs with ``TEST_DIR``,
and its output is read with the task's ``parser_name`` (:mod:`~rsr_async.tasks.parsers`;
resolved = every test passed).

**Out of the agent's reach.** All of it goes through :meth:`Sandbox.run_hidden
<rsr_async.sandbox.base.Sandbox.run_hidden>` (for Docker, the verifier station of
:mod:`rsr_async.sandbox.hidden`): ``/tests`` and ``/logs/verifier`` are fresh tmpfs
mounts that only the test run sees, nothing the engine runs there resolves through the
agent's ``PATH``, shell functions, aliases, ``LD_PRELOAD`` or binaries it could have
replaced, and the reward is read through the descriptor taken when ``/logs/verifier``
was mounted. A shadowed ``cat`` or ``rm``, a planted ``reward.txt``, a background loop
writing one (under ``nohup``, ``setsid`` or a double fork) change nothing. A sandbox
whose processes moved or replaced those directories while the tests ran is graded 0,
with the reason (:attr:`Verification.tampered`). What shared mode cannot defend: the
tests run with the task's own tools (``bash``, ``python3``, ``/etc/ld.so.preload``),
which the agent, root in that system, may have replaced; the README says so.

``stop_agent=True`` (``sandbox.stop_agent_before_tests``) brings back the old,
stricter-but-Harbor-incompatible step: every process the agent left is killed before the
tests (a task testing a server the agent started then fails).

What Harbor keeps of a verification is kept too (:attr:`Verification.logs`): the files
the tests wrote under ``/logs/verifier`` (``ctrf.json``, ``test.log``, the reward,
``test-stdout.txt``), each capped.

**Who is at fault.** A reward that is missing, empty or unparseable, and a legacy parser
that finds no test result, are the *task's* fault (its test script, not the model and not
the machine): a :class:`VerificationError` marked permanent, stored once, never retried,
never graded. Tests that run past their time limit, or that were killed by a signal
(the machine's doing, e.g. out of memory), are a retried :class:`VerificationError`.
"""

from __future__ import annotations

import functools
import logging
import math
import posixpath
import re
import shlex
import shutil
import tempfile
import time
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol

import anyio
import msgspec
import orjson

from ..errors import SandboxError, TaskError, VerifierError
from ..sandbox.base import HiddenReport, HiddenRun, Sandbox
from ..schema import Task
from .parsers import grade_test_output

log = logging.getLogger(__name__)

__all__ = [
    "REWARD_DIR",
    "TESTS_DIR",
    "Verification",
    "VerificationError",
    "cap_logs",
    "grade",
    "hidden_run",
    "main_reward",
    "parse_pytest_summary",
    "parse_reward_json",
    "parse_reward_txt",
    "stop_agent_processes",
    "try_grade",
    "try_verify",
    "verify",
]

TESTS_DIR = "/tests"
REWARD_DIR = "/logs/verifier"
MAX_OUTPUT_CHARS = 200_000
"""Verifier output kept with a result: head and tail beyond this."""
MAX_LOG_FILE_CHARS = 64_000
"""Each file of :attr:`Verification.logs`: head and tail beyond this, with a marker."""
MAX_LOGS_CHARS = 256_000
"""All of :attr:`Verification.logs` together: files past it keep only a marker."""
MAX_LOG_FILES = 32
"""Files of ``/logs/verifier`` kept (in name order); the rest are named in a marker."""
STDOUT_LOG = "test-stdout.txt"
"""The name Harbor gives the test script's output among the verifier's logs."""
_CONTROL_TIME_S = 120.0
"""Limit for the opt-in stop of the agent's processes; generous because a heavily loaded
Docker host can take tens of seconds for an exec."""
_SLACK_S = 30.0
"""Extra wall clock over the in-container limit before we give up on the exec itself."""
_STOP_TRIES = 3
"""Fresh execs tried for the opt-in stop before giving up."""


class Verification(msgspec.Struct, kw_only=True):
    """The verifier's verdict on one sandbox."""

    reward: float | None
    """Main reward: the ``reward`` key, else the mean of all keys; None when ``error``."""
    rewards: dict[str, float] = msgspec.field(default_factory=dict)
    """Every key the verifier wrote (partial credit kept whole)."""
    output: str = ""
    """What the test script printed (head/tail-truncated past 200,000 characters)."""
    error: str | None = None
    """Why no reward could be read (only from :func:`try_verify`)."""
    logs: dict[str, str] = msgspec.field(default_factory=dict)
    """What Harbor keeps of ``/logs/verifier``: relative path → text (``ctrf.json``,
    ``test.log``, the reward, and the script's output as ``test-stdout.txt``), each cut
    to :data:`MAX_LOG_FILE_CHARS` and all to :data:`MAX_LOGS_CHARS`, with markers."""
    exit_code: int | None = None
    duration_s: float = 0.0
    tampered: str | None = None
    """Why the run was void and graded 0: the sandbox's processes moved or replaced the
    tests' directories while the tests ran (None: they did not)."""

    @property
    def passed(self) -> bool:
        """Full marks: the main reward is 1 (within float noise)."""
        return self.reward is not None and self.reward >= 1.0 - 1e-9


class VerificationError(VerifierError):
    """The tests ran (or tried to) but left no usable reward; keeps their output."""

    def __init__(
        self,
        message: str,
        *,
        task: str,
        output: str = "",
        exit_code: int | None = None,
        logs: dict[str, str] | None = None,
    ):
        self.task = task
        self.output = output
        self.exit_code = exit_code
        self.logs = logs or {}
        super().__init__(f"task {task!r}: {message}")


# -- parsing (pure) ------------------------------------------------------------------


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    result = float(value)
    return result if math.isfinite(result) else None


def parse_reward_json(text: str) -> dict[str, float]:
    """A flat JSON object of name → finite number; ValueError otherwise."""
    if not text.strip():
        raise ValueError("reward.json is empty")
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"reward.json is not JSON: {exc}") from exc
    if not isinstance(data, dict) or not data:
        raise ValueError("reward.json must be a non-empty object of name → number")
    rewards: dict[str, float] = {}
    for key, value in data.items():
        number = _number(value)
        if number is None:
            raise ValueError(f"reward.json: {key!r} is {value!r}, not a finite number")
        rewards[str(key)] = number
    return rewards


def parse_reward_txt(text: str) -> float:
    """One finite number; ValueError otherwise."""
    stripped = text.strip()
    if not stripped:
        raise ValueError("reward.txt is empty")
    try:
        value = float(stripped)
    except ValueError:
        raise ValueError(f"reward.txt holds {stripped[:80]!r}, not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"reward.txt holds {stripped!r}, not a finite number")
    return value


def main_reward(rewards: dict[str, float]) -> float:
    """The ``reward`` key when present, else the mean of all keys."""
    if "reward" in rewards:
        return rewards["reward"]
    return sum(rewards.values()) / len(rewards)


def parse_pytest_summary(output: str) -> dict[str, float]:
    """Legacy terminal-bench grading with its default ``pytest`` parser:
    :func:`~rsr_async.tasks.parsers.grade_test_output` (resolved = every test in pytest's
    ``short test summary info`` passed). ValueError when the output holds none."""
    return grade_test_output("pytest", output)


def _truncate(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted ...]\n{text[-half:]}"


def cap_logs(files: dict[str, str]) -> dict[str, str]:
    """Apply :data:`MAX_LOG_FILE_CHARS` to each file and :data:`MAX_LOGS_CHARS` to all
    (in order): a file past the total keeps only a marker saying so (and once not even
    markers fit, the remaining files are left out)."""
    out: dict[str, str] = {}
    total = 0
    for name, text in files.items():
        kept = _truncate(text, MAX_LOG_FILE_CHARS - 100)  # room for the marker
        if total + len(kept) > MAX_LOGS_CHARS:
            kept = f"[... {len(text)} characters not kept: verifier logs past {MAX_LOGS_CHARS} characters ...]"
            if total + len(kept) > MAX_LOGS_CHARS:
                break
        out[name] = kept
        total += len(kept)
    return out


# -- running -------------------------------------------------------------------------


async def _control(sandbox: Sandbox, command: str) -> str:
    with anyio.fail_after(_CONTROL_TIME_S + _SLACK_S):
        result = await sandbox.run(command, time_limit=_CONTROL_TIME_S)
    if result.exit_code != 0:
        how = "timed out" if result.timed_out else f"exited {result.exit_code}"
        raise SandboxError(f"sandbox {sandbox.id}: {command!r} {how}: {result.output[-500:]}")
    return result.output


# Runs in a fresh exec (Docker cannot kill an exec): freeze every process except the
# container's own (pid 1 and, under Docker's init, the command it started: pid 1's oldest
# child, since nothing the agent starts can be older) and this script's own exec, round
# after round until no new one appears (a loop forks between reading /proc and the
# signal), then SIGKILL them all and wait until they are gone. Bash builtins only while
# reading /proc, so the script forks nothing it would then have to tell apart from the
# agent's processes. Opt-in only (``stop_agent``): it breaks tasks that test a service.
_STOP_SCRIPT = r"""
keep=" 1 "
p=$$
while [ "$p" -gt 1 ]; do
  keep+="$p "
  read -r s < /proc/$p/stat || break
  s=${s##*) }; set -- $s; p=$2
done
read -r init < /proc/1/comm
if [ "$init" = docker-init ] || [ "$init" = tini ]; then
  first= ; oldest=
  for d in /proc/[0-9]*; do
    read -r s 2>/dev/null < $d/stat || continue
    s=${s##*) }; set -- $s
    [ "$2" = 1 ] || continue
    if [ -z "$oldest" ] || [ "${20}" -lt "$oldest" ]; then first=${d#/proc/}; oldest=${20}; fi
  done
  keep+="$first "
fi
found=
scan() {
  found=
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    case "$keep" in *" $pid "*) continue ;; esac
    read -r s 2>/dev/null < $d/stat || continue
    s=${s##*) }; set -- $s
    [ "$1" = Z ] || [ "$1" = X ] || [ "$2" = "$$" ] || found+="$pid "
  done
}
stopped=" "
count=0
for round in {1..200}; do
  scan
  new=0
  for pid in $found; do
    case "$stopped" in *" $pid "*) continue ;; esac
    kill -STOP "$pid" 2>/dev/null
    stopped+="$pid "; new=1; count=$((count + 1))
  done
  [ $new = 0 ] && break
done
for round in {1..200}; do
  scan
  [ -z "$found" ] && break
  for pid in $found; do kill -KILL "$pid" 2>/dev/null; done
  sleep 0.01
done
if [ -n "$found" ]; then
  echo "still running after SIGKILL: $found"
  exit 3
fi
echo "stopped $count"
"""


_STOPPED = re.compile(r"^stopped (\d+)$", re.MULTILINE)


async def stop_agent_processes(sandbox: Sandbox) -> int:
    """Kill every process in ``sandbox`` except the container's own; return how many.

    Opt-in (``sandbox.stop_agent_before_tests``): Harbor leaves the agent's processes
    running through the tests, and so does :func:`verify` by default, since tasks test
    the services an agent started. It is not what keeps the reward honest (the private
    tmpfs of :meth:`~rsr_async.sandbox.base.Sandbox.run_hidden` is). Each try is a fresh
    exec: a sandbox full of the agent's processes (a fork bomb at the pids limit) can
    refuse one. Raises :class:`~rsr_async.errors.SandboxError` when one survives SIGKILL.
    """
    for attempt in range(1, _STOP_TRIES + 1):
        try:
            output = await _control(sandbox, _STOP_SCRIPT)
            break
        except SandboxError:
            if attempt == _STOP_TRIES:
                raise
            await anyio.sleep(0.5 * attempt)
    found = _STOPPED.findall(output)  # stdout and stderr arrive merged, in no fixed order
    if not found:
        raise SandboxError(f"sandbox {sandbox.id}: stopping the agent's processes said {output[-500:]!r}")
    return int(found[-1])


def hidden_run(task: Task, *, time_limit: float, discard_changes: bool = False) -> HiddenRun:
    """What :func:`verify` asks the sandbox to run for ``task`` (Harbor's command, or
    terminal-bench's), with the verifier's environment, user and working directory
    (``discard_changes``: on a throwaway copy of the sandbox, see :class:`HiddenRun`)."""
    env = dict(task.verifier_env)
    files: list[tuple[str, str]] = [(str(task.tests_dir), "")]
    if task.format == "terminal-bench":
        env.setdefault("TEST_DIR", TESTS_DIR)
        files.append((str(Path(task.path) / task.test_script), task.test_script))
        command = f"bash {TESTS_DIR}/{task.test_script}"
        executable = None
    else:
        script = f"{TESTS_DIR}/{task.test_script}"
        command = f"({script}) > {REWARD_DIR}/{STDOUT_LOG} 2>&1"
        executable = task.test_script
    return HiddenRun(
        files=tuple(files),
        command=command,
        executable=executable,
        time_limit=time_limit,
        env=env,
        workdir=task.workdir,
        user=task.verifier_user,
        tests_dir=TESTS_DIR,
        logs_dir=REWARD_DIR,
        max_files=MAX_LOG_FILES,
        keep_bytes=MAX_LOG_FILE_CHARS - 200,
        discard_changes=discard_changes,
    )


def _logs_of(report: HiddenReport) -> dict[str, str]:
    files = dict(report.files)
    if report.files_not_sent:
        files["(not kept)"] = f"{len(report.files_not_sent)} more files: " + ", ".join(
            report.files_not_sent[:50])
    if STDOUT_LOG not in files:
        files = {STDOUT_LOG: report.output, **files}
    return cap_logs(files)


def _reward_of(report: HiddenReport) -> tuple[str, str]:
    """(kind, text) where kind is ``json``, ``txt`` or ``none``; reward.json wins."""
    if "reward.json" in report.files:
        return "json", report.files["reward.json"]
    if "reward.txt" in report.files:
        return "txt", report.files["reward.txt"]
    return "none", ""


async def verify(
    sandbox: Sandbox, task: Task, *, time_limit: float | None = None, stop_agent: bool = False,
    discard_changes: bool = False,
) -> Verification:
    """Run the task's hidden tests in ``sandbox`` (after the agent is done) and read the reward.

    The agent's processes keep running, as in Harbor (``stop_agent=True`` kills them
    first: opt-in, see :func:`stop_agent_processes`); the tests and what they write are
    out of their reach (see the module doc). ``discard_changes=True`` (RSRT's claims,
    after which the agent goes on): the tests run on a throwaway copy of the sandbox, so
    nothing they write or start stays in it.

    Raises :class:`VerificationError` when the tests leave no usable reward (permanent:
    the task's fault) or time out (retried), :class:`~rsr_async.errors.SandboxError` when
    the sandbox itself fails, and :class:`~rsr_async.errors.TaskError` when the task has
    no tests.
    """
    if not task.tests_dir or not await anyio.Path(task.tests_dir).is_dir():
        raise TaskError("task has no tests directory", task=task.name, path=task.tests_dir or task.path)
    limit = task.verifier_timeout_s if time_limit is None else time_limit
    started = time.monotonic()
    if stop_agent:
        await stop_agent_processes(sandbox)
    report = await sandbox.run_hidden(hidden_run(task, time_limit=limit, discard_changes=discard_changes))
    logs = _logs_of(report)
    stdout = report.files.get(STDOUT_LOG, "") if task.format != "terminal-bench" else ""
    output = _truncate(stdout + report.output)
    if report.tampered:
        return Verification(
            reward=0.0, rewards={"reward": 0.0}, output=output, logs=logs,
            exit_code=report.exit_code, duration_s=time.monotonic() - started,
            tampered="; ".join(report.tampered),
        )
    if report.timed_out:
        raise VerificationError(f"verifier timed out after {limit:g}s", task=task.name,
                                output=output, exit_code=report.exit_code, logs=logs)
    script = task.test_script
    try:
        if task.format == "terminal-bench":
            rewards = grade_test_output(task.test_parser, report.output)
        else:
            kind, text = _reward_of(report)
            if kind == "json":
                rewards = parse_reward_json(text)
            elif kind == "txt":
                rewards = {"reward": parse_reward_txt(text)}
            else:
                raise ValueError(f"no {REWARD_DIR}/reward.json or reward.txt was written")
    except ValueError as exc:
        error = VerificationError(f"{script} exited {report.exit_code}: {exc}", task=task.name,
                                  output=output, exit_code=report.exit_code, logs=logs)
        if report.signal is not None:  # killed from outside (out of memory): the machine's
            raise error from exc
        raise error.as_permanent() from exc  # the task's test script wrote no usable result
    return Verification(
        reward=main_reward(rewards),
        rewards=rewards,
        output=output,
        logs=logs,
        exit_code=report.exit_code,
        duration_s=time.monotonic() - started,
    )


async def try_verify(
    sandbox: Sandbox, task: Task, *, time_limit: float | None = None, stop_agent: bool = False
) -> Verification:
    """Like :func:`verify`, but a verifier error becomes ``Verification(reward=None, error=...)``."""
    try:
        return await verify(sandbox, task, time_limit=time_limit, stop_agent=stop_agent)
    except VerificationError as exc:
        return Verification(
            reward=None, output=exc.output, logs=exc.logs, error=str(exc), exit_code=exc.exit_code
        )


# -- the two verifier modes ---------------------------------------------------------------

class SandboxSource(Protocol):
    """Where a separate verifier gets its fresh sandbox (any pool fits)."""

    def sandbox(self, task: Task, *, key: str) -> AbstractAsyncContextManager[Sandbox]: ...


ARTIFACTS_DIR = "/logs/artifacts"
"""Harbor's convention directory: always copied into a separate verifier's sandbox."""


async def _collect(sandbox: Sandbox, task: Task) -> None:
    """Run the task's collect hooks in the agent's sandbox, best effort, as Harbor does (a
    failing hook is logged; the verification goes on)."""
    for hook in task.verifier_collect:
        try:
            result = await sandbox.run(hook.command, time_limit=hook.timeout_s, user=hook.user,
                                       env=dict(task.env), workdir=task.workdir)
        except SandboxError as exc:
            log.warning("task %s: collect hook %r failed: %s", task.name, hook.command, exc)
            continue
        if result.exit_code != 0:
            log.warning("task %s: collect hook %r exited %s: %s", task.name, hook.command,
                        result.exit_code, result.output[-300:])


async def grade(
    sandbox: Sandbox,
    task: Task,
    *,
    pool: SandboxSource,
    key: str,
    stop_agent: bool = False,
    time_limit: float | None = None,
    discard_changes: bool = False,
) -> Verification:
    """Grade what the agent left in ``sandbox`` by the task's verifier mode
    (``discard_changes``: as :func:`verify`'s; a separate verifier's sandbox is thrown
    away anyway).

    ``shared`` (the default): :func:`verify` in ``sandbox`` itself. ``separate`` (Harbor
    0.26's ``environment_mode``): the collect hooks run in ``sandbox``, the task's
    ``artifacts`` and ``/logs/artifacts`` are copied out through Docker's archive API
    (never the sandbox's own tools), and :func:`verify` runs in a fresh sandbox of the
    task's environment (from ``pool``, keyed ``<key>/verifier``) holding only those:
    nothing the agent installed or replaced there can answer for the tests.
    """
    if task.verifier_mode != "separate":
        return await verify(sandbox, task, time_limit=time_limit, stop_agent=stop_agent,
                            discard_changes=discard_changes)
    await _collect(sandbox, task)
    # The artifacts pass through a scratch directory, made and removed off the event loop.
    scratch = Path(await anyio.to_thread.run_sync(functools.partial(tempfile.mkdtemp, prefix="rsr-artifacts-")))
    try:
        copied: list[tuple[Path, str]] = []
        for index, source in enumerate(dict.fromkeys((*task.artifacts, ARTIFACTS_DIR))):
            local = scratch / str(index) / (Path(source).name or "root")
            try:
                await sandbox.download(source, local)
            except FileNotFoundError:
                continue  # Harbor skips an artifact that is not there
            if not local.exists():
                continue  # a link out of the artifact, refused as Harbor refuses it
            copied.append((local, source))
        async with pool.sandbox(task, key=f"{key}/verifier") as fresh:
            for local, source in copied:
                await _make_room(fresh, source, is_dir=local.is_dir())
                await fresh.upload(local, source)
            return await verify(fresh, task, time_limit=time_limit)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(functools.partial(shutil.rmtree, scratch, ignore_errors=True))


_ROOM_TIME_S = 30.0


async def _make_room(fresh: Sandbox, target: str, *, is_dir: bool) -> None:
    """Prepare ``target`` in a separate verifier's fresh sandbox as Harbor 0.26's
    ``ArtifactHandler.upload_artifacts`` does before copying an artifact in: a directory
    artifact replaces what the image has there (``empty_dirs``: the directory exists,
    empty, mode 777); a file's parent directory is made mode 777 (``ensure_dirs``). The
    sandbox is fresh from the task's image: no agent has touched the tools this runs."""
    q = shlex.quote(target)
    if is_dir:
        command = (f"if [ -L {q} ] || {{ [ -e {q} ] && [ ! -d {q} ]; }}; then rm -rf {q}; fi && "
                   f"mkdir -p {q} && find {q} -mindepth 1 -maxdepth 1 -exec rm -rf -- {{}} + && chmod 777 {q}")
    else:
        parent = posixpath.dirname(target)
        if not parent or parent == target:
            return
        command = f"mkdir -p {shlex.quote(parent)} && chmod 777 {shlex.quote(parent)}"
    result = await fresh.run(command, time_limit=_ROOM_TIME_S, user="root")
    if result.exit_code != 0:
        raise SandboxError(f"separate verifier: could not prepare {target} for its artifact "
                           f"(exit {result.exit_code}): {result.output[-300:]}")


async def try_grade(
    sandbox: Sandbox, task: Task, *, pool: SandboxSource, key: str, time_limit: float | None = None
) -> Verification:
    """Like :func:`grade`, but a verifier error becomes ``Verification(reward=None, error=...)``."""
    try:
        return await grade(sandbox, task, pool=pool, key=key, time_limit=time_limit)
    except VerificationError as exc:
        return Verification(
            reward=None, output=exc.output, logs=exc.logs, error=str(exc), exit_code=exc.exit_code
        )
