"""The exploration classifier against a hand-labelled list, and the style record."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from rsr_async.analysis.style import classify_command, episode_style
from rsr_async.schema import Command, EpisodeResult, EpisodeStyle, JobKey, Message, Trajectory

FIXTURE = Path(__file__).parent / "fixtures" / "commands.tsv"


def _labelled() -> list[tuple[str, str]]:
    rows = []
    for line in FIXTURE.read_text("utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            label, keystrokes = line.split("\t", 1)
            rows.append((label, keystrokes.replace("\\n", "\n")))
    return rows


def test_the_fixture_is_big_enough_and_covers_every_label() -> None:
    rows = _labelled()
    assert len(rows) >= 100
    assert {label for label, _ in rows} == {"explore", "state", "act"}


@pytest.mark.parametrize(("label", "keystrokes"), _labelled())
def test_classifier_matches_the_hand_label(label: str, keystrokes: str) -> None:
    assert classify_command(keystrokes) == label


def _reply(done: bool, *keys: str) -> Message:
    return Message(
        role="assistant", content="{}", origin="model", task_complete=done,
        commands=tuple(Command(keystrokes=k) for k in keys),
    )


def test_style_counts_commands_shares_and_claims() -> None:
    messages = [
        _reply(False, "ls -la\n", "statem cur\n"),
        _reply(False, "cat a\n", "echo 1 > a\n"),
        _reply(True),
        _reply(True),  # claim 1, rejected: the episode went on
        Message(role="user", content="failed", origin="harness"),
        _reply(False, "make\n", ""),  # an empty keystroke batch (a pure wait) is no command
        _reply(True),
        _reply(True),  # claim 2, final
    ]
    style = episode_style(Trajectory(task="t", harness="rsrt", messages=messages))
    assert style == EpisodeStyle(
        model_turns=7, commands=5, exploration_share=2 / 5, state_share=1 / 5,
        claims=2, rejected_claim=True,
    )
    plain = episode_style(Trajectory(task="t", harness="terminus2", messages=messages[-2:]))
    assert (plain.claims, plain.rejected_claim, plain.commands) == (1, False, 0)


def test_an_episode_result_stored_before_style_existed_decodes_with_defaults() -> None:
    result = EpisodeResult(key=JobKey(stage="discover", task="t"), status="failed")
    raw = msgspec.json.decode(msgspec.json.encode(result))
    del raw["style"]
    old = msgspec.json.decode(msgspec.json.encode(raw), type=EpisodeResult)
    assert old.style == EpisodeStyle()
