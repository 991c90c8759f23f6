"""Task fields far past any real value are refused at load, naming the task, file and
key (issue 30): ``memory_mb = 99999999999``, ``storage_mb = 1e300`` or ``timeout_sec =
1e300`` used to load and fail (or hang) only when a container started or a deadline
overflowed; ``cpus = 1e9`` failed only at container start."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rsr_async.errors import TaskError
from rsr_async.tasks import load_task
from rsr_async.tasks.loader import MAX_CPUS, MAX_MEMORY_MB, MAX_STORAGE_MB, MAX_TIMEOUT_S

from .test_loader_faults import _set_toml as _set


@pytest.fixture
def harbor(tmp_path: Path, fixtures: Path) -> Path:
    root = tmp_path / "tasks" / "full-harbor"
    shutil.copytree(fixtures / "harbor/full-harbor", root)
    return root


TOO_BIG = [
    ("environment", "memory_mb", "99999999999", MAX_MEMORY_MB),
    ("environment", "storage_mb", "1e300", MAX_STORAGE_MB),
    ("environment", "cpus", "1e9", MAX_CPUS),
    ("agent", "timeout_sec", "1e300", MAX_TIMEOUT_S),
    ("verifier", "timeout_sec", "1e300", MAX_TIMEOUT_S),
    ("environment", "build_timeout_sec", "1e300", MAX_TIMEOUT_S),
]


@pytest.mark.parametrize(("table", "key", "value", "top"), TOO_BIG)
def test_a_field_past_its_maximum_is_refused(harbor: Path, table: str, key: str, value: str, top: float) -> None:
    _set(harbor, table, key, value)
    with pytest.raises(TaskError, match=rf"{table}\.{key}: expected (a number|an integer) > 0 and at most "
                                        rf"{int(top)}, got ") as info:
        load_task(harbor)
    assert info.value.task == "full-harbor" and info.value.path == str(harbor / "task.toml")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("table", "key", "value", "top"), TOO_BIG)
def test_a_field_at_its_maximum_loads(harbor: Path, table: str, key: str, value: str, top: float) -> None:
    _set(harbor, table, key, str(int(top)))
    task = load_task(harbor)
    got = {"memory_mb": task.memory_mb, "storage_mb": task.storage_mb, "cpus": task.cpus}.get(key)
    if key.endswith("timeout_sec"):
        got = {"agent": task.agent_timeout_s, "verifier": task.verifier_timeout_s}.get(table, task.build_timeout_s)
    assert got == top


def test_a_memory_size_past_the_maximum_is_refused(harbor: Path) -> None:
    text = (harbor / "task.toml").read_text().replace("memory_mb = 512", 'memory = "2000T"')
    (harbor / "task.toml").write_text(text)
    with pytest.raises(TaskError, match=rf"environment\.memory: expected a size from 1M to {MAX_MEMORY_MB}M"):
        load_task(harbor)
