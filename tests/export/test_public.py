"""The public conversation: what a deployed plain Terminus 2 model sees and says."""

from __future__ import annotations

from collections import Counter

import pytest

from rsr_async.export import (
    check_conversation,
    is_terminus_protocol,
    public_conversation,
    public_messages,
)
from rsr_async.harness import protocol
from rsr_async.harness.protocol import render
from rsr_async.schema import Message, Trajectory
from tests.export import samples
from tests.export.samples import SECRETS, Builder


def _roles(messages: list[dict[str, str]]) -> str:
    return "".join(m["role"][0] for m in messages)


def test_terminus2_keeps_its_own_protocol_and_drops_only_the_runbook() -> None:
    trajectory = samples.terminus2_rewrite()
    stats: Counter[str] = Counter()
    conversation = public_conversation(trajectory, stats)
    recorded = [m for m in trajectory.messages if m.origin != "private"]
    assert [(m.role, m.content) for m in conversation] == [(m.role, m.content) for m in recorded]
    assert any(m.origin == "harness" and "parsing errors" in m.content for m in recorded)
    assert stats == Counter(private=1)
    # the assistant content is the raw reply, byte for byte, even when it is not JSON
    assert [m.content for m in conversation if m.role == "assistant"] == [
        m.content for m in trajectory.messages if m.origin == "model"
    ]
    assert all(m.source is not None for m in conversation if m.role == "assistant")


def test_terminus2_handoff_and_output_limit_stay_in_order() -> None:
    trajectory = samples.terminus2_handoff()
    messages = public_messages(trajectory)
    assert messages == [{"role": m.role, "content": m.content} for m in trajectory.messages]
    assert _roles(messages) == "ua" * 8


def test_rsrt_failed_message_goes_and_the_conversation_still_alternates() -> None:
    trajectory = samples.rsrt_success()
    stats: Counter[str] = Counter()
    messages = [m["content"] for m in public_messages(trajectory)]
    public_conversation(trajectory, stats)
    recorded = trajectory.messages
    failed = next(i for i, m in enumerate(recorded) if samples.FAILED_MARK in m.content)
    # the reply before "failed" (a confirmation the verifier rejected) is the earlier of
    # two adjacent replies once "failed" is gone: the later one, which the next prompt
    # answers, is kept
    expected = [m.content for i, m in enumerate(recorded) if i not in (failed - 1, failed)]
    assert messages == expected
    assert stats == Counter(harness=1, dropped_assistant=1)
    # Terminus 2's own confirmation and parse-error prompts survive under RSRT
    assert sum("Are you sure you want to mark the task as complete?" in m for m in messages) == 2
    assert any(m.startswith("Previous response had parsing errors:") for m in messages)


def test_statem_turns_and_their_output_are_dropped() -> None:
    trajectory = samples.statem_success()
    stats: Counter[str] = Counter()
    conversation = public_conversation(trajectory, stats)
    text = "\n".join(m.content for m in conversation)
    assert samples.STATEM_MARK not in text and "statem" not in text
    assert _roles([{"role": m.role} for m in conversation]) == "uauaua"  # type: ignore[misc]
    # the statem-only turn, its output, the state prompt, the mixed turn and its output
    assert stats == Counter(statem=5)
    kept_replies = [m.content for m in conversation if m.role == "assistant"]
    plain = [
        m.content for m in trajectory.messages if m.origin == "model" and "statem" not in m.content
    ]
    assert kept_replies == plain


def test_a_statem_line_the_harness_did_not_catch_is_shell_work_and_stays() -> None:
    # Two lines in one batch went to bash (is_statem_command is False): its turn and
    # bash's answer are what a plain Terminus 2 model would have seen, so they stay.
    b = Builder("delta", "statem")
    b.add("task", samples.task_prompt("delta"))
    b.model("two at once", "statem cur\nls\n")
    b.env("bash: statem: command not found\nnotes.txt")
    b.model("next", "statem next\n")
    b.env("screen")
    b.add("harness", f"{samples.STATEM_MARK} allowed moves")
    b.model("done", "cat notes.txt\n", complete=True)
    stats: Counter[str] = Counter()
    conversation = public_conversation(b.trajectory, stats)
    assert stats == Counter(statem=3)  # the caught turn, its output and its harness note
    assert [m.role for m in conversation] == ["user", "assistant", "user", "assistant"]
    assert "command not found" in conversation[2].content
    assert samples.STATEM_MARK not in "\n".join(m.content for m in conversation)


