"""Per-phase timing of one episode: where its wall time went.

The episode runner opens a :class:`PhaseRecorder` for each attempt (:func:`recording`);
the layers the episode passes through (the sandbox pool, the shell's opener, the
harness's model calls and command waits, the verifier's caller) time themselves with
:func:`phase`, which finds the recorder in a context variable. That keeps the timing
out of every signature in between, and costs nothing where no recorder is open (the
pool used alone, a benchmark of the shell): :func:`phase` is then a no-op.

A context variable follows the episode into the tasks it starts (anyio copies the
context into a child task), so a phase timed in a reader task still lands in its own
episode's recorder, never in a neighbour's: episodes run concurrently in one loop.

The verification's parts are told apart without the verifier's help, from the Docker
calls the sandbox makes while the ``verify`` phase is open (:func:`note_call`): the
first exec after the last upload is the tests', the calls before it prepare them (clear
the way, upload), the calls after it read the logs and the reward and clean up.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import msgspec

from .schema import EpisodeTiming

__all__ = [
    "LIVE_PHASES",
    "PHASES",
    "PhaseMeans",
    "PhaseRecorder",
    "PhaseSummary",
    "current",
    "note_call",
    "phase",
    "recording",
    "render_phases",
    "summarise_timings",
]

PHASES = (
    "sandbox", "create", "start", "claim", "shell", "model", "commands", "verify_wait",
    "verify", "snapshot", "teardown", "image_files",
)
"""Every phase name :func:`phase` accepts (an :class:`EpisodeTiming` field each, ``_s``)."""

_TOP_LEVEL = ("sandbox", "shell", "model", "commands", "verify_wait", "verify", "teardown", "image_files")
"""The phases that do not overlap: :attr:`EpisodeTiming.other_s` is the wall less these
(``create``/``start``/``claim`` lie within ``sandbox``; RSRT's ``snapshot`` within its
``verify``)."""

_COUNTED = {"model": "model_calls", "commands": "commands"}


class PhaseRecorder:
    """One episode attempt's phase totals (seconds, summed over every entry)."""

    __slots__ = ("_calls", "_counts", "_in_verify", "_split", "_started", "_totals", "prewarmed")

    def __init__(self) -> None:
        self._started = time.perf_counter()
        self._totals = dict.fromkeys(PHASES, 0.0)
        self._counts = dict.fromkeys(_COUNTED, 0)
        self._in_verify = 0
        self._calls: list[tuple[float, float, bool]] = []
        """(time limit, seconds, whether it is the tests) of each Docker call while
        ``verify`` is open; an upload or a download has limit 0."""
        self._split = [0.0, 0.0, 0.0]
        """Verification parts (prepare, tests, reward) of the verifications closed so far."""
        self.prewarmed = False

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to phase ``name`` (one of :data:`PHASES`)."""
        self._totals[name] += seconds
        if name in self._counts:
            self._counts[name] += 1

    def timing(self) -> EpisodeTiming:
        """The totals so far as an :class:`EpisodeTiming` (the wall runs to now)."""
        wall = time.perf_counter() - self._started
        totals = self._totals
        prepare, tests, reward = self._split
        accounted = sum(totals[name] for name in _TOP_LEVEL)
        return EpisodeTiming(
            wall_s=round(wall, 4),
            prewarmed=self.prewarmed,
            model_calls=self._counts["model"],
            commands=self._counts["commands"],
            verify_prepare_s=round(prepare, 4),
            verify_tests_s=round(tests, 4),
            verify_reward_s=round(reward, 4),
            other_s=round(max(0.0, wall - accounted), 4),
            **{f"{name}_s": round(totals[name], 4) for name in PHASES},
        )


def _split_verification(calls: list[tuple[float, float, bool]]) -> tuple[float, float, float]:
    """(prepare, tests, reward) seconds of one verification's Docker calls: the tests'
    call is the one said to be (``note_call(..., tests=True)``), else the first exec
    after the last upload (the tests go in, then run), else the longest exec; the calls
    before it prepare, the calls after it read the reward and clean up."""
    said = [i for i, (_, _, tests) in enumerate(calls) if tests]
    execs = [i for i, (limit, _, _) in enumerate(calls) if limit > 0]
    uploads = [i for i, (limit, _, _) in enumerate(calls) if limit == 0]
    after = [i for i in execs if uploads and i > uploads[-1]]
    if said:
        tests_at = said[-1]
    elif after:
        tests_at = after[0]
    elif execs:
        tests_at = max(execs, key=lambda i: calls[i][1])
    else:
        return sum(seconds for _, seconds, _ in calls), 0.0, 0.0
    return (
        sum(seconds for _, seconds, _ in calls[:tests_at]),
        calls[tests_at][1],
        sum(seconds for _, seconds, _ in calls[tests_at + 1:]),
    )


_recorder: ContextVar[PhaseRecorder | None] = ContextVar("rsr_async_phase_recorder", default=None)


def current() -> PhaseRecorder | None:
    """The recorder of the episode running in this task (None outside one)."""
    return _recorder.get()


@contextmanager
def recording() -> Iterator[PhaseRecorder]:
    """Open a fresh recorder for the episode attempt run inside the block."""
    recorder = PhaseRecorder()
    token = _recorder.set(recorder)
    try:
        yield recorder
    finally:
        _recorder.reset(token)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as phase ``name`` of the current episode (a no-op outside one).
    The time is added however the block ends: a cancelled wait took that time too."""
    recorder = _recorder.get()
    if recorder is None:
        yield
        return
    if name == "verify":
        recorder._in_verify += 1
    started = time.perf_counter()
    try:
        yield
    finally:
        recorder.add(name, time.perf_counter() - started)
        if name == "verify":
            recorder._in_verify -= 1
            if not recorder._in_verify:  # one verification's calls, split on their own
                for i, seconds in enumerate(_split_verification(recorder._calls)):
                    recorder._split[i] += seconds
                recorder._calls.clear()


