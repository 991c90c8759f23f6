"""A small synthetic run, written through a real Store, for the viewer's tests.

Three tasks in three domains; discover episodes of three harnesses (successes, failures,
an infrastructure error, a cancel); one source (``SOURCE``) rewritten end to end: a
runbook draft rejected by the critic's rules and regenerated, two accepted runbooks,
executions that passed and failed, and a leak audit that flagged two values (one ruled
leaked, found by the real leak scanner) and one that flagged none.
"""

from __future__ import annotations

import json
from pathlib import Path

from rsr_async.engine import Job, Store
from rsr_async.rsr.audit import flag_values
from rsr_async.schema import (
    AuditResult,
    AuditSpec,
    Command,
    CritiqueResult,
    CritiqueSpec,
    EpisodeResult,
    EpisodeSpec,
    JobKey,
    JobStatus,
    Message,
    PlanResult,
    PlanSpec,
    Runbook,
    Task,
    Trajectory,
    Usage,
    Verdict,
)

INSTRUCTION = "Summarise /app/data.csv into /app/report.txt"
TASKS = {
    "csv-report": Task(name="csv-report", path="/tasks/csv-report", instruction=INSTRUCTION,
                       category="data-processing", difficulty="easy", tags=("csv",)),
    "nginx-fix": Task(name="nginx-fix", path="/tasks/nginx-fix",
                      instruction="Make nginx serve /srv/www on port 8080",
                      category="system-administration"),
    "hash-crack": Task(name="hash-crack", path="/tasks/hash-crack",
                       instruction="Recover the password behind /app/hash.txt", category="security"),
}
XSS = '<script>alert("xss")</script>'
"""Planted in a model message: the page must show it as text."""
LEAK = "s3cr3t-9f2a"
"""The value the rewrite copied from its runbook (the audit rules it leaked)."""
DERIVABLE = "1337"
"""Flagged by the scanner too, but ruled derivable."""

SOURCE = "discover/csv-report/terminus2/a0/-/e-1"
STATEM_SOURCE = "discover/csv-report/statem/a0/-/e-1"
LEAKY = "execute/csv-report/terminus2/a0/r0d1/e0"
CLEAN = "execute/csv-report/terminus2/a0/r1d0/e0"


def _reply(analysis: str, keystrokes: list[str], complete: bool = False) -> str:
    return json.dumps({
        "analysis": analysis, "plan": "next step",
        "commands": [{"keystrokes": k, "duration": 0.5} for k in keystrokes],
        "task_complete": complete,
    })


def _model(turn: int, analysis: str, keystrokes: list[str], *, complete: bool = False) -> Message:
    return Message(
        role="assistant", origin="model", turn=turn, at=2.0 * turn + 0.5,
        content=_reply(analysis, keystrokes, complete),
        usage=Usage(prompt_tokens=900 + 100 * turn, completion_tokens=60 + turn,
                    cached_tokens=800 + 100 * turn if turn else 0, latency_s=0.25 + 0.05 * turn, requests=1),
        commands=tuple(Command(keystrokes=k, duration=0.5) for k in keystrokes),
        task_complete=complete,
    )


def _env(turn: int, text: str) -> Message:
    return Message(role="user", origin="env", turn=turn, at=2.0 * turn + 1.5,
                   content=f"New Terminal Output:\n{text}")


def source_trajectory(task: str, harness: str) -> Trajectory:
    messages = [
        Message(role="user", origin="task", content=f"Task: {TASKS[task].instruction}\n\nroot@box:/app# "),
        _model(0, f"Look at the data first. {XSS}", ["wc -l /app/data.csv\n"]),
        _env(0, "42 /app/data.csv\nroot@box:/app# "),
    ]
    if harness == "statem":
        messages.append(Message(role="user", origin="harness", turn=1, at=2.2,
                                content="statem: state EXPLORE -> WRITE (checklist: 1/2)"))
    messages += [
        _model(1, "Write the report.", ["echo rows=42 > /app/report.txt\n", "cat /app/report.txt\n"]),
        _env(1, "rows=42\nroot@box:/app# "),
        _model(2, "Done.", [], complete=True),
        Message(role="user", origin="harness", turn=2, at=5.0,
                content="Are you sure you want to mark the task as complete? Confirm with task_complete again."),
        _model(3, "Confirmed.", [], complete=True),
    ]
    return Trajectory(task=task, harness=harness, model="test-model", messages=messages)


def rewrite_trajectory(runbook: str, *, leak: bool) -> Trajectory:
    second = [f"echo {LEAK} {DERIVABLE} >> /app/report.txt\n"] if leak else []
    return Trajectory(task="csv-report", harness="terminus2", model="test-model", messages=[
        Message(role="system", origin="private", content=f"Runbook (private guidance):\n{runbook}"),
        Message(role="user", origin="task", content=f"Task: {INSTRUCTION}\n\nroot@box:/app# "),
        _model(0, "Count the rows.", ["wc -l /app/data.csv\n"]),
        _env(0, "42 /app/data.csv\nroot@box:/app# "),
        _model(1, "Write the report as the runbook says.", ["echo rows=42 > /app/report.txt\n", *second]),
        _env(1, "root@box:/app# "),
        _model(2, "Done.", [], complete=True),
        _model(3, "Confirmed.", [], complete=True),
    ])


