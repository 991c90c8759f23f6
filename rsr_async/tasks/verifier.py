"""Grade a finished episode the way the reference harnesses do.

Harbor: upload ``tests/`` to ``/tests``, run ``/tests/test.sh`` under the verifier
timeout, then read ``/logs/verifier/reward.json`` (a flat map name → number) or else
``/logs/verifier/reward.txt`` (one number). Legacy terminal-bench: upload ``tests/`` and
``run-tests.sh`` to ``/tests``, run it, and read its output with the task's
``parser_name`` (:mod:`~rsr_async.tasks.parsers`; resolved = every test passed).

Before the tests run, every process the agent left in the sandbox is killed and
``/logs/verifier`` is emptied: only the tests write the reward (a background loop that
keeps writing ``1`` to ``reward.txt`` does not turn a failure into a pass).

What Harbor keeps of a verification is kept too (:attr:`Verification.logs`): the files
the tests wrote under ``/logs/verifier`` (``ctrf.json``, ``test.log``, the reward) and
the script's output as ``test-stdout.txt``, each capped, read before the directory is
removed.

A missing, empty or unparseable reward is a :class:`VerificationError` (an
:class:`~rsr_async.errors.VerifierError`, i.e. infrastructure, never a zero). The tests
and reward files are removed again afterwards, so an agent that keeps acting in the same
container (RSRT's hidden-verifier loop) never sees them.
"""

from __future__ import annotations

import math
import re
import sys
import time
import uuid
from pathlib import Path

import anyio
import msgspec
import orjson

from ..errors import SandboxError, TaskError, VerifierError
from ..sandbox.base import Sandbox
from ..schema import Task
from .parsers import grade_test_output

