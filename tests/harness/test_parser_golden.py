"""Our reply parser against Harbor 0.25.0's, on a recorded corpus of model replies.

``golden/replies/`` holds the replies (valid, near-JSON, extra text, missing and wrong
fields, ``task_complete`` variants, empty keystrokes, huge replies); ``golden/
harbor_parser.json`` is what Harbor's own ``TerminusJSONPlainParser`` made of each,
recorded by ``scripts/record_harbor_parser.py``. Every case must match exactly: the
commands and the wait Terminus gives each, the completion claim, the error text, and
the warning text the model is shown.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rsr_async.harness.protocol import parse_reply

GOLDEN = Path(__file__).parent / "golden"
RECORD: dict[str, Any] = json.loads((GOLDEN / "harbor_parser.json").read_text("utf-8"))
CASES: list[dict[str, Any]] = RECORD["cases"]
MAX_WAIT_S = 60.0  # Terminus's cap, which our harness.max_duration_s defaults to


def test_the_corpus_is_complete_and_recorded_from_harbor() -> None:
    replies = sorted(path.name for path in (GOLDEN / "replies").glob("*.txt"))
    assert replies == [case["reply"] for case in CASES], "rerun scripts/record_harbor_parser.py"
    assert len(CASES) >= 60
    assert RECORD["harbor"] == "0.25.0"
    # The corpus exercises every outcome: clean, warned, auto-corrected, refused.
    assert any(not c["error"] and not c["warning"] for c in CASES)
    assert any(not c["error"] and c["warning"] for c in CASES)
    assert any(c["warning"].startswith("- AUTO-CORRECTED") for c in CASES)
    assert any(c["error"] for c in CASES)
    assert any(c["task_complete"] for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["reply"].removesuffix(".txt") for c in CASES])
def test_parse_reply_matches_harbor(case: dict[str, Any]) -> None:
    text = (GOLDEN / "replies" / case["reply"]).read_bytes().decode("utf-8")
    reply = parse_reply(text, default_duration=1.0)
    assert reply.error == case["error"]
    assert reply.warning_text == case["warning"]
    assert reply.task_complete is case["task_complete"]
    assert [c.keystrokes for c in reply.commands] == [c["keystrokes"] for c in case["commands"]]
    assert [c.duration for c in reply.commands] == [c["duration"] for c in case["commands"]]
    assert [min(c.duration, MAX_WAIT_S) for c in reply.commands] == [
        c["wait"] for c in case["commands"]
    ]
