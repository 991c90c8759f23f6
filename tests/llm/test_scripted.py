"""The scripted stand-in model (a test double): deterministic, bounded, role-aware."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import rsr_async.harness
from rsr_async.config import LLMConfig
from rsr_async.errors import ContextLengthError
from rsr_async.llm.base import ChatMessage
from rsr_async.llm.client import SGLangClient
from rsr_async.llm.scripted import (
    GUIDANCE_LEAD,
    LEAK_PHRASE,
    ScriptedModel,
    carries_data,
    load_solutions,
    solve_probability,
    split_blocks,
)
from rsr_async.rsr.audit import auditor_messages, flag_values, parse_audit
from rsr_async.rsr.critic import judge_messages, parse_judgement, rule_checks
from rsr_async.rsr.planner import compress_source, parse_runbook, planner_messages, render_runbook
from rsr_async.schema import Command, Message, Task, Trajectory
from rsr_async.tasks import BUNDLED_SUITE, load_task
from tests.conftest import run_cli_env

from .conftest import INSTRUCTION, SOLVE

HEADERS = {
    "terminus2": "You are an AI assistant tasked with solving command-line tasks.",
    "statem": "You drive the workflow with the statem command (statem cur, statem next).",
    "rsrt": "You are an AI assistant tasked with solving command-line tasks.",
}


def first_message(instruction: str, harness: str = "terminus2") -> list[ChatMessage]:
    return [{"role": "user", "content": f"{HEADERS[harness]}\nFormat: JSON.\n\n"
             f"Task Description:\n{instruction}\n\nCurrent terminal state:\n$ "}]


def drive(model: ScriptedModel, instruction: str, harness: str, seed: int,
          verifier: Callable[[], bool] | None = None, max_turns: int = 40,
          guidance: str | None = None,
          ) -> tuple[list[ChatMessage], list[str]]:
    """A minimal Terminus 2 loop: parse, confirm twice, RSRT feedback; returns keystrokes.

    ``guidance``: a private system message before the task prompt, as the harness sends it.
    """
    messages = first_message(instruction, harness)
    if guidance is not None:
        messages.insert(0, {"role": "system", "content": guidance})
    typed: list[str] = []
    claims = 0
    for _ in range(max_turns):
        reply = model.reply(messages, seed=seed)
        messages.append({"role": "assistant", "content": reply})
        try:
            data = json.loads(reply)
        except json.JSONDecodeError:
            messages.append({"role": "user", "content": "Previous response had parsing errors: "
                             "no valid JSON found. Please fix these issues."})
            claims = 0
            continue
        typed += [c["keystrokes"] for c in data["commands"]]
        if data["task_complete"]:
            claims += 1
            if claims == 2:
                if harness == "rsrt" and verifier is not None and not verifier():
                    messages.append({"role": "user", "content": "The task failed. Keep working."})
                    claims = 0
                    continue
                return messages, typed
            messages.append({"role": "user", "content": "Are you sure? Include task_complete again."})
        else:
            claims = 0
            messages.append({"role": "user", "content": "New Terminal Output:\n$ \n"})
    raise AssertionError(f"episode did not end within {max_turns} turns")


def test_split_blocks_keeps_compound_commands_and_heredocs_whole() -> None:
    blocks = split_blocks(SOLVE)
    assert blocks[0] == "#!/bin/bash\nset -e"
    assert "cat > notes.txt <<'EOF'\nalpha\nbeta\nEOF" in blocks
    assert 'for n in 1 2 3; do\n  echo "line $n" >> numbers.txt\ndone' in blocks
    assert any(b.startswith("if [ -f notes.txt ]") and b.endswith("fi") for b in blocks)


def _seed_where(model: ScriptedModel, instruction: str, harness: str, solves: bool) -> int:
    return next(s for s in range(500) if model.solves(instruction, harness, seed=s) == solves)


def test_solving_types_the_reference_solution_with_the_same_effect(tmp_path: Path) -> None:
    model = ScriptedModel({INSTRUCTION: SOLVE})
    expected, actual = tmp_path / "expected", tmp_path / "actual"
    expected.mkdir()
    actual.mkdir()
    subprocess.run(["bash", "-c", SOLVE], env={"WORKDIR": str(expected), "PATH": "/usr/bin:/bin"},
                   check=True, timeout=30, cwd=tmp_path)
    chunk_counts = set()
    for seed in [s for s in range(60) if model.solves(INSTRUCTION, "terminus2", seed=s)][:8]:
        for f in actual.iterdir():
            f.unlink()
        messages, typed = drive(model, INSTRUCTION, "terminus2", seed)
        chunk_counts.add(sum("RSR_EOF" in k for k in typed))
        # Type what the model typed into a real bash, as a terminal would receive it.
        # cwd: a chunk that lost the `cd` must not write into the checkout.
        subprocess.run(["bash"], input="".join(typed), text=True, check=True, timeout=30,
                       env={"WORKDIR": str(actual), "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
        for name in ("notes.txt", "numbers.txt", "count.txt", "status.txt"):
            assert (actual / name).read_text() == (expected / name).read_text(), (seed, name)
        assert json.loads(messages[-1]["content"])["task_complete"] is True
    assert chunk_counts <= {1, 2, 3} and len(chunk_counts) >= 2  # 1-3 turns of typing


def test_episodes_are_bounded_and_harnesses_solve_different_task_sets(tasks_dir: Path) -> None:
    solutions = load_solutions(tasks_dir)
    assert len(solutions) == 21
    model = ScriptedModel(solutions, seed=7)
    solved: dict[str, set[str]] = {h: set() for h in HEADERS}
    lengths = []
    for harness in HEADERS:
        for instruction in solutions:
            for seed in range(3):
                messages, _ = drive(model, instruction, harness, seed)
                lengths.append(sum(m["role"] == "assistant" for m in messages))
                if model.solves(instruction, harness, seed=seed):
                    solved[harness].add(instruction)
    assert max(lengths) <= 12
    assert solved["terminus2"] != solved["statem"] != solved["rsrt"]
    assert all(0 < len(s) < len(solutions) for s in solved.values())
    for instruction in solutions:
        for harness in HEADERS:
            assert 0.15 <= solve_probability(instruction, harness) <= 0.95


def test_failure_modes_all_occur_and_are_deterministic(tasks_dir: Path) -> None:
    solutions = load_solutions(tasks_dir)
    model = ScriptedModel(solutions)
    seen = set()
    for instruction in solutions:
        for seed in range(6):
            if model.solves(instruction, "terminus2", seed=seed):
                continue
            messages, typed = drive(model, instruction, "terminus2", seed)
            assert messages == drive(model, instruction, "terminus2", seed)[0]
            replies = [m["content"] for m in messages if m["role"] == "assistant"]
            if any(not r.startswith("{") for r in replies):
                seen.add("malformed")
            elif typed.count("ls -la\n") >= 3:
                seen.add("loop")
            elif any(k in typed for k in ("cat /app/answer.txt\n", "python3 main.py\n",
                                          "make test\n", "./run.sh\n")):
                seen.add("wrong")
            else:
                seen.add("gave_up")
    assert seen == {"malformed", "loop", "wrong", "gave_up"}


def test_rsrt_keeps_working_after_the_hidden_verifier_says_failed() -> None:
    model = ScriptedModel({INSTRUCTION: SOLVE})
    seed = next(s for s in range(500) if not model.solves(INSTRUCTION, "terminus2", seed=s)
                and not model.solves(INSTRUCTION, "rsrt", seed=s)
                and model.solves(INSTRUCTION, "rsrt", seed=s, retry=1))
    calls = []

    def verifier() -> bool:
        calls.append(1)
        return len(calls) > 1  # the first claim fails, the retry passes

    messages, typed = drive(model, "RSRT " + INSTRUCTION, "rsrt", seed, verifier=verifier)
    assert "failed" in " ".join(m["content"] for m in messages if m["role"] == "user")
    assert any("RSR_EOF" in k for k in typed)  # the retry typed the solution


def _drive_busy(model: ScriptedModel, seed: int, busy_screens: int) -> tuple[list[str], list[dict[str, Any]]]:
    """Terminus 2's loop where each command keeps running for ``busy_screens`` observations
    (its screen ends with the heredoc's echo, no prompt), as on a loaded machine."""
    messages = first_message(INSTRUCTION)
    typed: list[str] = []
    replies: list[dict[str, Any]] = []
    busy = claims = 0
    for _ in range(80):
        raw = model.reply(messages, seed=seed)
        messages.append({"role": "assistant", "content": raw})
        try:
            reply = json.loads(raw)
        except json.JSONDecodeError:  # a stumble: the harness asks again
            messages.append({"role": "user", "content": "Previous response had parsing errors."})
            continue
        replies.append(reply)
        typed += [c["keystrokes"] for c in reply["commands"] if c["keystrokes"]]
        if any(c["keystrokes"] for c in reply["commands"]):
            busy = busy_screens
        if reply["task_complete"]:
            assert busy == 0, "claimed while its command was still running"
            claims += 1
            if claims == 2:
                return typed, replies
            messages.append({"role": "user", "content": "Are you sure? Include task_complete again."})
            continue
        claims = 0
        screen = "root@sandbox:/app# bash <<'RSR_EOF'\n> echo hi\n> RSR_EOF\n" if busy else "root@sandbox:/app# "
        busy = max(0, busy - 1)
        messages.append({"role": "user", "content": f"New Terminal Output:\n{screen}\n\n\n"})
    raise AssertionError("episode did not end within 80 turns")


def test_a_command_still_running_is_polled_not_claimed_over() -> None:
    model = ScriptedModel({INSTRUCTION: SOLVE})
    seed = _seed_where(model, INSTRUCTION, "terminus2", True)
    quiet, quiet_replies = _drive_busy(model, seed, busy_screens=0)
    typed, replies = _drive_busy(model, seed, busy_screens=3)
    assert typed == quiet  # the same steps of the script, in the same order: waits are no steps
    waits = [r for r in replies if r["analysis"].startswith("The previous command is still running")]
    assert all(w["commands"] == [{"keystrokes": "", "duration": w["commands"][0]["duration"]}] for w in waits)
    chunks = sum("RSR_EOF" in k for k in typed) + sum(k == "ls -la\n" for k in typed)
    assert len(waits) == 3 * chunks and len(replies) == len(quiet_replies) + len(waits)
    assert [w["commands"][0]["duration"] for w in waits[:3]] == [1.0, 2.0, 4.0]  # backing off
    assert not any(r["analysis"].startswith("The previous command") for r in quiet_replies)


def test_a_command_that_never_returns_is_waited_for_a_bounded_time() -> None:
    model = ScriptedModel({INSTRUCTION: SOLVE})
    seed = _seed_where(model, INSTRUCTION, "terminus2", True)
    quiet, _ = _drive_busy(model, seed, busy_screens=0)
    messages = first_message(INSTRUCTION)
    waited = []
    for _ in range(30):
        raw = model.reply(messages, seed=seed)
        messages.append({"role": "assistant", "content": raw})
        try:
            reply = json.loads(raw)
        except json.JSONDecodeError:
            messages.append({"role": "user", "content": "Previous response had parsing errors."})
            continue
        if reply["task_complete"]:
            break
        if reply["analysis"].startswith("The previous command is still running"):
            waited.append(reply["commands"][0]["duration"])
        # Never a prompt again: an interactive program that holds the terminal.
        messages.append({"role": "user", "content": "New Terminal Output:\n> RSR_EOF\n"})
    assert waited[:8] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert reply["task_complete"] is True  # after each 8 waits the script went on, to its claim


def test_unknown_task_explores_then_gives_up() -> None:
    model = ScriptedModel({})
    messages, typed = drive(model, "Something nobody has seen.", "terminus2", 0)
    assert typed == ["ls -la\n"]
    assert len([m for m in messages if m["role"] == "assistant"]) == 3


BUNDLED = ScriptedModel.from_tasks_dir(BUNDLED_SUITE, seed=3)
APP_CONFIG = load_task(BUNDLED_SUITE / "fix-app-config")


def typed_source(task: Task, output: str = "config ok") -> Trajectory:
    """A source the way the scripted actor solves: the reference solution in one chunk."""
    solve = Path(task.solution_path or "").read_text()
    return Trajectory(task=task.name, harness="terminus2", messages=[
        Message(role="user", origin="task", content=first_message(task.instruction)[0]["content"]),
        Message(role="assistant", origin="model", turn=0, content="{}",
                commands=(Command(keystrokes=f"bash <<'RSR_EOF'\n{solve}RSR_EOF\n"),)),
        Message(role="user", origin="env", turn=1, content=f"New Terminal Output:\n{output}\n"),
    ])


def _draft(index: int, seed: int, **retry: str) -> str:
    source = compress_source(typed_source(APP_CONFIG), observation_bytes=2000)
    messages = planner_messages(instruction=APP_CONFIG.instruction, source=source, index=index,
                                count=4, **retry)
    return BUNDLED.reply(messages, seed=seed)


def _judge(runbook: str) -> tuple[bool, str]:
    return parse_judgement(BUNDLED.reply(judge_messages(instruction=APP_CONFIG.instruction,
                                                        runbook=runbook)))


def test_scripted_planner_leaks_a_seeded_share_that_the_critic_catches_and_regeneration_fixes() -> None:
    drafts = [_draft(i, seed) for seed in range(25) for i in range(4)]
    assert drafts == [_draft(i, seed) for seed in range(25) for i in range(4)]  # deterministic
    runbooks = [render_runbook(parse_runbook(d)) for d in drafts]  # messy ones parse too
    assert all(len(parse_runbook(r)) == 5 for r in runbooks)
    assert any(d.startswith("Here is the runbook.") for d in drafts)
    assert any("with sed" in r for r in runbooks)  # milestones name the source's tools
    leaky = [r for r in runbooks if LEAK_PHRASE in r]
    assert 0.1 <= len(leaky) / len(runbooks) <= 0.45, len(leaky)
    for runbook in runbooks:
        reasons = rule_checks(runbook, task=APP_CONFIG, source=typed_source(APP_CONFIG))
        accepted, critique = _judge(runbook)
        if LEAK_PHRASE in runbook:
            # The solution's literal: the source typed it unseen, and the judge sees it.
            assert [r.split(":")[1] for r in reasons] == ["literal_value"], reasons
            assert not accepted and "which the instruction does not contain" in critique
        else:
            assert reasons == [] and accepted and critique == ""
    # Regenerated with the rejected draft and its critique, the planner leaks no more.
    for seed in range(25):
        rejected = next((r for r in runbooks if LEAK_PHRASE in r), "")
        again = render_runbook(parse_runbook(_draft(seed % 4, seed, rejected=rejected,
                                                    critique=_judge(rejected)[1])))
        assert LEAK_PHRASE not in again and _judge(again) == (True, "")


def test_on_every_bundled_task_clean_drafts_pass_the_critic_and_leaky_ones_do_not() -> None:
    counts = {"clean": 0, "leaky": 0}
    for task_dir in sorted(p for p in BUNDLED_SUITE.iterdir() if (p / "task.toml").is_file()):
        task = load_task(task_dir)
        if task.steps:  # a multi-step task is never a rewrite source (README)
            continue
        source = typed_source(task)
        text = compress_source(source, observation_bytes=2000)
        for index in range(4):
            messages = planner_messages(instruction=task.instruction, source=text, index=index, count=4)
            runbook = render_runbook(parse_runbook(BUNDLED.reply(messages, seed=1)))
            passes = not rule_checks(runbook, task=task, source=source) and parse_judgement(
                BUNDLED.reply(judge_messages(instruction=task.instruction, runbook=runbook)))[0]
            leaky = LEAK_PHRASE in runbook
            counts["leaky" if leaky else "clean"] += 1
            assert passes is not leaky, (task.name, runbook)
    assert counts["leaky"] >= 10 and counts["clean"] >= 90, counts


def test_the_guidance_lead_is_how_the_harness_starts_its_private_message() -> None:
    template = Path(rsr_async.harness.__file__).parent / "templates" / "guidance.txt"
    assert template.read_text().startswith(GUIDANCE_LEAD)
    guidance = {"role": "system", "content": f"{GUIDANCE_LEAD}: use statem-like checks"}
    assert ScriptedModel.harness_of([guidance, *first_message(INSTRUCTION)]) == "terminus2"


def test_the_scripted_auditor_tells_data_from_naming() -> None:
    data = ["8080", "0.95", "73519.25", "9c1e55aa01", "/srv/v2024/report.txt"]
    naming = ["/usr/share/man/man1", "HTTP/1.1", "python3", "A-Za-z0-9_", "wordcount.1"]
    assert [carries_data(v) for v in data] == [True] * len(data)
    assert [carries_data(v) for v in naming] == [False] * len(naming)


LEDGER = "Sum the amounts in ledger.csv into total.txt."
LEDGER_SOLVE = "#!/bin/bash\ncut -d, -f2 ledger.csv | paste -sd+ | bc > total.txt\n"


def test_a_guided_actor_solves_more_often_and_copies_a_leaked_literal_the_audit_catches() -> None:
    model = ScriptedModel({LEDGER: LEDGER_SOLVE})
    plain = sum(model.solves(LEDGER, "terminus2", seed=s) for s in range(300))
    guided = sum(model.solves(LEDGER, "terminus2", seed=s, guided=True) for s in range(300))
    assert guided > plain + 30
    clean = f"{GUIDANCE_LEAD} ...\n\n## Key milestones\n1. Sum the column."
    leaky = clean + f"\n- {LEAK_PHRASE} `73519.25`."
    seed = next(s for s in range(300) if model.solves(LEDGER, "terminus2", seed=s, guided=True))
    for guidance, copied in ((clean, False), (leaky, True)):
        messages, typed = drive(model, LEDGER, "terminus2", seed, guidance=guidance)
        assert any("RSR_EOF" in k for k in typed)  # it solved, following the runbook
        assert ("echo 73519.25\n" in typed) is copied
        trajectory = Trajectory(task="ledger", harness="terminus2", messages=[
            Message(role="system", origin="private", content=guidance),
            Message(role="user", origin="task", content=messages[1]["content"]),
            *(Message(role="assistant", origin="model", turn=i, content="{}",
                      commands=(Command(keystrokes=k),)) for i, k in enumerate(typed)),
        ])
        flagged = flag_values(trajectory, instruction=LEDGER)
        assert ("73519.25" in [leak.value for leak in flagged]) is copied
        if flagged:
            reply = model.reply(auditor_messages(instruction=LEDGER, trajectory=trajectory,
                                                 leaks=flagged))
            leaked = [leak.value for leak, is_leak, _ in parse_audit(reply, flagged) if is_leak]
            assert leaked == (["73519.25"] if copied else [])


async def test_in_process_chat_usage_limits_and_context() -> None:
    model = ScriptedModel({INSTRUCTION: SOLVE}, context_length=1000)
    completion = await model.chat(first_message(INSTRUCTION), affinity="e1")
    assert completion.finish_reason == "stop" and completion.usage.prompt_tokens > 0
    assert completion.usage.completion_tokens > 0 and completion.usage.requests == 1
    cut = await model.chat(first_message(INSTRUCTION), affinity="e1", max_tokens=3)
    assert cut.finish_reason == "length" and cut.usage.completion_tokens == 3
    with pytest.raises(ContextLengthError):
        await model.chat([{"role": "user", "content": "x " * 600}], affinity="e1")


@pytest.mark.parametrize("api", ["native", "openai"])
async def test_same_replies_in_process_and_behind_the_simulator(
    sims: Callable[..., Any], api: str, tasks_dir: Path
) -> None:
    local = ScriptedModel.from_tasks_dir(tasks_dir, seed=5)
    [sim] = await sims(seed=5)
    sim.model = ScriptedModel.from_tasks_dir(tasks_dir, seed=5)
    async with SGLangClient(sim.url, LLMConfig(api=api)) as client:  # type: ignore[arg-type]
        for instruction in list(load_solutions(tasks_dir))[:6]:
            messages = first_message(instruction)
            for _ in range(4):
                remote = await client.chat(messages, seed=11)
                assert remote.text == local.reply(messages, seed=11)
                messages = [*messages, {"role": "assistant", "content": remote.text},
                            {"role": "user", "content": "New Terminal Output:\n$ \n"}]


def test_the_contract_and_the_test_double_import_without_http_libraries() -> None:
    code = ("import sys; import rsr_async.llm.base, rsr_async.llm.scripted; "
            "print(','.join(m for m in ('aiohttp', 'httpx', 'jinja2') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60, env=run_cli_env())
    assert out.stdout.strip() == ""
