"""A task's own faults are refused at load time, naming the task, the file and the field
(issue 15): bad numbers, oversized instructions, symlinks out of the task directory."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from rsr_async.errors import TaskError
from rsr_async.tasks import load_dataset, load_task
from rsr_async.tasks.loader import MAX_INSTRUCTION_BYTES


@pytest.fixture
def harbor(tmp_path: Path, fixtures: Path) -> Path:
    root = tmp_path / "tasks" / "full-harbor"
    shutil.copytree(fixtures / "harbor/full-harbor", root)
    return root


@pytest.fixture
def legacy(tmp_path: Path, fixtures: Path) -> Path:
    root = tmp_path / "tasks" / "legacy-hello"
    shutil.copytree(fixtures / "legacy/legacy-hello", root)
    return root


def _set_toml(root: Path, table: str, key: str, value: str) -> None:
    """Replace (or add) ``key`` in ``[table]`` of task.toml."""
    file = root / "task.toml"
    text = file.read_text()
    pattern = re.compile(rf"(\[{table}\][^\[]*?)^{key} = .*$", re.M | re.S)
    if pattern.search(text):
        text = pattern.sub(lambda m: f"{m.group(1)}{key} = {value}", text, count=1)
    else:
        text = text.replace(f"[{table}]\n", f"[{table}]\n{key} = {value}\n", 1)
    file.write_text(text)


# -- numbers ---------------------------------------------------------------------------

BAD_NUMBERS = [
    (table, key, value)
    for table, key in [
        ("agent", "timeout_sec"),
        ("verifier", "timeout_sec"),
        ("environment", "build_timeout_sec"),
        ("environment", "cpus"),
        ("environment", "memory_mb"),
        ("environment", "storage_mb"),
    ]
    for value in ("nan", "inf", "-inf", "0", "-1", "true", '"soon"')
]


@pytest.mark.parametrize(("table", "key", "value"), BAD_NUMBERS)
def test_bad_numbers_in_task_toml_are_refused(harbor: Path, table: str, key: str, value: str) -> None:
    _set_toml(harbor, table, key, value)
    with pytest.raises(TaskError, match=rf"{table}\.{key}: expected (a number|an integer) > 0") as info:
        load_task(harbor)
    assert info.value.task == "full-harbor" and info.value.path == str(harbor / "task.toml")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("memory", ['"infG"', '"nanG"', '"0"', '"0.1k"', '"-2G"'])
def test_bad_memory_sizes_are_refused(harbor: Path, memory: str) -> None:
    text = (harbor / "task.toml").read_text().replace("memory_mb = 512", f"memory = {memory}")
    (harbor / "task.toml").write_text(text)
    with pytest.raises(TaskError, match=r"environment\.memory: expected a size"):
        load_task(harbor)


@pytest.mark.parametrize("key", ["max_agent_timeout_sec", "max_test_timeout_sec"])
@pytest.mark.parametrize("value", [".nan", ".inf", "0", "-5"])
def test_bad_numbers_in_task_yaml_are_refused(legacy: Path, key: str, value: str) -> None:
    file = legacy / "task.yaml"
    file.write_text(re.sub(rf"^{key}: .*$", f"{key}: {value}", file.read_text(), flags=re.M))
    with pytest.raises(TaskError, match=rf"task\.yaml\.{key}: expected a number > 0"):
        load_task(legacy)


# -- instruction size ------------------------------------------------------------------


def test_an_instruction_at_the_limit_loads(harbor: Path) -> None:
    (harbor / "instruction.md").write_text("x" * MAX_INSTRUCTION_BYTES)
    assert len(load_task(harbor).instruction) == MAX_INSTRUCTION_BYTES


@pytest.mark.parametrize("size", [MAX_INSTRUCTION_BYTES + 1, 50 * 1024 * 1024])
def test_an_oversized_instruction_is_the_tasks_fault(harbor: Path, size: int) -> None:
    with (harbor / "instruction.md").open("wb") as f:  # sparse: refused by size, never read
        f.write(b"Do it.")
        f.truncate(size)
    with pytest.raises(TaskError, match=rf"instruction\.md is {size} bytes, over the {MAX_INSTRUCTION_BYTES}-byte"):
        load_task(harbor)


def test_an_oversized_legacy_instruction_is_refused(legacy: Path) -> None:
    file = legacy / "task.yaml"
    long = "y" * (MAX_INSTRUCTION_BYTES + 1)
    file.write_text(file.read_text().replace('Create /app/hello.txt containing "hello".', long))
    with pytest.raises(TaskError, match="over the .*-byte limit for an instruction"):
        load_task(legacy)


def test_an_oversized_task_is_skipped_as_malformed_and_the_rest_load(harbor: Path, legacy: Path) -> None:
    (harbor / "instruction.md").write_bytes(b"a" * (MAX_INSTRUCTION_BYTES + 10))
    dataset = load_dataset([harbor.parent])
    assert [t.name for t in dataset] == ["legacy-hello"]
    assert len(dataset.errors) == 1 and "full-harbor" in str(dataset.errors[0])


# -- symlinks --------------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "host" / "hostname"
    secret.parent.mkdir()
    secret.write_text("host-secret-value\n")
    return secret


LINKS = [
    "instruction.md",
    "task.toml",
    "tests/test.sh",
    "tests/data.txt",
    "solution/solve.sh",
    "environment/Dockerfile",
    "environment/context-file",
]


@pytest.mark.parametrize("rel", LINKS)
def test_a_symlink_out_of_the_task_is_refused(harbor: Path, outside: Path, rel: str) -> None:
    link = harbor / rel
    if link.exists():
        # keep the original's content outside, so only the link is wrong
        outside.write_bytes(link.read_bytes())
        link.unlink()
    link.symlink_to(outside)
    with pytest.raises(TaskError, match=rf"{re.escape(rel)} is a symlink to {re.escape(str(outside))}, outside") as info:
        load_task(harbor)
    assert info.value.path == str(link)


def test_a_symlink_to_etc_hostname_never_reaches_the_prompt(harbor: Path) -> None:
    (harbor / "instruction.md").unlink()
    (harbor / "instruction.md").symlink_to("/etc/hostname")
    dataset = load_dataset([harbor.parent])
    assert dataset.tasks == []
    assert "instruction.md is a symlink to /etc/hostname" in str(dataset.errors[0])


def test_a_symlinked_directory_out_of_the_task_is_refused(harbor: Path, outside: Path) -> None:
    (harbor / "environment" / "vendor").symlink_to(outside.parent, target_is_directory=True)
    with pytest.raises(TaskError, match=r"environment/vendor is a symlink to .*, outside"):
        load_task(harbor)


def test_relative_escapes_and_loops_are_refused(harbor: Path) -> None:
    (harbor / "tests" / "up").symlink_to("../../..")
    with pytest.raises(TaskError, match=r"tests/up is a symlink to .*, outside"):
        load_task(harbor)
    (harbor / "tests" / "up").unlink()
    os.symlink("loop", harbor / "tests" / "loop")
    with pytest.raises(TaskError, match=r"tests/loop is a symlink"):
        load_task(harbor)


def test_symlinks_inside_the_task_are_fine(harbor: Path) -> None:
    (harbor / "tests" / "again.sh").symlink_to("test.sh")
    (harbor / "environment" / "solution").symlink_to("../solution", target_is_directory=True)
    assert load_task(harbor).name == "full-harbor"


def test_a_task_dir_reached_through_a_symlink_still_loads(harbor: Path, tmp_path: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(harbor, target_is_directory=True)
    assert load_task(alias).name == "full-harbor"
