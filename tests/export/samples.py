"""Trajectories built by hand, as the harnesses record them, with planted secrets.

Every text that must never reach an exported file carries a marker from ``SECRETS``:
the runbook (private guidance), RSRT's "failed" message, StateM's command output and
state prompts. Terminus 2's own protocol texts come from the real templates.
"""

from __future__ import annotations

import json

from rsr_async.export import ExportRecord
from rsr_async.harness.protocol import render
from rsr_async.schema import Command, Message, Trajectory, Usage

__all__ = ["SECRETS", "Builder", "Usage", "record", "suite"]

RUNBOOK_MARK = "RUNBOOK-SECRET-7f3a"
FAILED_MARK = "RSRT-FAILED-91c2"
STATEM_MARK = "STATEM-CONTROL-4d8e"
SECRETS = (RUNBOOK_MARK, FAILED_MARK, STATEM_MARK)
MODEL = "scripted-27b"


def task_prompt(task: str) -> str:
    return render(
        "terminus-json-plain",
        instruction=f"Create /app/{task}.txt containing the word done.",
        terminal_state=render("observation_screen", screen="root@sandbox:/app# "),
        default_duration=1.0,
        max_duration="60",
    )


def reply(analysis: str, *keystrokes: str, complete: bool = False) -> str:
    commands = [{"keystrokes": k, "duration": 0.1} for k in keystrokes]
    return json.dumps(
        {"analysis": analysis, "plan": "next step", "commands": commands, "task_complete": complete}
    )


class Builder:
    """Appends messages the way a harness records them (turn numbers, usage)."""

    def __init__(self, task: str, harness: str) -> None:
        self.trajectory = Trajectory(task=task, harness=harness, model=MODEL)
        self.turn = 0

    def add(self, origin: str, content: str, role: str = "user") -> Builder:
        self.trajectory.messages.append(
            Message(role=role, content=content, origin=origin, turn=self.turn)  # type: ignore[arg-type]
        )
        return self

    def model(
        self, analysis: str, *keystrokes: str, complete: bool = False, text: str | None = None
    ) -> Builder:
        self.trajectory.messages.append(
            Message(
                role="assistant",
                content=text
                if text is not None
                else reply(analysis, *keystrokes, complete=complete),
                origin="model",
                turn=self.turn,
                usage=Usage(
                    prompt_tokens=1000 + self.turn,
                    completion_tokens=50,
                    cached_tokens=900,
                    requests=1,
                ),
                commands=tuple(Command(keystrokes=k, duration=0.1) for k in keystrokes),
                task_complete=complete,
            )
        )
        self.turn += 1
        return self

    def env(self, output: str) -> Builder:
        return self.add("env", render("observation_new", output=output))

    def confirm(self, output: str) -> Builder:
        return self.add(
            "harness", render("confirm", terminal_state=render("observation_new", output=output))
        )


def terminus2_rewrite(task: str = "alpha", variant: str = "") -> Trajectory:
    """A rewrite execution: private runbook, a parse error, confirmation."""
    b = Builder(task, "terminus2")
    b.add(
        "private", render("guidance", guidance=f"1. {RUNBOOK_MARK}: write the file"), role="system"
    )
    b.add("task", task_prompt(task))
    b.model(f"look around{variant}", "ls -la\n")
    b.env("total 0")
    b.model("", text="I will write the file now")  # not JSON: a parse error follows
    b.add("harness", render("parse_error", feedback="ERROR: No valid JSON found in response"))
    b.model("write it", f"echo done > /app/{task}.txt\n", complete=True)
    b.confirm("root@sandbox:/app# ")
    b.model("confirmed", complete=True)
    return b.trajectory


