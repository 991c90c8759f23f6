"""One small, hand-checkable scenario, written as a real run directory (SQLite store) and
as a results JSONL file. The golden tests compute every expected table value by hand
from the description below.

Harnesses terminus2, statem, rsrt; tasks (domain / subset), two attempts each; P pass,
F fail, I infra_error, C cancelled, "-" no job at all:

    task  domain  subset   terminus2  statem   rsrt
    t1    files   A        P F        F F      F P
    t2    files   A        F F        P I      F F
    t3    net     B        P P        P P      P P
    t4    net     B        F F        F F      -  -     (partial credit: 2 reward keys)
    t5    net     B        I C        -  -     -  -     (no graded rollout at all)
    t6    files   A        F F        P F      F F

Rewrites (run directory only): source t1/terminus2/a0 has runbooks r0d0 (accepted),
r1d0 (rejected) and r1d1 (accepted); source t3/statem/a0 has r0d0 (accepted).
Executions: t1 r0d0/e0 P kept, r0d0/e1 P dropped by the audit, r1d1/e0 F, r1d1/e1 P kept;
t3 r0d0/e0 P kept, r0d0/e1 I.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from rsr_async.engine import Job, Store
from rsr_async.schema import (
    AuditResult,
    AuditSpec,
    Command,
    CritiqueResult,
    EpisodeResult,
    EpisodeSpec,
    EpisodeStyle,
    JobKey,
    Message,
    Task,
    Trajectory,
    Verdict,
)

HARNESSES = ("terminus2", "statem", "rsrt")
TASKS = {  # name → (domain, subset)
    "t1": ("files", "A"),
    "t2": ("files", "A"),
    "t3": ("net", "B"),
    "t4": ("net", "B"),
    "t5": ("net", "B"),
    "t6": ("files", "A"),
}
OUTCOMES: dict[tuple[str, str], str] = {
    ("t1", "terminus2"): "PF", ("t1", "statem"): "FF", ("t1", "rsrt"): "FP",
    ("t2", "terminus2"): "FF", ("t2", "statem"): "PI", ("t2", "rsrt"): "FF",
    ("t3", "terminus2"): "PP", ("t3", "statem"): "PP", ("t3", "rsrt"): "PP",
    ("t4", "terminus2"): "FF", ("t4", "statem"): "FF",
    ("t5", "terminus2"): "IC",
    ("t6", "terminus2"): "FF", ("t6", "statem"): "PF", ("t6", "rsrt"): "FF",
}
# Partial credit on t4: (reward, rewards) per (harness, attempt).
PARTIAL = {
    ("terminus2", 0): (0.25, {"a": 0.5, "b": 0.0}),
    ("terminus2", 1): (0.5, {"a": 1.0, "b": 0.0}),
    ("statem", 0): (0.75, {"a": 1.0, "b": 0.5}),
    ("statem", 1): (0.0, {"a": 0.0, "b": 0.0}),
}
# Styles of the successes, in attempt order per harness (task order t1..t6).
STYLES: dict[tuple[str, str, int], EpisodeStyle] = {
    ("t1", "terminus2", 0): EpisodeStyle(model_turns=10, commands=10, exploration_share=0.5, claims=1),
    ("t3", "terminus2", 0): EpisodeStyle(model_turns=20, commands=10, exploration_share=0.2, claims=1),
    ("t3", "terminus2", 1): EpisodeStyle(model_turns=30, commands=20, exploration_share=0.25, claims=1),
    ("t2", "statem", 0): EpisodeStyle(model_turns=5, commands=4, exploration_share=0.5, state_share=0.25, claims=1),
    ("t3", "statem", 0): EpisodeStyle(model_turns=7, commands=4, exploration_share=0.5, state_share=0.5, claims=1),
    ("t3", "statem", 1): EpisodeStyle(model_turns=9, commands=4, exploration_share=0.5, state_share=0.25, claims=2),
    ("t6", "statem", 0): EpisodeStyle(model_turns=11, commands=4, exploration_share=0.5, state_share=0.0, claims=1),
    ("t1", "rsrt", 1): EpisodeStyle(model_turns=4, commands=5, exploration_share=0.2, claims=3, rejected_claim=True),
    ("t3", "rsrt", 0): EpisodeStyle(model_turns=6, commands=5, exploration_share=0.4, claims=1),
    ("t3", "rsrt", 1): EpisodeStyle(model_turns=8, commands=10, exploration_share=0.1, claims=2),
}
STATUS = {"P": "succeeded", "F": "failed", "I": "infra_error", "C": "cancelled"}

# Rewrite executions: (source harness, source attempt, task, runbook, execution) →
# (status, turns, kept, commands per model turn).
EXECUTIONS: dict[tuple[str, int, str, str, int], tuple[str, int, bool, list[list[str]]]] = {
    ("terminus2", 0, "t1", "r0d0", 0): ("P", 8, True, [["ls\n"], ["cat a\n"], ["make\n", "make test\n"]]),
    ("terminus2", 0, "t1", "r0d0", 1): ("P", 12, False, [["ls\n"], ["cat b\n"], ["make\n"]]),
    ("terminus2", 0, "t1", "r1d1", 0): ("F", 20, False, [["ls\n"]]),
    ("terminus2", 0, "t1", "r1d1", 1): ("P", 6, True, [["pwd\n"], ["ls  \n"], ["make test\n"]]),
    ("statem", 0, "t3", "r0d0", 0): ("P", 4, True, [["true\n"]]),
    ("statem", 0, "t3", "r0d0", 1): ("I", 0, False, []),
}
CRITIQUES = {  # (source harness, attempt, task, runbook) → accepted
    ("terminus2", 0, "t1", "r0d0"): True,
    ("terminus2", 0, "t1", "r1d0"): False,
    ("terminus2", 0, "t1", "r1d1"): True,
    ("statem", 0, "t3", "r0d0"): True,
}


def task_record(name: str) -> Task:
    domain, subset = TASKS[name]
    return Task(name=name, path=f"/tasks/{name}", instruction=f"do {name}", category=domain,
                metadata={"source": subset})


def _reward(task: str, harness: str, attempt: int, letter: str) -> tuple[float | None, dict[str, float]]:
    if letter in "IC":
        return None, {}
    if task == "t4":
        return PARTIAL[(harness, attempt)]
    value = 1.0 if letter == "P" else 0.0
    return value, {"reward": value}


def _style(task: str, harness: str, attempt: int, letter: str) -> EpisodeStyle:
    if letter == "P":
        return STYLES[(task, harness, attempt)]
    return EpisodeStyle(model_turns=99, commands=50, exploration_share=0.9, claims=0)


def _trajectory(task: str, harness: str, commands: list[list[str]]) -> Trajectory:
    messages = [Message(role="user", content=f"do {task}", origin="task")]
    for turn, keys in enumerate(commands):
        # The reply names its commands, so two trajectories' public conversations differ
        # exactly when their commands do (the export drops byte-identical ones).
        messages.append(Message(role="assistant", content=json.dumps({"commands": keys}),
                                origin="model", turn=turn,
                                commands=tuple(Command(keystrokes=k, duration=0.1) for k in keys)))
        messages.append(Message(role="user", content="output", origin="env", turn=turn))
    return Trajectory(task=task, harness=harness, messages=messages)


def write_run(run_dir: Path) -> Path:
    """The scenario as a run directory (a real store), discover and rewrite stages."""
    config: dict[str, Any] = {"run": {"attempts": 2, "harnesses": list(HARNESSES)}}
    with Store.open(run_dir, config=config) as store:
        for (task, harness), letters in OUTCOMES.items():
            for attempt, letter in enumerate(letters):
                key = JobKey(stage="discover", task=task, harness=harness, attempt=attempt)
                reward, rewards = _reward(task, harness, attempt, letter)
                style = _style(task, harness, attempt, letter)
                result = EpisodeResult(
                    key=key, status=STATUS[letter],  # type: ignore[arg-type]
                    reward=reward, rewards=rewards, turns=style.model_turns if letter != "I" else 0,
                    style=style, trajectory=_trajectory(task, harness, [["ls\n"]]),
                )
                spec = EpisodeSpec(key=key, task=task_record(task), harness=harness)
                store.put_result(result, job=Job.episode(spec), wait=False)
        for (harness, attempt, task, runbook), accepted in CRITIQUES.items():
            key = JobKey(stage="critique", task=task, harness=harness, attempt=attempt, runbook=runbook)
            verdict = Verdict(subject=f"{task}/{runbook}", accepted=accepted, stage="judge")
            store.put_result(CritiqueResult(key=key, status="succeeded", verdict=verdict), wait=False)
        for (harness, attempt, task, runbook, execution), (letter, turns, kept, cmds) in EXECUTIONS.items():
            key = JobKey(stage="execute", task=task, harness=harness, attempt=attempt,
                         runbook=runbook, execution=execution)
            reward = {"P": 1.0, "F": 0.0}.get(letter)
            result = EpisodeResult(key=key, status=STATUS[letter],  # type: ignore[arg-type]
                                   reward=reward, turns=turns,
                                   trajectory=_trajectory(task, "terminus2", cmds))
            store.put_result(result, job=Job.episode(EpisodeSpec(key=key, task=task_record(task))),
                             wait=False)
            if letter == "P":
                audit_key = msgspec.structs.replace(key, stage="audit")
                verdict = Verdict(subject=str(key), accepted=kept, stage="audit")
                spec = AuditSpec(key=audit_key, task=task_record(task), execution_key=str(key),
                                 trajectory=result.trajectory or Trajectory(task=task, harness="-"))
                store.put_result(AuditResult(key=audit_key, status="succeeded", verdict=verdict),
                                 job=Job.of(spec), wait=False)
        store.flush()
    return run_dir


def write_jsonl(path: Path) -> Path:
    """The discover part of the scenario as results JSONL (no style, no rewrites). JSONL
    has no 'cancelled': every ungraded attempt is a null reward (an infra error)."""
    lines = []
    for (task, harness), letters in OUTCOMES.items():
        domain, subset = TASKS[task]
        for attempt, letter in enumerate(letters):
            reward, rewards = _reward(task, harness, attempt, letter)
            row: dict[str, Any] = {"task": task, "harness": harness, "attempt": attempt,
                                   "reward": reward, "domain": domain, "subset": subset}
            if rewards:
                row["rewards"] = rewards
            if letter == "P":
                row["turns"] = STYLES[(task, harness, attempt)].model_turns
            lines.append(msgspec.json.encode(row).decode())
    path.write_text("\n".join(lines) + "\n")
    return path
