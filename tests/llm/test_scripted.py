"""The scripted stand-in model (a test double): deterministic, bounded, role-aware."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rsr_async.config import LLMConfig
from rsr_async.errors import ContextLengthError
from rsr_async.llm.base import ChatMessage
from rsr_async.llm.client import SGLangClient
from rsr_async.llm.scripted import (
    ROLE_AUDITOR,
    ROLE_CRITIC,
    ROLE_PLANNER,
    ScriptedModel,
    load_solutions,
    solve_probability,
    split_blocks,
)
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
          ) -> tuple[list[ChatMessage], list[str]]:
    """A minimal Terminus 2 loop: parse, confirm twice, RSRT feedback; returns keystrokes."""
    messages = first_message(instruction, harness)
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


def test_unknown_task_explores_then_gives_up() -> None:
    model = ScriptedModel({})
    messages, typed = drive(model, "Something nobody has seen.", "terminus2", 0)
    assert typed == ["ls -la\n"]
    assert len([m for m in messages if m["role"] == "assistant"]) == 3


TRAJECTORY = (
    "Instruction: make the service answer on port 8080.\n"
    '{"keystrokes": "sed -i s/port=80/port=8080/ /etc/svc/conf_v2.ini\\n", "duration": 0.1}\n'
    '{"keystrokes": "systemctl restart svc\\n", "duration": 1}\n'
)


def test_planner_critic_and_auditor_roles() -> None:
    model = ScriptedModel({})
    runbooks = [model.reply([{"role": "system", "content": ROLE_PLANNER + "\nWrite a runbook."},
                             {"role": "user", "content": TRAJECTORY}], seed=s) for s in range(40)]
    for runbook in runbooks:
        for section in ("## End state", "## Milestones", "## Checks", "## Recovery", "## Pitfalls"):
            assert section in runbook
    leaky = [r for r in runbooks if "expected value is" in r]
    clean = [r for r in runbooks if "expected value is" not in r]
    assert leaky and clean  # occasionally leaks a literal, seeded

    def verdict(runbook: str) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(model.reply([
            {"role": "system", "content": ROLE_CRITIC},
            {"role": "user", "content": "Instruction: make the service answer on port 8080.\n"
             f"Runbook:\n{runbook}"}]))
        return result

    assert verdict(leaky[0])["verdict"] == "reject" and verdict(leaky[0])["reasons"]
    assert verdict(clean[0]) == {"verdict": "accept", "reasons": []}
    # Regenerated with the critique in the prompt, the planner does not leak again.
    again = model.reply([{"role": "system", "content": ROLE_PLANNER},
                         {"role": "user", "content": TRAJECTORY + "\nCritic: reject (leak)."}])
    assert "expected value is" not in again
    audit = json.loads(model.reply([{"role": "user", "content": ROLE_AUDITOR + "\n" + TRAJECTORY}]))
    assert audit == {"leaks": ["/etc/svc/conf_v2.ini"]}


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