def terminus2_handoff(task: str = "beta") -> Trajectory:
    """A direct Terminus 2 success with a context handoff and an output-limit message."""
    b = Builder(task, "terminus2")
    b.add("task", task_prompt(task))
    b.model("start", "pwd\n")
    b.env("/app")
    b.model("", text='{"analysis": "a very long')
    b.add("harness", render("output_limit", limit="the maximum output length"))
    b.model("shorter", "ls\n")
    b.add("harness", render("handoff_summary", instruction="the instruction"))
    b.model("", text="Summary: ran pwd and ls.")
    b.add("harness", render("handoff_questions", instruction="i", summary="s", screen="$ "))
    b.model("", text="1. Which files exist?")
    b.add("harness", render("handoff_answers", questions="1. Which files exist?"))
    b.model("", text="None yet.")
    b.add(
        "harness",
        render("handoff_resume", answers="None yet.")
        + "\n\n"
        + render("observation_new", output="x"),
    )
    b.model("write", f"echo done > /app/{task}.txt\n", complete=True)
    b.confirm("root@sandbox:/app# ")
    b.model("confirmed", complete=True)
    return b.trajectory


def rsrt_success(task: str = "gamma") -> Trajectory:
    """RSRT: a completion claim the hidden verifier rejects ("failed"), then a pass."""
    b = Builder(task, "rsrt")
    b.add("task", task_prompt(task))
    b.model("look", "ls\n")
    b.env("notes.txt")
    b.model("done?", "touch /app/wrong\n", complete=True)
    b.confirm("root@sandbox:/app# ")
    b.model("yes", complete=True)
    b.add("harness", f"{FAILED_MARK}: the task is not solved yet. Keep working.")
    b.model("", text="oops {")
    b.add("harness", render("parse_error", feedback="ERROR: Invalid JSON"))
    b.model("fix", f"echo done > /app/{task}.txt\n", complete=True)
    b.confirm("root@sandbox:/app# ")
    b.model("confirmed", complete=True)
    return b.trajectory


def statem_success(task: str = "delta") -> Trajectory:
    """StateM: state-machine turns (alone and mixed), a state prompt, then plain work."""
    b = Builder(task, "statem")
    b.add("task", task_prompt(task))
    b.model("where am I", "statem cur\n")
    b.env(f"{STATEM_MARK} state: explore")
    b.add("harness", f"{STATEM_MARK} you are now in state explore")
    b.model("look", "ls\n")
    b.env("notes.txt")
    b.model("move on", "statem goto build\n", "cat notes.txt\n")
    b.env(f"{STATEM_MARK} moved to build\nhello")
    b.model("write", f"echo done > /app/{task}.txt\n", complete=True)
    b.confirm("root@sandbox:/app# ")
    b.model("confirmed", complete=True)
    return b.trajectory


def record(trajectory: Trajectory, set: str, key: str, **kw: object) -> ExportRecord:
    return ExportRecord(
        key=key,
        set=set,  # type: ignore[arg-type]
        task=trajectory.task,
        harness=trajectory.harness,
        trajectory=trajectory,
        model=trajectory.model,
        **kw,  # type: ignore[arg-type]
    )


def suite() -> list[ExportRecord]:
    """A small export: rewrites, direct successes (also in the baseline), other harnesses."""
    records = [
        record(
            terminus2_rewrite("alpha", " v0"),
            "rewrite",
            "execute/alpha/terminus2/a0/rb0/e0",
            source_key="discover/alpha/statem/a0/-/e-1",
            runbook="rb0",
            reward=1.0,
        ),
        record(
            terminus2_rewrite("alpha", " v1"),
            "rewrite",
            "execute/alpha/terminus2/a0/rb0/e1",
            source_key="discover/alpha/statem/a0/-/e-1",
            runbook="rb0",
            reward=1.0,
        ),
        record(
            terminus2_rewrite("epsilon"),
            "rewrite",
            "execute/epsilon/terminus2/a0/rb1/e0",
            source_key="discover/epsilon/rsrt/a0/-/e-1",
            runbook="rb1",
            reward=1.0,
        ),
        record(rsrt_success("gamma"), "baseline", "discover/gamma/rsrt/a0/-/e-1", reward=1.0),
        record(statem_success("delta"), "baseline", "discover/delta/statem/a0/-/e-1", reward=1.0),
    ]
    for task in ("beta", "zeta", "eta", "theta"):
        direct = terminus2_handoff(task)
        key = f"discover/{task}/terminus2/a0/-/e-1"
        records += [
            record(direct, "direct", key, reward=1.0),
            record(direct, "baseline", key, reward=1.0),
        ]
    return records