def note_call(time_limit: float, seconds: float, *, tests: bool = False) -> None:
    """A sandbox's Docker call (an exec with its in-container ``time_limit``; an upload
    or a download with 0) took ``seconds``: kept while the ``verify`` phase is open, to
    split it into preparation, tests and reward. ``tests``: this call ran the hidden
    tests (a verifier that knows says so; otherwise the order of the calls tells)."""
    recorder = _recorder.get()
    if recorder is not None and recorder._in_verify:
        recorder._calls.append((time_limit, seconds, tests))


LIVE_PHASES = ("sandbox", "shell", "model", "commands", "verify", "teardown", "other")
"""The phases the live display shows (mean seconds per finished episode)."""


class PhaseMeans:
    """Running means of finished episodes' phases, for the live display's gauges."""

    __slots__ = ("_sums", "episodes")

    def __init__(self) -> None:
        self.episodes = 0
        self._sums = dict.fromkeys(LIVE_PHASES, 0.0)

    def add(self, timing: EpisodeTiming) -> None:
        """Count one finished episode's timing."""
        self.episodes += 1
        for name in LIVE_PHASES:
            self._sums[name] += getattr(timing, f"{name}_s")

    def mean(self, name: str) -> float:
        """Mean seconds of phase ``name`` per finished episode (0 before any)."""
        return self._sums[name] / self.episodes if self.episodes else 0.0


SUMMARY_FIELDS = (
    "wall", "sandbox", "create", "start", "claim", "shell", "model", "commands", "verify_wait",
    "verify", "verify_prepare", "verify_tests", "verify_reward", "snapshot", "teardown",
    "image_files", "other",
)
"""The :class:`EpisodeTiming` seconds fields a summary reports, in an episode's order."""


class PhaseSummary(msgspec.Struct, frozen=True, kw_only=True):
    """Phase timings over a run's timed episodes (``summary.json``'s ``phases``): per
    phase (``wall``, ``sandbox`` … ``other``, see :class:`~rsr_async.schema.EpisodeTiming`)
    the mean, median and 90th percentile seconds per episode."""

    episodes: int
    """Episodes with a timing (results stored before timing existed have none)."""
    prewarmed: int
    """Of those, how many got a prewarmed container."""
    model_calls: float
    """Mean model calls per episode."""
    commands: float
    """Mean commands typed per episode."""
    mean_s: dict[str, float]
    p50_s: dict[str, float]
    p90_s: dict[str, float]


def summarise_timings(timings: Iterable[EpisodeTiming]) -> PhaseSummary | None:
    """The :class:`PhaseSummary` of ``timings`` (untimed ones skipped); None when none is timed."""
    timed = [t for t in timings if t.wall_s > 0]
    if not timed:
        return None
    mean: dict[str, float] = {}
    p50: dict[str, float] = {}
    p90: dict[str, float] = {}
    for name in SUMMARY_FIELDS:
        values = sorted(getattr(t, f"{name}_s") for t in timed)
        mean[name] = round(statistics.fmean(values), 4)
        p50[name] = round(statistics.median(values), 4)
        p90[name] = round(values[min(len(values) - 1, int(0.9 * len(values)))], 4)
    return PhaseSummary(
        episodes=len(timed),
        prewarmed=sum(t.prewarmed for t in timed),
        model_calls=round(statistics.fmean(t.model_calls for t in timed), 3),
        commands=round(statistics.fmean(t.commands for t in timed), 3),
        mean_s=mean,
        p50_s=p50,
        p90_s=p90,
    )


def render_phases(summary: PhaseSummary) -> str:
    """One line per phase: mean, median and p90 seconds per episode (for the summary table)."""
    width = max(len(name) for name in SUMMARY_FIELDS)
    lines = [f"{'phase':<{width}}   mean s    p50 s    p90 s"]
    for name in SUMMARY_FIELDS:
        if not summary.p90_s[name] and name not in ("wall", "sandbox", "verify", "teardown"):
            continue  # a phase no episode had (claims without prewarm, RSRT's snapshots)
        lines.append(
            f"{name:<{width}} {summary.mean_s[name]:8.3f} {summary.p50_s[name]:8.3f} {summary.p90_s[name]:8.3f}"
        )
    return "\n".join(lines)
