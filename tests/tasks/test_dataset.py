from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from rsr_async.sandbox.compose import task_compose
from rsr_async.tasks import BUNDLED_SUITE, load_dataset, load_task


def test_directory_is_searched_recursively_and_sorted(fixtures: Path) -> None:
    data = load_dataset([fixtures / "harbor"])
    assert [t.name for t in data.tasks] == ["full-harbor", "minimal-harbor", "org-named"]
    assert data.errors == []


def test_broken_tasks_are_reported_and_the_rest_loads(fixtures: Path) -> None:
    data = load_dataset([fixtures])
    assert [t.name for t in data.tasks] == [
        "full-harbor", "legacy-descriptions", "legacy-hello", "legacy-swebench", "minimal-harbor",
        "org-named", "tb-keystrokes", "two-steps",
    ]
    assert sorted(e.task or "" for e in data.errors) == [
        "bad-field", "bad-org-name", "bad-toml", "bad-yaml", "legacy-bad-parser", "legacy-no-run-tests",
        "no-instruction", "no-tests",
    ]
    assert all(e.path and Path(e.path).exists() or "missing" in str(e) for e in data.errors)


def test_list_file_with_comments_and_relative_paths(fixtures: Path) -> None:
    data = load_dataset([fixtures / "tasks.list"])
    assert [t.name for t in data.tasks] == ["full-harbor", "legacy-descriptions", "legacy-hello", "legacy-swebench"]
    assert data.errors == []


def test_several_sources_and_the_same_task_twice(fixtures: Path) -> None:
    data = load_dataset([fixtures / "legacy", fixtures / "tasks.list", str(fixtures / "harbor/full-harbor")])
    assert [t.name for t in data.tasks] == ["full-harbor", "legacy-descriptions", "legacy-hello", "legacy-swebench"]
    assert data.errors == []


def test_duplicate_names_are_reported(tmp_path: Path, fixtures: Path) -> None:
    shutil.copytree(fixtures / "harbor/full-harbor", tmp_path / "a/one")
    shutil.copytree(fixtures / "harbor/full-harbor", tmp_path / "b/two")  # same [task].name
    data = load_dataset([tmp_path])
    assert [t.path for t in data.tasks] == [str(tmp_path / "a/one")]
    assert len(data.errors) == 1 and "duplicate task name" in str(data.errors[0])
    assert data.errors[0].path == str(tmp_path / "b/two")


def test_missing_sources_and_bad_list_lines(tmp_path: Path, fixtures: Path) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text(f"{fixtures / 'harbor/full-harbor'}\nno/such/dir\n")
    data = load_dataset([listing, tmp_path / "absent", tmp_path / "empty"])
    assert [t.name for t in data.tasks] == ["full-harbor"]
    messages = [str(e) for e in data.errors]
    assert any("line 2" in m and "no/such/dir" in m for m in messages)
    line2 = next(m for m in messages if "line 2" in m)
    assert "resolved against the list file's folder" in line2
    assert f"looked for {tmp_path / 'no/such/dir'}" in line2 and "\n" not in line2
    assert any("does not exist" in m and "absent" in m for m in messages)


def test_default_is_the_bundled_suite() -> None:
    data = load_dataset([])
    assert data.errors == []
    assert len(data.tasks) >= 30
    assert {t.path for t in data.tasks} == {str(p) for p in BUNDLED_SUITE.iterdir() if p.is_dir()}


def test_bundled_suite_meets_the_brief() -> None:
    tasks = load_dataset([BUNDLED_SUITE]).tasks
    # every file a task needs is in git (the repository ignores *.c, for instance)
    listed = subprocess.run(["git", "ls-files", "--others", "--ignored", "--exclude-standard", str(BUNDLED_SUITE)],
                            capture_output=True, text=True, check=True, cwd=BUNDLED_SUITE).stdout.split()
    assert [p for p in listed if "__pycache__" not in p] == []
    domains = {t.category for t in tasks}
    assert len(domains) >= 8, domains
    assert {t.difficulty for t in tasks} == {"easy", "medium", "hard"}
    partial = 0
    shapes: set[str] = set()
    for task in tasks:
        root = Path(task.path)
        solutions = [s.solution_path for s in task.steps] or [task.solution_path]
        assert all(solutions), task.name
        if task.steps:
            shapes.add("harbor multi-step")
        spec = task_compose(task)
        if task.format == "terminal-bench":
            # terminal-bench's own client/server shape, with a healthcheck to wait on
            assert spec is not None and spec.agent_service == "client"
            assert any(d.condition == "service_healthy" for d in spec.main.depends_on)
            shapes.add("terminal-bench client/server")
        else:
            assert task.format == "harbor" and task.workdir == "/app"
            if spec is not None and "${CONTEXT_DIR}" in Path(spec.path).read_text():
                shapes.add("harbor base compose")
        for file in root.rglob("Dockerfile"):  # every image builds offline from the base
            dockerfile = [line for line in file.read_text().splitlines() if not line.startswith("#")]
            assert dockerfile[0].startswith("ARG BASE_IMAGE"), file
            assert dockerfile[1] == "FROM ${BASE_IMAGE}" or dockerfile[1].startswith("FROM ${BASE_IMAGE} AS "), file
            assert "RUN apt" not in "\n".join(dockerfile) and "pip install" not in "\n".join(dockerfile)
        test_sh = root / "tests/test.sh"
        partial += test_sh.is_file() and "PARTIAL = True" in test_sh.read_text()  # reward.json
        instructions = [s.instruction for s in task.steps] or [task.instruction]
        for solution_path, instruction in zip(solutions, instructions, strict=True):
            assert solution_path is not None
            shebang, _, solution = Path(solution_path).read_text().partition("\n")
            assert shebang == "#!/bin/bash"
            # solve.sh is also typed into an interactive shell by the scripted stand-in model
            assert "\t" not in solution and "\nexit" not in solution and "set -e" not in solution
            assert "!" not in solution or solution.startswith("set +H\n")
            # the instruction must not hand over the solution's commands (quoting the command
            # that shows the problem, in backticks, is fine)
            quoted = " ".join(re.findall(r"`([^`]+)`", instruction))
            for line in solution.splitlines():
                if len(line.strip()) > 30 and line.strip() not in quoted:
                    assert line.strip() not in instruction, (task.name, line)
    assert partial >= 5
    assert shapes == {"terminal-bench client/server", "harbor base compose", "harbor multi-step"}


def test_loading_is_fast() -> None:
    import time

    started = time.perf_counter()
    for path in BUNDLED_SUITE.iterdir():
        if path.is_dir():
            load_task(path)
    assert time.perf_counter() - started < 1.0


def test_same_short_name_under_two_orgs_is_a_duplicate(tmp_path: Path, fixtures: Path) -> None:
    shutil.copytree(fixtures / "harbor/org-named", tmp_path / "a")
    other = shutil.copytree(fixtures / "harbor/org-named", tmp_path / "b")
    toml = other / "task.toml"
    toml.write_text(toml.read_text().replace('"acme/org-named"', '"other/org-named"'))
    data = load_dataset([tmp_path])
    assert [t.qualified_name for t in data.tasks] == ["acme/org-named"]
    assert len(data.errors) == 1
    assert "duplicate task name (acme/org-named and other/org-named)" in str(data.errors[0])
