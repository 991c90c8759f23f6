"""The critic: deterministic rules on a real bundled task, then the judge's prompt and reply."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsr_async.errors import ReplyFormatError
from rsr_async.llm.scripted import ROLE_CRITIC
from rsr_async.rsr.critic import judge_messages, parse_judgement, reference_files, rule_checks
from rsr_async.schema import Command, Message, Task, Trajectory
from rsr_async.tasks import BUNDLED_SUITE, load_task

TASK = load_task(BUNDLED_SUITE / "fix-app-config")
INI = (Path(TASK.path) / "environment" / "app" / "conf" / "app.ini").read_text()
OVERRIDES = (Path(TASK.path) / "environment" / "app" / "conf" / "overrides.ini").read_text()


def _model(turn: int, *keys: str) -> Message:
    return Message(role="assistant", origin="model", turn=turn, content="{}",
                   commands=tuple(Command(keystrokes=k) for k in keys))


def _env(turn: int, text: str) -> Message:
    return Message(role="user", origin="env", turn=turn, content=f"New Terminal Output:\n{text}")


def source(extra_output: str = "") -> Trajectory:
    """How a model solved fix-app-config: look, read the config, fix it, check."""
    return Trajectory(task=TASK.name, harness="terminus2", messages=[
        Message(role="user", origin="task", content=f"Task Description:\n{TASK.instruction}\n\n"
                "Current terminal state:\nroot@box:/app# "),
        _model(0, "python3 /app/server.py --check\n", "ls -R /app\n"),
        _env(1, "config error: port 80 is privileged\n/app:\nconf  plugins  server.py\n"
             "/app/conf:\napp.ini  overrides.ini\n/app/plugins:\naudit.py  metrics.py  rate_limit.py\n"
             + extra_output),
        _model(1, "cat /app/conf/app.ini /app/conf/overrides.ini\n"),
        _env(2, INI + OVERRIDES),
        _model(2, "sed -i 's/^port = 80$/port = 8080/; s/^level = Info$/level = INFO/; "
               "s/^max_mb = 1024$/max_mb = 256/' /app/conf/overrides.ini\n",
               "sed -i 's/ratelimit$/rate_limit/' /app/conf/app.ini\n",
               "python3 /app/server.py --check && echo token=7f3a9c2e1b\n"),
        _env(3, "config ok\ntoken=7f3a9c2e1b\n"),
        _model(3),
        Message(role="user", origin="harness", turn=4, content="Are you sure? jq-magic-9000"),
    ])


CLEAN = """## Final-state requirements
- `python3 /app/server.py --check` passes, and only the settings that were wrong changed.

## Key milestones
1. Run the check and read its first complaint.
2. Read both configuration files; the overrides file wins over the main one.
3. For each complaint, find the setting responsible and the value range the code accepts.
4. Compare every plugin name in the configuration with the files in the plugins directory.

## How to check progress
- Rerun the check after each change; the complaint should move on or disappear.

## Recovery strategies
- If the check still fails on a setting you changed, read the code path that validates it.

