"""The planner role: source compression, prompt prefix sharing, runbook parsing."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from rsr_async.errors import ReplyFormatError
from rsr_async.llm.prompt import render_chatml
from rsr_async.llm.scripted import ROLE_PLANNER
from rsr_async.rsr.planner import (
    RUNBOOK_SECTIONS,
    compress_source,
    parse_runbook,
    planner_messages,
    render_runbook,
)
from rsr_async.rsr.prompts import template
from rsr_async.schema import Command, Message, Trajectory

INSTRUCTION = "Write the number of lines of /app/data.txt to /app/count.txt."
PREAMBLE = "You are an AI assistant tasked with solving command-line tasks. Reply in JSON."


def source_trajectory(observation: str = "42 /app/data.txt") -> Trajectory:
    """A Terminus-shaped success with harness control and private guidance mixed in."""
    return Trajectory(task="count", harness="rsrt", messages=[
        Message(role="system", content="PRIVATE RUNBOOK: the count is 42", origin="private"),
        Message(role="user", origin="task", content=f"{PREAMBLE}\n\nTask Description:\n"
                f"{INSTRUCTION}\n\nCurrent terminal state:\nroot@box:/app# "),
        Message(role="assistant", origin="model", turn=0, content='{"analysis": "look"}',
                commands=(Command(keystrokes="wc -l /app/data.txt\n"),)),
        Message(role="user", origin="env", turn=1, content=f"New Terminal Output:\n{observation}"),
        Message(role="assistant", origin="model", turn=1, content="{}",
                commands=(Command(keystrokes="cat > /app/count.txt <<'EOF'\n42\nEOF\n"),)),
        Message(role="user", origin="env", turn=2, content="New Terminal Output:\nroot@box:/app# "),
        Message(role="assistant", origin="model", turn=2, content="{}", task_complete=True),
        Message(role="user", origin="harness", turn=3, content="HARNESS: are you sure?"),
        Message(role="assistant", origin="model", turn=3, content="{}", task_complete=True),
        Message(role="user", origin="harness", turn=4, content="HARNESS: the task failed, go on"),
    ])


def test_the_papers_five_sections_in_order() -> None:
    assert RUNBOOK_SECTIONS == ("Final-state requirements", "Key milestones",
                                "How to check progress", "Recovery strategies", "Common pitfalls")
    # The prompt states the exact headings the parser expects.
    for name in RUNBOOK_SECTIONS:
        assert f"\n## {name}\n" in template("planner")


def test_compress_source_keeps_commands_and_outputs_drops_control_and_private() -> None:
    text = compress_source(source_trajectory(), observation_bytes=4096)
    assert "HARNESS" not in text and "PRIVATE" not in text
    assert PREAMBLE not in text  # the prompt gives the instruction on its own
    assert "Current terminal state:\nroot@box:/app#" in text
    assert "### Turn 0\n$ wc -l /app/data.txt\n\nTerminal:\nNew Terminal Output:\n42 /app/data.txt" in text
    assert "$ cat > /app/count.txt <<'EOF'\n> 42\n> EOF" in text
    assert "(no commands; declared the task complete)" in text
    long = compress_source(source_trajectory("x" * 5000 + "TAIL"), observation_bytes=400)
    assert "bytes omitted" in long and long.count("x") < 450 and "TAIL" in long


def test_the_k_planner_prompts_share_everything_but_their_last_lines() -> None:
    source = compress_source(source_trajectory(), observation_bytes=4096)
    rendered = [render_chatml(planner_messages(instruction=INSTRUCTION, source=source, index=i,
                                               count=4)) for i in range(4)]
    retry = render_chatml(planner_messages(instruction=INSTRUCTION, source=source, index=2,
                                           count=4, rejected="## Draft", critique="leaks 42"))
    prefix = os.path.commonprefix([*rendered, retry])
    # The shared prefix holds the system prompt, the instruction and the whole source ...
    assert prefix.startswith("<|im_start|>system\n" + ROLE_PLANNER)
    assert INSTRUCTION in prefix and prefix.rstrip().endswith("</trajectory>")
    assert source in prefix
    # ... and what differs is only the index lines (and the critique for a regeneration).
    for text in rendered:
        assert len(text) - len(prefix) < 400
    assert len(set(rendered)) == 4
    assert "<rejected_runbook>\n## Draft\n</rejected_runbook>" in retry and "leaks 42" in retry
    assert retry.index("leaks 42") < retry.index("runbook 3 of 4")  # the index stays last
    with pytest.raises(ValueError, match="outside"):
        planner_messages(instruction=INSTRUCTION, source=source, index=4, count=4)
    with pytest.raises(ValueError, match="both"):
        planner_messages(instruction=INSTRUCTION, source=source, index=0, count=4, rejected="x")


CANONICAL = """## Final-state requirements
- /app/count.txt holds the line count.