def _episode(store: Store, key: JobKey, status: JobStatus, trajectory: Trajectory | None,
             *, guidance: str | None = None, error: str | None = None) -> None:
    task = TASKS[key.task]
    spec = EpisodeSpec(key=key, task=task, harness="terminus2" if key.stage == "execute" else key.harness,
                       guidance=guidance)
    store.put_result(
        EpisodeResult(
            key=key, status=status, end_reason="infra" if status == "infra_error" else "completed",
            error=error, reward=None if status in ("infra_error", "cancelled") else float(status == "succeeded"),
            rewards={"reward": float(status == "succeeded")} if status in ("succeeded", "failed") else {},
            verifier_output="1 passed" if status == "succeeded" else "",
            trajectory=trajectory, turns=sum(1 for m in trajectory.messages if m.origin == "model") if trajectory else 0,
            usage=trajectory.usage() if trajectory else Usage(), started_at=1_700_000_000.0,
            finished_at=1_700_000_042.5, model="test-model",
        ),
        job=Job.episode(spec), wait=False,
    )


def write_run(run_dir: Path) -> None:
    """Write the synthetic run into ``run_dir``."""
    with Store.open(run_dir, config={"run": {"attempts": 2}}, events=False) as store:
        discover = [
            ("csv-report", "terminus2", 0, "succeeded"), ("csv-report", "terminus2", 1, "failed"),
            ("csv-report", "statem", 0, "succeeded"), ("csv-report", "rsrt", 0, "failed"),
            ("nginx-fix", "terminus2", 0, "failed"), ("nginx-fix", "terminus2", 1, "infra_error"),
            ("nginx-fix", "statem", 0, "succeeded"), ("nginx-fix", "rsrt", 0, "failed"),
            ("hash-crack", "rsrt", 0, "succeeded"), ("hash-crack", "terminus2", 0, "cancelled"),
        ]
        for task, harness, attempt, status in discover:
            key = JobKey(stage="discover", task=task, harness=harness, attempt=attempt)
            trajectory = None if status == "infra_error" else source_trajectory(task, harness)
            error = "ContainerError: the sandbox died" if status == "infra_error" else None
            _episode(store, key, status, trajectory, error=error)  # type: ignore[arg-type]

        source_key = JobKey(stage="discover", task="csv-report", harness="terminus2", attempt=0)
        source = source_trajectory("csv-report", "terminus2")
        task = TASKS["csv-report"]

        def at(stage: str, runbook: str, execution: int = -1) -> JobKey:
            return JobKey(stage=stage, task="csv-report", harness="terminus2", attempt=0,
                          runbook=runbook, execution=execution)

        drafts = {
            "r0d0": f"## End state\n/app/report.txt holds the row count and the token {LEAK}.",
            "r0d1": f"## End state\n/app/report.txt holds the row count.\n## Checks\ncat it. (token {LEAK})",
            "r1d0": "## End state\n/app/report.txt holds `rows=<count>`.\n## Pitfalls\nCount lines, not bytes.",
        }
        verdicts = {
            "r0d0": Verdict(subject="r0d0", accepted=False, stage="deterministic",
                            reasons=(f"rule:literal_value: {LEAK!r} appears in the tests, never in an output",)),
            "r0d1": Verdict(subject="r0d1", accepted=True, stage="judge", reasons=("Looks general enough.",)),
            "r1d0": Verdict(subject="r1d0", accepted=True, stage="judge"),
        }
        for runbook, text in drafts.items():
            index, draft = int(runbook[1]), int(runbook[3])
            plan_spec = PlanSpec(key=at("plan", runbook), task=task, source_key=str(source_key),
                                 source="(compressed)", source_trajectory=source, index=index, count=2,
                                 draft=draft)
            book = Runbook(id=runbook, task=task.name, source_key=str(source_key), index=index, text=text,
                           revision=draft)
            store.put_result(PlanResult(key=at("plan", runbook), status="succeeded", runbook=book, reply=text,
                                        model="test-model"), job=Job.of(plan_spec), wait=False)
            store.put_result(
                CritiqueResult(key=at("critique", runbook), status="succeeded", verdict=verdicts[runbook],
                               reply="{}", model="test-model"),
                job=Job.of(CritiqueSpec(key=at("critique", runbook), task=task, runbook=book, plan=plan_spec)),
                wait=False,
            )

        for runbook, execution, status, leak in (("r0d1", 0, "succeeded", True), ("r0d1", 1, "failed", False),
                                                 ("r1d0", 0, "succeeded", False)):
            trajectory = rewrite_trajectory(drafts[runbook], leak=leak)
            _episode(store, at("execute", runbook, execution), status, trajectory,  # type: ignore[arg-type]
                     guidance=drafts[runbook])
            if status != "succeeded":
                continue
            flagged = tuple(flag_values(trajectory, instruction=INSTRUCTION))
            leaked = tuple(f for f in flagged if f.value == LEAK)
            reasons = tuple(f"{'leaked' if f in leaked else 'derivable'}: {f.value!r}" for f in flagged)
            subject = str(at("execute", runbook, execution))
            store.put_result(
                AuditResult(key=at("audit", runbook, execution), status="succeeded", flagged=flagged,
                            verdict=Verdict(subject=subject, accepted=not leaked, stage="audit",
                                            reasons=reasons, leaks=leaked), model="test-model"),
                job=Job.of(AuditSpec(key=at("audit", runbook, execution), task=task,
                                     execution_key=subject, trajectory=trajectory)),
                wait=False,
            )
        store.flush()