__all__ = [
    "REWARD_DIR",
    "TESTS_DIR",
    "Verification",
    "VerificationError",
    "cap_logs",
    "clear_for_tests",
    "main_reward",
    "parse_pytest_summary",
    "parse_reward_json",
    "parse_reward_txt",
    "stop_agent_processes",
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
"""Limit for the small bookkeeping commands (clean-up, reading the reward); generous
because a heavily loaded Docker host can take tens of seconds for an ``rm``."""
_SLACK_S = 30.0
"""Extra wall clock over the in-container limit before we give up on the exec itself."""
_CLEAR_TRIES = 3
"""Fresh execs tried for the clean-up before the agent's processes are killed."""


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


# -- running -------------------------------------------------------------------------


async def _control(sandbox: Sandbox, command: str) -> str:
    with anyio.fail_after(_CONTROL_TIME_S + _SLACK_S):
        result = await sandbox.run(command, time_limit=_CONTROL_TIME_S)
    if result.exit_code != 0:
        how = "timed out" if result.timed_out else f"exited {result.exit_code}"
        raise SandboxError(f"sandbox {sandbox.id}: {command!r} {how}: {result.output[-500:]}")
    return result.output


# Runs in a fresh exec (Docker cannot kill an exec, and nothing the agent started may
# outlive its turn): freeze every process except the container's own (pid 1 and, under
# Docker's init, the command it started: pid 1's oldest child, since nothing the agent
# starts can be older) and this script's own exec, round after round until no new one
# appears (a loop forks between reading /proc and the signal), then SIGKILL them all and
# wait until they are gone. Bash builtins only while reading /proc, so the script forks
# nothing that it would then have to tell apart from the agent's processes.
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
"""
_STOP_REPORT = 'echo "stopped $count"\n'


_STOPPED = re.compile(r"^stopped (\d+)$", re.MULTILINE)


def _stopped_count(sandbox: Sandbox, output: str) -> int:
    # stdout and stderr arrive merged in no fixed order: find the report, not the last line
    found = _STOPPED.findall(output)
    if not found:
        raise SandboxError(f"sandbox {sandbox.id}: stopping the agent's processes said {output[-500:]!r}")
    return int(found[-1])


async def stop_agent_processes(sandbox: Sandbox) -> int:
    """Kill every process in ``sandbox`` except the container's own; return how many.

    :func:`verify` does this (in the same exec that empties ``/logs/verifier``) before
    the hidden tests run: a process the agent left behind (a background loop writing
    ``/logs/verifier/reward.txt``, under ``nohup``, ``setsid`` or a double fork) must not
    turn a failure into a success. The agent's shell, and any server it started, die too.
    Raises :class:`~rsr_async.errors.SandboxError` when one survives SIGKILL.
    """
    return _stopped_count(sandbox, await _control(sandbox, _STOP_SCRIPT + _STOP_REPORT))


async def clear_for_tests(sandbox: Sandbox) -> int:
    """:func:`stop_agent_processes`, then empty ``/tests`` and ``/logs/verifier``, in one
    exec (the step :func:`verify` takes first); returns how many processes were killed.

    Nothing the agent started may outlive its turn, and a reward it planted (or one left
    by an earlier verification) must not count. The kill comes first: a live loop would
    write into the freshly emptied directory.
    """
    clear = f"rm -rf {TESTS_DIR} {REWARD_DIR} && mkdir -p {REWARD_DIR} || exit 4\n"
    # Each try is a fresh exec with its own time limit, whatever became of the agent's
    # shell. A sandbox full of the agent's processes (a fork bomb at the pids limit) can
    # refuse one exec; a later one gets a pid as the bomb's processes come and go.
    script = _STOP_SCRIPT + clear + _STOP_REPORT
    for attempt in range(1, _CLEAR_TRIES):
        try:
            return _stopped_count(sandbox, await _control(sandbox, script))
        except SandboxError:
            await anyio.sleep(0.5 * attempt)
    return _stopped_count(sandbox, await _control(sandbox, script))


async def _upload_tests(sandbox: Sandbox, task: Task) -> str:
    """Put the hidden tests in place; returns the command that runs them."""
    tests = Path(task.tests_dir)
    await sandbox.upload(tests, TESTS_DIR)
    if task.format == "terminal-bench":
        script = Path(task.path) / task.test_script
        await sandbox.upload(script, f"{TESTS_DIR}/{task.test_script}")
    return f"bash {TESTS_DIR}/{task.test_script}"


async def _read_reward(sandbox: Sandbox) -> tuple[str, str]:
    """(kind, text) where kind is ``json``, ``txt`` or ``none``."""
    marker = uuid.uuid4().hex
    out = await _control(
        sandbox,
        f"if [ -f {REWARD_DIR}/reward.json ]; then echo json{marker}; cat {REWARD_DIR}/reward.json; "
        f"elif [ -f {REWARD_DIR}/reward.txt ]; then echo txt{marker}; cat {REWARD_DIR}/reward.txt; "
        f"else echo none{marker}; fi",
    )
    head, _, body = out.partition(marker)
    return head.strip().rsplit("\n", 1)[-1], body.removeprefix("\r\n").removeprefix("\n")


_LOG_LIST = r"""
cd {dir} 2>/dev/null || exit 0
n=0
while IFS= read -r -d '' f; do
  n=$((n + 1))
  if [ $n -gt {files} ]; then echo "{marker}more ${{f#./}}"; continue; fi
  size=$(stat -c %s "$f" 2>/dev/null || echo 0)
  echo "{marker}file $size ${{f#./}}"
  head -c {head} "$f" 2>/dev/null
  if [ "$size" -gt {keep} ]; then echo "{marker}cut"; tail -c {head} "$f" 2>/dev/null; fi
  echo
  echo "{marker}end"
done < <(find . -maxdepth 3 -type f -print0 2>/dev/null | sort -z)
"""


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


async def _read_logs(sandbox: Sandbox, stdout: str) -> dict[str, str]:
    """The verifier's logs (see :attr:`Verification.logs`); best effort: a sandbox that
    cannot be read leaves a note instead (the error that matters is raised elsewhere)."""
    marker = f"@@{uuid.uuid4().hex}@@"
    half = MAX_LOG_FILE_CHARS // 2 - 100  # room for the marker: the result is never cut again
    files: dict[str, str] = {}
    sizes: dict[str, int] = {}
    more: list[str] = []
    try:
        out = await _control(
            sandbox,
            _LOG_LIST.format(dir=REWARD_DIR, files=MAX_LOG_FILES, marker=marker, head=half, keep=2 * half),
        )
    except (SandboxError, TimeoutError) as exc:
        files["(unreadable)"] = f"the verifier's logs could not be read: {exc}"
        out = ""
    name = ""
    # Blocks: "file SIZE NAME\n" + the head (+ "\n" when whole); "cut\n" + the tail + "\n";
    # "end\n"; "more NAME\n" for files past MAX_LOG_FILES.
    for block in out.split(marker)[1:]:
        header, _, body = block.partition("\n")
        kind, _, rest = header.partition(" ")
        if kind == "more":
            more.append(rest)
        elif kind == "file":
            size_text, _, name = rest.partition(" ")
            sizes[name] = int(size_text) if size_text.isdigit() else 0
            files[name] = body if sizes[name] > 2 * half else body.removesuffix("\n")
        elif kind == "cut" and name in files:
            omitted = sizes[name] - 2 * half
            files[name] += f"\n[... {omitted} bytes omitted ...]\n" + body.removesuffix("\n")
    if more:
        files["(not kept)"] = f"{len(more)} more files: " + ", ".join(more[:50])
    if STDOUT_LOG not in files:
        files = {STDOUT_LOG: stdout, **files}
    return cap_logs(files)


async def verify(sandbox: Sandbox, task: Task, *, time_limit: float | None = None) -> Verification:
    """Run the task's hidden tests in ``sandbox`` (after the agent is done) and read the reward.

    First every process the agent left running is killed (:func:`stop_agent_processes`:
    its shell and any server it started go too) and ``/logs/verifier`` is emptied, so
    nothing but the tests writes the reward.

    Raises :class:`VerificationError` when the tests time out or leave no usable reward,
    :class:`~rsr_async.errors.SandboxError` when the sandbox itself fails, and
    :class:`~rsr_async.errors.TaskError` when the task has no tests.
    """
    if not task.tests_dir or not await anyio.Path(task.tests_dir).is_dir():
        raise TaskError("task has no tests directory", task=task.name, path=task.tests_dir or task.path)
    limit = task.verifier_timeout_s if time_limit is None else time_limit
    started = time.monotonic()
    try:
        await clear_for_tests(sandbox)
        command = await _upload_tests(sandbox, task)
        env = dict(task.verifier_env)
        if task.format == "terminal-bench":
            env.setdefault("TEST_DIR", TESTS_DIR)
        try:
            with anyio.fail_after(limit + _SLACK_S):
                result = await sandbox.run(command, time_limit=limit, env=env, workdir=task.workdir)
        except TimeoutError:
            raise VerificationError(
                f"verifier did not finish within {limit:g}s (and the exec did not return)", task=task.name
            ) from None
        output = _truncate(result.output)
        logs = await _read_logs(sandbox, result.output)  # before _cleanup removes them
        if result.timed_out:
            raise VerificationError(
                f"verifier timed out after {limit:g}s",
                task=task.name,
                output=output,
                exit_code=result.exit_code,
                logs=logs,
            )
        if task.format == "terminal-bench":
            try:
                rewards = grade_test_output(task.test_parser, result.output)
            except ValueError as exc:
                raise VerificationError(
                    f"{task.test_script} exited {result.exit_code}: {exc}",
                    task=task.name,
                    output=output,
                    exit_code=result.exit_code,
                    logs=logs,
                ) from exc
        else:
            kind, text = await _read_reward(sandbox)
            try:
                if kind == "json":
                    rewards = parse_reward_json(text)
                elif kind == "txt":
                    rewards = {"reward": parse_reward_txt(text)}
                else:
                    raise ValueError(f"no {REWARD_DIR}/reward.json or reward.txt was written")
            except ValueError as exc:
                raise VerificationError(
                    f"test.sh exited {result.exit_code}: {exc}",
                    task=task.name,
                    output=output,
                    exit_code=result.exit_code,
                    logs=logs,
                ) from exc
        return Verification(
            reward=main_reward(rewards),
            rewards=rewards,
            output=output,
            logs=logs,
            exit_code=result.exit_code,
            duration_s=time.monotonic() - started,
        )
    finally:
        await _cleanup(sandbox)


async def _cleanup(sandbox: Sandbox) -> None:
    """Remove the tests and reward files, even when the verification was cancelled."""
    failing = sys.exc_info()[1] is not None
    with anyio.CancelScope(shield=True):
        try:
            await _control(sandbox, f"rm -rf {TESTS_DIR} {REWARD_DIR}")
        except (SandboxError, TimeoutError):
            # A broken sandbox is reported by the error already propagating; the container
            # is discarded with it, tests and all.
            if not failing:
                raise


async def try_verify(sandbox: Sandbox, task: Task, *, time_limit: float | None = None) -> Verification:
    """Like :func:`verify`, but a verifier error becomes ``Verification(reward=None, error=...)``."""
    try:
        return await verify(sandbox, task, time_limit=time_limit)
    except VerificationError as exc:
        return Verification(
            reward=None, output=exc.output, logs=exc.logs, error=str(exc), exit_code=exc.exit_code
        )
