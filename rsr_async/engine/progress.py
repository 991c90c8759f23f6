"""Showing the user what is happening: a live rich table on a TTY, one plain line per
stage every few seconds otherwise, nothing at all with ``progress = "none"``.

Every display reads the same :class:`Snapshot`, which the engine builds on a timer; the
run's ``events.jsonl`` gets one ``progress`` line per snapshot too.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import IO, Any, Literal, Protocol

import msgspec

__all__ = [
    "NullProgress",
    "PlainProgress",
    "ProgressSink",
    "RichProgress",
    "Snapshot",
    "StageView",
    "make_progress",
]


class StageView(msgspec.Struct, frozen=True, kw_only=True):
    """One stage's numbers at one moment."""

    stage: str
    total: int
    skipped: int
    done: int
    running: int
    succeeded: int
    failed: int
    infra_error: int
    cancelled: int
    retries: int
    steps: int
    elapsed_s: float
    eta_s: float | None
    permanent: int = 0
    """Of ``failed``: ended by the task's or the config's fault (never graded)."""

    @property
    def success_rate(self) -> float | None:
        """Succeeded over model-judged jobs (succeeded + failed, less permanent errors);
        None before any."""
        judged = self.succeeded + self.failed - self.permanent
        return self.succeeded / judged if judged else None


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a display shows."""

    elapsed_s: float
    stages: tuple[StageView, ...]
    tokens_per_s: float
    """Generated (completion) tokens per second over the last interval."""
    prompt_tokens_per_s: float
    cached_share: float
    """Share of prompt tokens served from the prefix cache, over the whole run."""
    loop_lag_p99_ms: float
    loop_lag_max_ms: float
    gauges: Mapping[str, float]
    shutdown: Literal["none", "draining", "cancelling"]

    def to_event(self) -> dict[str, Any]:
        """The ``progress`` line of ``events.jsonl``."""
        data: dict[str, Any] = msgspec.to_builtins(self)
        data["event"] = "progress"
        return data


class ProgressSink(Protocol):
    """A display. ``interval_s``: how often the engine calls :meth:`update`."""

    interval_s: float

    def start(self) -> None: ...

    def update(self, snapshot: Snapshot) -> None: ...

    def stop(self, snapshot: Snapshot) -> None: ...


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _rate(view: StageView) -> str:
    rate = view.success_rate
    return "-" if rate is None else f"{rate:.0%}"


def _gauge(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:.3g}"


def _footer(snapshot: Snapshot) -> str:
    parts = [
        f"{snapshot.tokens_per_s:,.0f} tok/s",
        f"cache {snapshot.cached_share:.0%}",
        f"loop lag p99 {snapshot.loop_lag_p99_ms:.1f} ms",
    ]
    parts.extend(f"{name} {_gauge(value)}" for name, value in snapshot.gauges.items())
    if snapshot.shutdown != "none":
        parts.append(f"SHUTDOWN: {snapshot.shutdown}")
    return " | ".join(parts)


def plain_line(view: StageView, snapshot: Snapshot) -> str:
    """One stage as one line (plain mode, and logs)."""
    errors = f", {view.infra_error} infra errors" if view.infra_error else ""
    if view.permanent:
        errors += f", {view.permanent} permanent errors (task/config)"
    cancelled = f", {view.cancelled} cancelled" if view.cancelled else ""
    skipped = f" ({view.skipped} from a previous run)" if view.skipped else ""
    return (
        f"[{view.stage}] {view.done + view.skipped}/{view.total} done{skipped}, "
        f"{view.running} running, ok {_rate(view)}{errors}{cancelled}, "
        f"eta {_duration(view.eta_s)} | {_footer(snapshot)}"
    )


class NullProgress:
    """No display."""

    interval_s = 10.0

    def start(self) -> None:
        return None

    def update(self, snapshot: Snapshot) -> None:
        return None

    def stop(self, snapshot: Snapshot) -> None:
        return None


class PlainProgress:
    """One line per stage every ``interval_s`` (for logs, CI and pipes)."""

    def __init__(self, stream: IO[str] | None = None, *, interval_s: float = 10.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.interval_s = interval_s

    def start(self) -> None:
        return None

    def update(self, snapshot: Snapshot) -> None:
        for view in snapshot.stages:
            print(plain_line(view, snapshot), file=self.stream, flush=True)

    def stop(self, snapshot: Snapshot) -> None:
        self.update(snapshot)


class RichProgress:
    """A live table, one row per stage, redrawn by the engine's timer (no extra thread)."""

    def __init__(self, *, interval_s: float = 0.5) -> None:
        from rich.console import Console  # imported here: `import rsr_async` stays light

        self.interval_s = interval_s
        self._console = Console(stderr=True)
        self._live: Any = None

    def _render(self, snapshot: Snapshot) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, pad_edge=False, header_style="bold")
        for column in ("stage", "done/total", "running", "ok", "infra err", "permanent", "cancelled", "retries",
                       "elapsed", "eta"):
            table.add_column(column, justify="left" if column == "stage" else "right")
        for v in snapshot.stages:
            table.add_row(
                v.stage,
                f"{v.done + v.skipped}/{v.total}",
                str(v.running),
                _rate(v),
                str(v.infra_error),
                str(v.permanent),
                str(v.cancelled),
                str(v.retries),
                _duration(v.elapsed_s),
                _duration(v.eta_s),
            )
        style = "bold red" if snapshot.shutdown != "none" else "dim"
        return Group(table, Text(_footer(snapshot), style=style))

    def start(self) -> None:
        from rich.live import Live

        self._live = Live(
            console=self._console,
            auto_refresh=False,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def update(self, snapshot: Snapshot) -> None:
        if self._live is not None:
            self._live.update(self._render(snapshot), refresh=True)

    def stop(self, snapshot: Snapshot) -> None:
        if self._live is not None:
            self._live.update(self._render(snapshot), refresh=True)
            self._live.stop()
            self._live = None


def make_progress(mode: str, *, stream: IO[str] | None = None) -> ProgressSink:
    """The display for ``engine.progress``: ``auto`` picks rich on a TTY, plain otherwise."""
    if mode == "auto":
        target = stream if stream is not None else sys.stderr
        mode = "rich" if target.isatty() else "plain"
    if mode == "rich":
        return RichProgress()
    if mode == "plain":
        return PlainProgress(stream)
    if mode == "none":
        return NullProgress()
    raise ValueError(f"engine.progress: expected auto, rich, plain or none, got {mode!r}")
