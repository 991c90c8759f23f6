"""Every text our Terminus 2 shows a model, byte for byte against Harbor 0.25.0's.

``golden/harbor_texts.json`` holds each text as Harbor's own code made it, with its
inputs (recorded by ``scripts/record_harbor_texts.py``); here ours is rendered from the
same inputs. The defaults of :class:`HarnessConfig` (1.0 s default wait, 60 s cap) are
the values Terminus writes into its prompt.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rsr_async.config import HarnessConfig
from rsr_async.harness import protocol
from rsr_async.harness.protocol import parse_reply, render

RECORD: dict[str, Any] = json.loads(
    (Path(__file__).parent / "golden" / "harbor_texts.json").read_text("utf-8")
)
TEXTS: dict[str, dict[str, Any]] = RECORD["texts"]
CONFIG = HarnessConfig()

OURS: dict[str, Callable[..., str]] = {
    "first_prompt": lambda instruction, terminal_state: protocol.first_prompt(
        instruction,
        terminal_state,
        default_duration=CONFIG.default_duration_s,
        max_duration=CONFIG.max_duration_s,
    ),
    "confirm": lambda terminal_state: protocol.confirm_message(terminal_state),
    "warnings": lambda reply, observation: protocol.with_warnings(observation, parse_reply(reply)),
    "parse_error": lambda reply: protocol.parse_error_message(parse_reply(reply)),
    "handoff_summary": lambda **inputs: render("handoff_summary", **inputs),
    "handoff_questions": lambda **inputs: render("handoff_questions", **inputs),
    "handoff_answers": lambda **inputs: render("handoff_answers", **inputs),
    "handoff_resume": lambda **inputs: render("handoff_resume", **inputs),
    **{
        name: protocol.output_limit_message
        for name in TEXTS
        if name.startswith("output_limit_")
    },
    **{
        name: lambda output: protocol.truncate_output(output, CONFIG.max_observation_bytes)
        for name in TEXTS
        if name.startswith("limit_output_")
    },
}
NOT_OURS = {
    # Terminus sends keys with block=False, which never raises the TimeoutError that
    # would show this text: no Terminus 2 episode reaches it, so neither does ours.
    "timeout",
}


def test_every_recorded_text_is_checked() -> None:
    assert RECORD["harbor"] == "0.25.0"
    assert set(TEXTS) == set(OURS) | NOT_OURS


@pytest.mark.parametrize("name", sorted(OURS))
def test_text_is_byte_identical_to_harbor(name: str) -> None:
    recorded = TEXTS[name]
    assert OURS[name](**recorded["inputs"]) == recorded["text"]


def test_harness_defaults_are_the_values_terminus_writes() -> None:
    prompt = TEXTS["first_prompt"]["text"]
    assert "(defaults to 1.0 if not present)" in prompt and CONFIG.default_duration_s == 1.0
    assert "Never wait longer than 60 seconds" in prompt and CONFIG.max_duration_s == 60.0
