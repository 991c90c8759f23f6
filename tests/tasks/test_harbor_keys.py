"""The one table of Harbor 0.26 task keys: checked against the keys recorded from Harbor's
own pydantic models (scripts/record_harbor_task_keys.py), enforced at load by name, and
printed in README.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsr_async.errors import TaskError
from rsr_async.tasks.harbor_keys import HARBOR_TASK_KEYS, _lookup, markdown_table
from rsr_async.tasks.loader import load_task

ROOT = Path(__file__).resolve().parents[2]
RECORDED = json.loads((ROOT / "tests" / "tasks" / "fixtures" / "harbor_task_keys.json").read_text())


def test_the_recording_is_harbor_0_26_0() -> None:
    assert RECORDED["harbor"] == "0.26.0"
    assert RECORDED["unknown_key_policy"] == "ignored"  # why we refuse them instead


@pytest.mark.parametrize("key", sorted(RECORDED["keys"]))
def test_every_harbor_key_has_a_rule(key: str) -> None:
    assert _lookup(key) is not None, f"{key}: Harbor 0.26 has it, HARBOR_TASK_KEYS does not"


def test_every_rule_names_a_harbor_key_or_alias() -> None:
    known = set(RECORDED["keys"]) | set(RECORDED["aliases"])
    assert sorted(set(HARBOR_TASK_KEYS) - known) == []


def test_the_verifier_and_step_keys_are_honoured() -> None:
    for key in ("verifier.user", "verifier.environment_mode", "verifier.collect", "artifacts"):
        assert HARBOR_TASK_KEYS[key].status == "supported", key
    assert HARBOR_TASK_KEYS["verifier.environment"].status == "refused"  # a verifier image of its own
    for key in ("steps[].name", "steps[].min_reward", "steps[].verifier.env", "multi_step_reward_strategy"):
        assert HARBOR_TASK_KEYS[key].status == "supported", key
    assert HARBOR_TASK_KEYS["steps"].status == "difference"  # not rewritten (README)


def task_dir(tmp_path: Path, toml: str) -> Path:
    root = tmp_path / "keys"
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text(toml)
    (root / "instruction.md").write_text("Do it.\n")
    (root / "tests" / "test.sh").write_text("#!/bin/bash\n")
    (root / "environment" / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n")
    return root


REFUSED = {
    "mcp": ('[[environment.mcp_servers]]\nname = "fs"\nurl = "http://x"\n',
            "task.toml [environment.mcp_servers]: refused: MCP servers"),
    "environment_mode": ('[verifier]\nenvironment_mode = "isolated"\n',
                         "task.toml [verifier.environment_mode]: 'isolated' is not supported"),
    "verifier environment": ('[verifier.environment]\ndocker_image = "x"\n',
                             "task.toml [verifier.environment]: refused: a verifier environment"),
    "sidecar collect": ('[[verifier.collect]]\ncommand = "true"\nservice = "db"\n',
                        "[verifier.collect[].service]: 'db' is not supported"),
    "artifact exclude": ('artifacts = [{ source = "/app", exclude = ["*.o"] }]\n', "[artifacts[].exclude]: refused"),
    "unknown": ('[agent]\ntimout_sec = 5\n', "task.toml [agent.timout_sec]: not a Harbor 0.26 task key"),
    "unknown top": ('[extras]\nx = 1\n', "task.toml [extras]: not a Harbor 0.26 task key"),
    "windows": ('[environment]\nos = "windows"\n', "[environment.os]: 'windows' is not supported"),
    "allowlist": ('[environment]\nnetwork_mode = "allowlist"\n', "[environment.network_mode]: 'allowlist'"),
    "gpus": ('[environment]\ngpus = 1\n', "[environment.gpus]: 1 is not supported"),
    "healthcheck": ('[environment.healthcheck]\ncommand = "true"\n', "[environment.healthcheck]: refused"),
    "solution env": ('[solution]\nenv = { A = "1" }\n', "[solution.env]: refused"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_keys_are_refused_at_load_by_name(tmp_path: Path, case: str) -> None:
    toml, expected = REFUSED[case]
    with pytest.raises(TaskError) as caught:
        load_task(task_dir(tmp_path, toml))
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_supported_keys_are_honoured(tmp_path: Path) -> None:
    task = load_task(task_dir(tmp_path, """\
schema_version = "1.4"
source = "https://example.org/suite"
[task]
name = "org/keys"
version = "2.0"
keywords = ["a", "b"]
authors = [{ name = "Ann", email = "ann@example.org" }]
[metadata]
anything = { goes = true }
[environment]
os = "linux"
gpus = 0
network_mode = "public"
storage = "5G"
[verifier.env]
ANY_NAME = "1"
"""))
    assert task.allow_internet is True
    assert task.storage_mb == 5120
    assert task.metadata["package_version"] == "2.0"
    assert task.metadata["keywords"] == ["a", "b"]
    assert task.metadata["authors"] == [{"name": "Ann", "email": "ann@example.org"}]
    assert task.metadata["source"] == "https://example.org/suite"
    assert task.verifier_env == {"ANY_NAME": "1"}


def test_no_network_mode_wins_over_allow_internet(tmp_path: Path) -> None:
    task = load_task(task_dir(tmp_path, '[environment]\nallow_internet = true\nnetwork_mode = "no-network"\n'))
    assert task.allow_internet is False


def test_the_readme_prints_the_table() -> None:
    assert markdown_table() in (ROOT / "README.md").read_text()