## Common pitfalls
- Do not edit the code, and do not touch settings that are already valid.
- Case matters for some values.
"""


def test_a_clean_runbook_passes_every_rule() -> None:
    assert rule_checks(CLEAN, task=TASK, source=source()) == []


def test_a_runbook_quoting_the_hidden_test_is_rejected_by_ngram_overlap() -> None:
    tests = (Path(TASK.tests_dir) / "test.sh").read_text()
    quoted = tests[tests.index("@check\ndef valid_settings_kept"):tests.index("@check\ndef wrong_settings")]
    runbook = CLEAN.replace("- Case matters for some values.", "- The grader runs:\n```python\n"
                            f"{quoted}```")
    reasons = rule_checks(runbook, task=TASK, source=source())
    overlap = [r for r in reasons if r.startswith("rule:ngram_overlap:")]
    assert len(overlap) == 1 and "of the runbook's 8-grams appear in tests/test.sh" in overlap[0]
    share = int(overlap[0].split(": ")[1].split("%")[0])
    assert 20 < share < 100
    # The same text passes under a threshold above its share.
    assert not any(r.startswith("rule:ngram_overlap") for r in
                   rule_checks(runbook, task=TASK, source=source(), overlap_threshold=0.95))


def test_values_from_the_hidden_tests_and_from_the_sources_work_are_rejected() -> None:
    # A value only the hidden tests hold (the pristine copy the grader compares against).
    hidden = CLEAN + "- Do not change /root/.app-orig/server.py either.\n"
    [reason] = rule_checks(hidden, task=TASK, source=source())
    assert reason.startswith("rule:literal_value: '/root/.app-orig/server.py' comes from tests/test.sh")
    # A value the source typed without having seen it, and one its final output showed.
    produced = CLEAN + "- Rename the plugin to rate_limit; expect token=7f3a9c2e1b.\n"
    reasons = rule_checks(produced, task=TASK, source=source())
    assert any("'7f3a9c2e1b' comes from the source's commands (turn 2)" in r for r in reasons)
    assert len(reasons) == 1  # rate_limit is no value: too short to be a scanner candidate
    final = CLEAN + "- The check prints build 5512.7 when done.\n"
    assert rule_checks(final, task=TASK, source=source("")) == []
    src = source()
    src.messages[-3] = _env(3, "config ok\nbuild 5512.7\n")
    [reason] = rule_checks(final, task=TASK, source=src)
    assert "'5512.7' comes from the source's final output (turn 3)" in reason


def test_values_the_environment_showed_and_findable_paths_are_not_rule_leaks() -> None:
    # 8080 and 0.0.0.0 are in the config the source read: discoverable, the judge's call.
    # /app/conf/overrides.ini is a path whose parts `ls -R` showed: an interface.
    runbook = CLEAN + "- The bind address 0.0.0.0 and port 8080 live in /app/conf/overrides.ini.\n"
    assert rule_checks(runbook, task=TASK, source=source()) == []


def test_schema_rule_names_missing_and_empty_sections() -> None:
    broken = CLEAN.replace("## Recovery strategies\n- If the check still fails on a setting you "
                           "changed, read the code path that validates it.\n", "").replace(
        "- Rerun the check after each change; the complaint should move on or disappear.", "")
    assert rule_checks(broken, task=TASK, source=source()) == [
        "rule:schema: missing section(s): Recovery strategies",
        "rule:schema: empty section(s): How to check progress",
    ]
    [reason] = rule_checks("just prose", task=TASK, source=source())
    assert reason.startswith("rule:schema: planner reply has none of the runbook sections")


def test_tools_the_environment_reported_missing_are_rejected_when_run() -> None:
    src = source("bash: jq: command not found\nsh: 1: rg: not found\n")
    uses = CLEAN.replace("2. Read both", "2. Run `jq . /app/conf/app.json | less`, then\n"
                         "```\ncat /app/conf/app.ini | rg port\n```\nRead both")
    assert rule_checks(uses, task=TASK, source=src) == [
        "rule:absent_tool: the runbook runs 'jq', which the source's terminal reported as not "
        "found in this environment",
        "rule:absent_tool: the runbook runs 'rg', which the source's terminal reported as not "
        "found in this environment",
    ]
    # Naming a missing tool as a pitfall, or in prose, is advice, not a use.
    warns = CLEAN + "- `jq` is not installed: use python3 -m json.tool; jq and rg are absent.\n"
    assert rule_checks(warns, task=TASK, source=src) == []


def test_reference_files_cover_solution_and_tests_of_harbor_and_legacy_layouts(tmp_path: Path) -> None:
    assert [name for name, _ in reference_files(TASK)] == ["solution/solve.sh", "tests/test.sh"]
    legacy = tmp_path / "legacy"
    (legacy / "tests").mkdir(parents=True)
    (legacy / "solution.sh").write_text("echo the answer is 4242\n")
    (legacy / "tests" / "test_outputs.py").write_text("assert out == 4242\n")
    (legacy / "tests" / "blob.bin").write_bytes(b"\0\1\2")
    task = Task(name="legacy", path=str(legacy), instruction="Print it.", format="terminal-bench",
                tests_dir=str(legacy / "tests"), solution_path=str(legacy / "solution.sh"))
    assert [name for name, _ in reference_files(task)] == ["tests/test_outputs.py", "solution.sh"]
    empty = Trajectory(task="legacy", harness="terminus2")
    [reason] = rule_checks(CLEAN + "- It is 4242.\n", task=task, source=empty)
    assert reason.startswith("rule:literal_value: '4242' comes from tests/test_outputs.py")


def test_the_judge_sees_only_the_instruction_and_the_runbook() -> None:
    messages = judge_messages(instruction=TASK.instruction, runbook=CLEAN)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"].startswith(ROLE_CRITIC)
    assert '{"verdict": "accept" or "reject", "critique":' in messages[0]["content"]
    user = messages[1]["content"]
    assert TASK.instruction.strip() in user and CLEAN.strip() in user
    text = "\n".join(m["content"] for m in messages)
    for secret in ("rate_limit", "7f3a9c2e1b", "8080", "valid_settings_kept", "overrides.ini"):
        assert secret not in text


@pytest.mark.parametrize(("reply", "expected"), [
    ('{"verdict": "accept", "critique": ""}', (True, "")),
    ('Looking at it...\n```json\n{"Verdict": "REJECT", "critique": "states 8080",}\n```\n',
     (False, "states 8080")),
    ("<think>hmm {\"verdict\": \"accept\"}</think>{'verdict': 'Rejected.', 'reasons': "
     "['leaks the port', 'copies a test']}", (False, "- leaks the port\n- copies a test")),
    ('{"accepted": false, "feedback": "too vague"}', (False, "too vague")),
    ('{"note": "x"} then {"decision": "approve"}', (True, "")),
    ("**Verdict**: reject. The runbook names the answer.", (False, "The runbook names the answer.")),
])
def test_parse_judgement_tolerates_messy_replies(reply: str, expected: tuple[bool, str]) -> None:
    assert parse_judgement(reply) == expected


def test_parse_judgement_says_what_it_expected() -> None:
    with pytest.raises(ReplyFormatError, match=r'expected a JSON object \{"verdict".*starts \'I think'):
        parse_judgement("I think it is mostly fine.")
    with pytest.raises(ReplyFormatError, match="empty"):
        parse_judgement("   ")
    with pytest.raises(ReplyFormatError):
        parse_judgement('{"verdict": "maybe"}')
