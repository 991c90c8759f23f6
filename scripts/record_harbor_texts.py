"""Record Harbor 0.25.0's Terminus 2 texts and flows, for our golden tests.

Runs on demand, not in CI: Harbor needs Python >= 3.12.

    python3.12 -m venv /tmp/harbor312 && /tmp/harbor312/bin/pip install harbor==0.25.0
    /tmp/harbor312/bin/python scripts/record_harbor_texts.py

Writes two fixtures under ``tests/harness/golden/``:

- ``harbor_texts.json``: each text Terminus 2 shows a model (first prompt, confirmation,
  output-limit message with and without a known limit, the handoff prompts, parse-error
  feedback, the warnings prefix, the timeout template), made by Harbor's own code from
  the inputs stored beside it. ``tests/harness/test_texts_golden.py`` renders ours from
  the same inputs and compares bytes.
- ``harbor_flows.json``: whole episodes. A real ``Terminus2`` runs its own ``run()`` and
  agent loop against a scripted model and a scripted terminal (the only stand-ins:
  the LLM, and a tmux session whose observations are given); every model call is
  recorded with its full history and prompt, and every key batch sent. The flows cover
  warnings, parse errors, the two-step completion (reset by a non-final reply), the
  output-limit retry, and both context handoffs (proactive, and after the server refuses
  a prompt as too long). ``tests/harness/test_terminus2_golden.py`` replays them.

Token counting is the one patched method: LiteLLM's counter would need a tokenizer
download, and the flows only need "free context is low now", which a reply marks with
``then_handoff``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at import

from harbor.agents.terminus_2.terminus_2 import Terminus2  # noqa: E402
from harbor.llms.base import (  # noqa: E402
    ContextLengthExceededError,
    LLMResponse,
    OutputLengthExceededError,
)
from harbor.llms.chat import Chat  # noqa: E402
from harbor.models.agent.context import AgentContext  # noqa: E402

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "harness" / "golden"
MODEL = "openai/rsr-golden-model"  # unknown to LiteLLM: no output limit, 1,000,000 context


def reply(analysis: str, keystrokes: list[str] | None = None, done: bool = False, **extra: Any) -> str:
    return json.dumps(
        {
            "analysis": analysis,
            "plan": "next",
            "commands": [{"keystrokes": k, "duration": 0.1} for k in keystrokes or []],
            "task_complete": done,
            **extra,
        }
    )


class ScriptedLLM:
    """Answers calls from a script and records each (history, prompt)."""

    def __init__(self, script: list[dict[str, Any]], output_limit: int | None = None) -> None:
        self.script = list(script)
        self.calls: list[dict[str, Any]] = []
        self.low_context = False
        self.output_limit = output_limit

    async def call(self, prompt: str, message_history: Any = (), **_: Any) -> LLMResponse:
        step = self.script.pop(0)
        history = [{"role": m["role"], "content": m["content"]} for m in message_history]
        self.calls.append({"history": history, "prompt": prompt})
        if step.get("finish") == "context":
            raise ContextLengthExceededError("prompt too long")
        if step.get("finish") == "length":
            raise OutputLengthExceededError("cut", truncated_response=step["text"])
        self.low_context = bool(step.get("then_handoff"))
        return LLMResponse(content=step["text"])

    def get_model_context_limit(self) -> int:
        return 1_000_000

    def get_model_output_limit(self) -> int | None:
        return self.output_limit


class ScriptedTerminal:
    """A tmux session whose observations and screen come from the script."""

    def __init__(self, observations: list[str], screen: str) -> None:
        self.observations = list(observations)
        self.screen = screen
        self.sent: list[list[Any]] = []

    async def is_session_alive(self) -> bool:
        return True

    async def send_keys(self, keys: str, block: bool = False, min_timeout_sec: float = 0.0, **_: Any) -> None:
        self.sent.append([keys, min_timeout_sec])

    async def get_incremental_output(self) -> str:
        return self.observations.pop(0)

    async def capture_pane(self, capture_entire: bool = False) -> str:
        return self.screen


def make_agent(llm: ScriptedLLM, session: ScriptedTerminal | None = None) -> Terminus2:
    agent = Terminus2(
        logs_dir=Path(tempfile.mkdtemp(prefix="harbor-golden-")),
        model_name=MODEL,
        record_terminal_session=False,
    )
    agent._llm = llm
    agent._session = session
    # Free context is "low" right after a reply marked then_handoff (see module docstring).
    agent._count_total_tokens = lambda chat: 10**9 if llm.low_context else 0
    return agent


def obs(text: str) -> str:
    return f"New Terminal Output:\n{text}\nroot@box:/app# "


FLOWS: dict[str, dict[str, Any]] = {
    "warnings-errors-and-completion": {
        "instruction": "Write hello to /app/out.txt and check it.",
        "screen": "root@box:/app# ",
        "observations": [
            "Current Terminal Screen:\nroot@box:/app# ",
            obs("root@box:/app# ls\nREADME.md"),
            obs("root@box:/app# echo hello > out.txt"),
            obs("root@box:/app# cat out.txt\nhello"),
            "Current Terminal Screen:\nroot@box:/app# ",
            obs("root@box:/app# wc -c out.txt\n6 out.txt"),
            "Current Terminal Screen:\nroot@box:/app# ",
        ],
        "replies": [
            {"text": '{"analysis": "look", "plan": "ls", "commands": [{"keystrokes": "ls\\n"}]}'},
            {"text": "I will now write the file."},
            {"text": 'Here: {"analysis": "write", "plan": "echo", "commands": [{"keystrokes": "echo hello > out.txt\\n", "duration": 0.1, "note": "x"}], "task_complete": false'},
            {"text": reply("check", ["cat out.txt\n"], done=True, confidence=0.9) + "\nDone."},
            {"text": reply("wait, verify size first", [], done=False)},
            {"text": reply("verified", ["wc -c out.txt\n"], done="true")},
            {"text": reply("sure", [], done=True)},
        ],
    },
    "output-limit": {
        "instruction": "Generate a large config file.",
        "screen": "root@box:/app# ",
        "observations": [
            "Current Terminal Screen:\nroot@box:/app# ",
            obs("root@box:/app# cat > part1.txt << 'EOF'\n> a\n> EOF"),
            "Current Terminal Screen:\nroot@box:/app# ",
            "Current Terminal Screen:\nroot@box:/app# ",
        ],
        "replies": [
            {"finish": "length", "text": '{"analysis": "write everything at once", "plan": "heredoc", "commands": [{"keystrokes": "cat > big.txt << EOF\\n'},
            {"finish": "length", "text": reply("a complete reply the server still cut", ["ls\n"])},
            {"text": reply("smaller chunks", ["cat > part1.txt << 'EOF'\na\nEOF\n"])},
            {"text": reply("done", [], done=True)},
            {"text": reply("yes", [], done=True)},
        ],
    },
    "proactive-handoff": {
        "instruction": "Fix the failing build in /app.",
        "screen": "root@box:/app# make\nerror: missing foo.h\nroot@box:/app# ",
        "observations": [
            "Current Terminal Screen:\nroot@box:/app# ",
            obs("root@box:/app# make\nerror: missing foo.h"),
            obs("root@box:/app# ls include\nbar.h"),
            obs("root@box:/app# touch include/foo.h"),
            "Current Terminal Screen:\nroot@box:/app# ",
        ],
        "replies": [
            {"text": reply("build", ["make\n"])},
            {"text": reply("look for headers", ["ls include\n"]), "then_handoff": True},
            {"text": "SUMMARY: make fails on a missing foo.h; include/ has bar.h only."},
            {"text": "1. Is foo.h referenced elsewhere?\n2. Which compiler?"},
            {"text": "1. Only in main.c.\n2. gcc."},
            {"text": reply("create the header", ["touch include/foo.h\n"], done=True)},
            {"text": reply("sure", [], done=True)},
        ],
    },
    "context-refused-handoff": {
        "instruction": "Count the lines of every log file.",
        "screen": "root@box:/app# wc -l *.log\n  10 a.log\nroot@box:/app# ",
        "observations": [
            "Current Terminal Screen:\nroot@box:/app# ",
            obs("root@box:/app# wc -l *.log\n  10 a.log"),
            obs("root@box:/app# echo 10 > count.txt"),
            "Current Terminal Screen:\nroot@box:/app# ",
        ],
        "replies": [
            {"text": reply("count", ["wc -l *.log\n"])},
            {"finish": "context"},
            {"text": "SUMMARY: one log, a.log, 10 lines."},
            {"text": "Where should the count go?"},
            {"text": "In count.txt."},
            {"text": reply("write it", ["echo 10 > count.txt\n"], done=True)},
            {"text": reply("sure", [], done=True)},
        ],
    },
}


async def record_flow(flow: dict[str, Any]) -> dict[str, Any]:
    llm = ScriptedLLM(flow["replies"])
    terminal = ScriptedTerminal(flow["observations"], flow["screen"])
    agent = make_agent(llm, terminal)
    await agent.run(flow["instruction"], environment=None, context=AgentContext())
    assert not llm.script and not terminal.observations, "the flow script was not used up"
    return {**flow, "calls": llm.calls, "sent": terminal.sent}


async def output_limit_message(truncated: str, limit: int | None) -> str:
    """Drive Terminus2._query_llm through an OutputLengthExceededError; return its retry prompt."""
    llm = ScriptedLLM([{"finish": "length", "text": truncated}, {"text": "{}"}], output_limit=limit)
    agent = make_agent(llm)
    await agent._query_llm(Chat(llm), "the observation")
    return llm.calls[1]["prompt"]


async def record_texts(flows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    agent = make_agent(ScriptedLLM([]))
    texts: dict[str, Any] = {}

    def add(name: str, text: str, **inputs: Any) -> None:
        texts[name] = {"inputs": inputs, "text": text}

    instruction = "Write hello to /app/out.txt.\n\nUse {braces} freely."
    state = "Current Terminal Screen:\nroot@box:/app# "
    add("first_prompt", agent._prompt_template.format(instruction=instruction, terminal_state=state),
        instruction=instruction, terminal_state=state)
    add("timeout", agent._timeout_template.format(timeout_sec=60, command="sleep 100\n", terminal_state=state),
        timeout_sec=60, command="sleep 100\n", terminal_state=state)
    add("confirm", agent._get_completion_confirmation_message(state), terminal_state=state)
    for kind, truncated in (("warned", '{"analysis": "a", "plan'), ("clean", reply("whole", ["ls\n"]))):
        for limit in (None, 4096):
            name = f"output_limit_{limit or 'unknown'}_{kind}"
            add(name, await output_limit_message(truncated, limit), truncated=truncated, limit=limit)
    for size in (100, 10000, 10001, 30000):
        text = "".join(f"line {i} é\n" for i in range(size // 10))[:size]
        add(f"limit_output_{size}", agent._limit_output_length(text), output=text)

    # The texts Terminus builds inline in its loop and in _summarize come from the flows.
    calls = flows["warnings-errors-and-completion"]["calls"]
    add("warnings", calls[1]["prompt"], reply=flows["warnings-errors-and-completion"]["replies"][0]["text"],
        observation=flows["warnings-errors-and-completion"]["observations"][1])
    add("parse_error", calls[2]["prompt"], reply=flows["warnings-errors-and-completion"]["replies"][1]["text"])
    handoff = flows["proactive-handoff"]
    summary_call, questions_call, answers_call, resume_call = handoff["calls"][2:6]
    add("handoff_summary", summary_call["prompt"], instruction=handoff["instruction"])
    add("handoff_questions", questions_call["prompt"], instruction=handoff["instruction"],
        summary=handoff["replies"][2]["text"], screen=handoff["screen"])
    add("handoff_answers", answers_call["prompt"], questions=handoff["replies"][3]["text"])
    add("handoff_resume", resume_call["prompt"], answers=handoff["replies"][4]["text"])
    return texts


async def main() -> None:
    flows = {name: await record_flow(flow) for name, flow in FLOWS.items()}
    texts = await record_texts(flows)
    meta = {"harbor": version("harbor"), "python": sys.version.split()[0], "model": MODEL}
    for name, body in (("harbor_flows.json", flows), ("harbor_texts.json", texts)):
        out = GOLDEN / name
        out.write_text(json.dumps({**meta, name.split("_")[1].split(".")[0]: body}, indent=1,
                                  ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{len(body)} recorded to {out}")


if __name__ == "__main__":
    asyncio.run(main())