@pytest.mark.parametrize(
    "text",
    [
        render("confirm", terminal_state="New Terminal Output:\n\n$ ls\nfile\n"),
        render(
            "warnings",
            warnings="- Missing duration",
            observation=render("confirm", terminal_state="x"),
        ),
        render("parse_error", feedback="ERROR: No valid JSON found in response"),
        render("output_limit", limit="the maximum output length"),
        render("output_limit", limit="123 tokens")
        + render("output_limit_warnings", warnings="- Extra text"),
        render("handoff_summary", instruction="Make it so\nwith two lines"),
        render("handoff_questions", instruction="i", summary="s\n\ns", screen="$ \n"),
        render("handoff_answers", questions="1. why?"),
        render("handoff_resume", answers="because"),
        render("handoff_resume", answers="because")
        + "\n\n"
        + render("observation_new", output="x"),
    ],
)
def test_terminus_protocol_texts_are_recognised(text: str) -> None:
    assert is_terminus_protocol(text)


def test_terminus_protocol_messages_from_the_real_builders_are_recognised() -> None:
    bad = protocol.parse_reply("not json at all")
    assert bad.error
    assert is_terminus_protocol(protocol.parse_error_message(bad))
    warned = protocol.parse_reply(
        '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n"}]}'
    )
    assert warned.warnings and not warned.error
    assert is_terminus_protocol(protocol.confirm_message("New Terminal Output:\n\n$ ls"))
    assert is_terminus_protocol(protocol.output_limit_message('{"analysis": "cut', default_duration=1.0))
    assert is_terminus_protocol(protocol.output_limit_message('{"analysis": "cut', 4096))


@pytest.mark.parametrize(
    "text",
    [
        f"{samples.FAILED_MARK}: the task is not solved yet. Keep working.",
        "Your solution failed the hidden tests. Keep working.",
        "state: explore\nallowed: build, verify",
        "Note: " + render("confirm", terminal_state="x"),  # a wrapper around a protocol text
        render("confirm", terminal_state="x") + "\nAlso, it failed.",
        "",
    ],
)
def test_other_harness_text_is_not_terminus_protocol(text: str) -> None:
    assert not is_terminus_protocol(text)


def test_repair_merges_users_trims_the_ends_and_can_leave_nothing() -> None:
    b = Builder("t", "rsrt")
    b.model("stray reply before the task", "ls\n")
    b.add("task", "the task")
    b.add("harness", f"{samples.FAILED_MARK} dropped")
    b.add("env", "an observation")
    b.model("answer", "pwd\n")
    b.add("env", "trailing observation the model never answered")
    stats: Counter[str] = Counter()
    messages = [
        {"role": m.role, "content": m.content} for m in public_conversation(b.trajectory, stats)
    ]
    assert messages == [
        {"role": "user", "content": "the task\n\nan observation"},
        {"role": "assistant", "content": b.trajectory.messages[4].content},
    ]
    assert stats == Counter(harness=1, merged_user=1, trimmed=2)
    only_task = Trajectory(
        task="t", harness="terminus2", messages=[Message(role="user", content="x", origin="task")]
    )
    assert public_messages(only_task) == []


def test_every_sample_is_in_trl_conversational_form_without_secrets() -> None:
    for record in samples.suite():
        messages = public_messages(record.trajectory)
        check_conversation(messages)
        assert not any(secret in m["content"] for m in messages for secret in SECRETS)


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [{"role": "assistant", "content": "a"}],
        [{"role": "user", "content": "u"}],
        [
            {"role": "user", "content": "u"},
            {"role": "user", "content": "v"},
            {"role": "assistant", "content": "a"},
        ],
        [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"},
            {"role": "system", "content": "s"},
        ],
        [{"role": "system", "content": "s"}],
        [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a", "name": "x"}],
        [{"role": "tool", "content": "u"}, {"role": "assistant", "content": "a"}],
    ],
)
def test_check_conversation_rejects_what_trl_would_not_take(messages: list[dict[str, str]]) -> None:
    with pytest.raises(ValueError):
        check_conversation(messages)


def test_check_conversation_accepts_an_optional_system_message() -> None:
    check_conversation(
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"},
        ]
    )