## Key milestones
1. Count the lines.

## How to check progress
- Print the file.

## Recovery strategies
- Recount.

## Common pitfalls
- A trailing newline changes nothing.
"""

MESSY = [
    # Reasoning, prose, a fence around everything, other heading levels and numbering,
    # bold and "Name:" headings, case, an inner code block whose comment is not a heading,
    # and prose after the closing fence.
    """<think>The user wants ## Key milestones ...</think>
Sure! Here is the runbook you asked for:

```markdown
# Runbook
### 1. Final state requirements
- /app/count.txt holds the line count.
## KEY MILESTONES
1. Count the lines.
```bash
# Common pitfalls
wc -l
```
**How to check progress:**
- Print the file.
Recovery strategies:
- Recount.
## Pitfalls
- A trailing newline changes nothing.
```
Let me know if you need anything else.
""",
    """Final-State Requirements
- /app/count.txt holds the line count.

2) Milestones
1. Count the lines.

## Verification
- Print the file.

## Recovery
- Recount.

## Common Mistakes
- A trailing newline changes nothing.""",
]


def test_parse_runbook_reads_the_canonical_form_and_renders_it_back() -> None:
    sections = parse_runbook(CANONICAL)
    assert list(sections) == list(RUNBOOK_SECTIONS)
    assert render_runbook(sections) == CANONICAL
    assert render_runbook({"pitfalls": "x", "End state": "y"}) == (
        "## Final-state requirements\ny\n\n## Common pitfalls\nx\n")
    with pytest.raises(ValueError, match="Budget"):
        render_runbook({"Budget": "1"})


@pytest.mark.parametrize("reply", MESSY, ids=["fenced-bold-think", "plain-variants"])
def test_parse_runbook_tolerates_messy_replies(reply: str) -> None:
    sections = parse_runbook(reply)
    assert list(sections) == list(RUNBOOK_SECTIONS)
    assert sections["Final-state requirements"] == "- /app/count.txt holds the line count."
    assert sections["How to check progress"] == "- Print the file."
    assert sections["Common pitfalls"] == "- A trailing newline changes nothing."
    assert sections["Recovery strategies"] == "- Recount."
    if "```bash" in reply:
        assert sections["Key milestones"] == "1. Count the lines.\n```bash\n# Common pitfalls\nwc -l\n```"


def test_parse_runbook_leaves_missing_sections_out_and_refuses_a_reply_without_any() -> None:
    partial = parse_runbook("## Key milestones\n1. a\n## Common pitfalls\n")
    assert partial == {"Key milestones": "1. a", "Common pitfalls": ""}
    with pytest.raises(ReplyFormatError, match=r"none of the runbook sections.*## Key milestones.*"
                       r"it starts 'I cannot help"):
        parse_runbook("I cannot help with that.\n# Notes\nsome text")
    with pytest.raises(ReplyFormatError, match="empty"):
        parse_runbook("<think>only thinking, cut off")


def test_the_prompt_files_ship_in_the_wheel() -> None:
    root = Path(__file__).resolve().parents[2]
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "rsr/prompts/*.txt" in data["rsr_async"]
    prompts = sorted(p.stem for p in (root / "rsr_async" / "rsr" / "prompts").glob("*.txt"))
    assert prompts == ["auditor", "auditor_task", "critic", "critic_task", "planner",
                       "planner_index", "planner_retry", "planner_source"]
