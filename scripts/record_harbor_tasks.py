"""Record what Harbor 0.25.0's own task loader makes of our task directories.

Runs on demand, not in CI: Harbor needs Python >= 3.12.

    python3.12 -m venv /tmp/harbor312 && /tmp/harbor312/bin/pip install harbor==0.25.0
    /tmp/harbor312/bin/python scripts/record_harbor_tasks.py

Every task of the bundled suite and every Harbor-format fixture under
``tests/tasks/fixtures/`` is loaded with ``harbor.models.task.task.Task`` (the class a
Harbor trial loads a task with). ``tests/tasks/fixtures/harbor_tasks.json`` gets, per
directory (relative to the repository): either the error Harbor raised, or what it read
(name, short name, instruction, steps, the timeouts and resources of ``TaskConfig``).
``tests/tasks/test_harbor_parity.py`` compares our loader's view with it.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at import

from harbor.models.task.task import Task  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "tasks" / "fixtures" / "harbor_tasks.json"
SOURCES = [
    ROOT / "rsr_async" / "tasks" / "bundled",
    ROOT / "tests" / "tasks" / "fixtures" / "harbor",
    ROOT / "tests" / "tasks" / "fixtures" / "multistep",
    ROOT / "tests" / "tasks" / "fixtures" / "broken",
]


def _task_dirs() -> list[Path]:
    found = []
    for source in SOURCES:
        found += [p.parent for p in source.rglob("task.toml")]
    return sorted(found)


def _describe(exc: Exception) -> str:
    """One line, free of this machine's paths."""
    errors = getattr(exc, "errors", None)
    if callable(errors):  # pydantic's ValidationError: the field and the reason
        first = errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        text = f"{where}: {first['msg']}"
    else:
        text = str(exc).splitlines()[0]
    return f"{type(exc).__name__}: {text}".replace(f"{ROOT}/", "")


def _record(task_dir: Path) -> dict[str, Any]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            task = Task(task_dir)
        except Exception as exc:  # what Harbor refuses is part of the record
            return {"error": _describe(exc)}
    config = task.config
    return {
        "name": task.name,
        "short_name": task.short_name,
        "instruction": task.instruction,
        "steps": [
            {
                "name": step.name,
                "instruction": task.step_instruction(step.name),
                "agent_timeout_sec": step.agent.timeout_sec,
            }
            for step in config.steps or []
        ],
        "agent_timeout_sec": config.agent.timeout_sec,
        "verifier_timeout_sec": config.verifier.timeout_sec,
        "build_timeout_sec": config.environment.build_timeout_sec,
        "cpus": config.environment.cpus,
        "memory_mb": config.environment.memory_mb,
        "storage_mb": config.environment.storage_mb,
        "workdir": config.environment.workdir,
        "docker_image": config.environment.docker_image,
        "env": config.environment.env,
        "verifier_env": config.verifier.env,
        "metadata": config.metadata,
        "warnings": sorted({str(w.message) for w in caught}),
    }


def main() -> int:
    tasks = {task_dir.relative_to(ROOT).as_posix(): _record(task_dir) for task_dir in _task_dirs()}
    recording = {"harbor": version("harbor"), "python": sys.version.split()[0], "tasks": tasks}
    OUT.write_text(json.dumps(recording, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    refused = [name for name, row in tasks.items() if "error" in row]
    print(f"{len(tasks)} task directories, {len(refused)} refused by Harbor -> {OUT.relative_to(ROOT)}")
    for name in refused:
        print(f"  {name}: {tasks[name]['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
