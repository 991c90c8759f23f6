"""Test doubles for the engine (re-exported from ``rsr_async.testing``).

- :class:`FakeRunner`: a job runner with configurable latency, model failures, infra
  errors, runner bugs and hangs, deterministic per job key and seed; it remembers (and
  optionally appends to a log file) every key it executed.
- :class:`SimulatedEpisode`: an agent episode of N steps against a fake model and a fake
  terminal, each call zero-latency or with a simulated latency. Used to measure the
  engine's own overhead per step and its loop lag at thousands of episodes.
- :func:`make_jobs`: ``n`` episode jobs with distinct deterministic keys.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Collection
from pathlib import Path

import anyio
import anyio.lowlevel

from ..errors import ContainerError
from ..schema import Command, EpisodeResult, EpisodeSpec, JobKey, Message, Task, Trajectory, Usage
from .jobs import Job, JobContext

__all__ = ["FakeRunner", "SimulatedEpisode", "make_jobs"]


def make_jobs(n: int, *, stage: str = "discover", harness: str = "fake") -> list[Job]:
    """``n`` episode jobs with keys ``stage/task-00000/harness/a0/-/e-1`` ... (for a
    fake runner: their tasks have no directory)."""
    jobs = []
    for i in range(n):
        key = JobKey(stage=stage, task=f"task-{i:05d}", harness=harness)
        task = Task(name=key.task, path="", instruction=f"fake task {i}")
        jobs.append(Job.episode(EpisodeSpec(key=key, task=task, harness=harness)))
    return jobs


class FakeRunner:
    """A runner whose outcome per job is drawn from ``random.Random(f"{seed}:{key}")``.

    - ``latency_s``: seconds per job (a number, or ``(low, high)`` drawn uniformly),
      spread over ``steps`` agent steps (each one ``ctx.step()`` and a checkpoint);
    - ``fail_rate``: share of jobs the "model" fails (status ``failed``, reward 0);
    - ``infra_rate``: share of jobs whose first ``infra_attempts`` attempts raise a
      retryable :class:`~rsr_async.errors.ContainerError`;
    - ``bug_rate``: share of jobs that raise ``RuntimeError`` (a runner bug);
    - ``hang``: keys that never finish (until cancelled or past their deadline).

    ``executed`` lists every key at the start of every attempt; with ``log_path`` each
    one is also appended (one ``O_APPEND`` write, so concurrent processes interleave
    whole lines) to that file.
    """

    def __init__(
        self,
        *,
        latency_s: float | tuple[float, float] = 0.0,
        steps: int = 1,
        fail_rate: float = 0.0,
        infra_rate: float = 0.0,
        infra_attempts: int = 1,
        bug_rate: float = 0.0,
        hang: Collection[str] = (),
        seed: int = 0,
        log_path: str | Path | None = None,
    ) -> None:
        self.latency_s = latency_s
        self.steps = max(1, steps)
        self.fail_rate = fail_rate
        self.infra_rate = infra_rate
        self.infra_attempts = infra_attempts
        self.bug_rate = bug_rate
        self.hang = frozenset(hang)
        self.seed = seed
        self.log_path = Path(log_path) if log_path is not None else None
        self.executed: list[str] = []
        self.finished: Counter[str] = Counter()
        self.running = 0
        self.max_running = 0

    def _log(self, key: str) -> None:
        if self.log_path is None:
            return
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{key}\n".encode())
        finally:
            os.close(fd)

    async def __call__(self, job: Job, ctx: JobContext) -> EpisodeResult:
        key = str(job.key)
        self.executed.append(key)
        self._log(key)
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            return await self._run(job, key, ctx)
        finally:
            self.running -= 1

    async def _run(self, job: Job, key: str, ctx: JobContext) -> EpisodeResult:
        rng = random.Random(f"{self.seed}:{key}")
        roll_infra, roll_bug, roll_fail = rng.random(), rng.random(), rng.random()
        latency = (
            rng.uniform(*self.latency_s) if isinstance(self.latency_s, tuple) else self.latency_s
        )
        trajectory = Trajectory(task=job.key.task, harness=job.key.harness, model="fake")
        trajectory.messages.append(Message(role="user", content=f"solve {key}", origin="task"))
        ctx.checkpoint(trajectory)
        if key in self.hang:
            await anyio.sleep_forever()
        if roll_infra < self.infra_rate and ctx.attempt < self.infra_attempts:
            await anyio.sleep(latency / 2)
            raise ContainerError(f"fake: the container of {key} died (attempt {ctx.attempt})")
        if roll_bug < self.bug_rate:
            raise RuntimeError(f"fake runner bug on {key}")
        usage = Usage(prompt_tokens=100, completion_tokens=10, cached_tokens=80, requests=1)
        for turn in range(self.steps):
            if latency > 0:
                await anyio.sleep(latency / self.steps)
            else:
                await anyio.lowlevel.checkpoint()
            trajectory.messages.append(
                Message(role="assistant", content=f"step {turn}", origin="model", turn=turn, usage=usage)
            )
            ctx.step(usage)
        self.finished[key] += 1
        ok = roll_fail >= self.fail_rate
        return EpisodeResult(
            key=job.key,
            status="succeeded" if ok else "failed",
            end_reason="completed",
            reward=1.0 if ok else 0.0,
            trajectory=trajectory,
            usage=trajectory.usage(),
            turns=self.steps,
        )


class _FakeModel:
    """Answers every chat with a fixed reply after a (simulated) latency."""

    def __init__(self, latency: tuple[float, float], rng: random.Random) -> None:
        self.latency = latency
        self.rng = rng
        self.planned_s = 0.0

    async def chat(self, history: list[Message]) -> tuple[str, Usage]:
        low, high = self.latency
        if high > 0:
            delay = self.rng.uniform(low, high)
            self.planned_s += delay
            await anyio.sleep(delay)
        else:
            await anyio.lowlevel.checkpoint()
        prompt = 50 * len(history)
        reply = '{"analysis": "ok", "commands": [{"keystrokes": "ls -la\\n", "duration": 0.1}]}'
        return reply, Usage(prompt_tokens=prompt, completion_tokens=24, cached_tokens=prompt - 50, requests=1)


class _FakeShell:
    """A terminal that echoes what it was sent after a (simulated) latency."""

    def __init__(self, latency: tuple[float, float], rng: random.Random) -> None:
        self.latency = latency
        self.rng = rng
        self.planned_s = 0.0
        self._last = ""

    async def send(self, keys: str) -> None:
        self._last = keys

    async def wait(self) -> None:
        low, high = self.latency
        if high > 0:
            delay = self.rng.uniform(low, high)
            self.planned_s += delay
            await anyio.sleep(delay)
        else:
            await anyio.lowlevel.checkpoint()

    def observe(self) -> str:
        return f"$ {self._last}total 0\n$ "


class SimulatedEpisode:
    """A Terminus-shaped episode runner: ``steps`` turns of model call → keystrokes → wait
    → observation, recording a full trajectory, calling ``ctx.step(usage)`` and
    checkpointing as a real harness does.

    ``model_latency_s`` / ``sandbox_latency_s`` are uniform ``(low, high)`` ranges;
    ``(0, 0)`` means zero latency (the call still yields to the loop once).
    ``planned_s`` sums every simulated latency drawn, for Little's-law comparisons.
    """

    def __init__(
        self,
        *,
        steps: int = 20,
        model_latency_s: tuple[float, float] = (0.0, 0.0),
        sandbox_latency_s: tuple[float, float] = (0.0, 0.0),
        seed: int = 0,
    ) -> None:
        self.steps = steps
        self.model_latency_s = model_latency_s
        self.sandbox_latency_s = sandbox_latency_s
        self.seed = seed
        self.planned_s = 0.0
        self.steps_done = 0

    async def __call__(self, job: Job, ctx: JobContext) -> EpisodeResult:
        rng = random.Random(f"{self.seed}:{job.key}")
        model = _FakeModel(self.model_latency_s, rng)
        shell = _FakeShell(self.sandbox_latency_s, rng)
        trajectory = Trajectory(task=job.key.task, harness=job.key.harness, model="fake")
        messages = trajectory.messages
        messages.append(Message(role="user", content=f"Task: {job.key.task}\n$ ", origin="task"))
        ctx.checkpoint(trajectory)
        try:
            for turn in range(self.steps):
                reply, usage = await model.chat(messages)
                command = Command(keystrokes="ls -la\n", duration=0.1)
                messages.append(
                    Message(
                        role="assistant", content=reply, origin="model", turn=turn,
                        usage=usage, commands=(command,),
                    )
                )
                await shell.send(command.keystrokes)
                await shell.wait()
                messages.append(Message(role="user", content=shell.observe(), origin="env", turn=turn))
                ctx.step(usage)
                self.steps_done += 1
        finally:
            self.planned_s += model.planned_s + shell.planned_s
        return EpisodeResult(
            key=job.key,
            status="succeeded",
            end_reason="completed",
            reward=1.0,
            trajectory=trajectory,
            usage=trajectory.usage(),
            turns=self.steps,
        )
