from __future__ import annotations

from pathlib import Path

import pytest

from rsr_async.errors import TaskError
from rsr_async.tasks import detect_format, load_task
from rsr_async.tasks.loader import strip_canary


def test_harbor_every_field(fixtures: Path) -> None:
    task = load_task(fixtures / "harbor/full-harbor")
    assert task.name == "full-harbor"
    assert task.format == "harbor"
    assert task.instruction == "Write the word `done` to /app/out.txt."
    assert (task.category, task.tags, task.difficulty) == ("shell-scripting", ("bash", "files"), "easy")
    assert task.metadata == {
        "author_name": "fixture",
        "description": "A fixture that sets every field.",
        "version": "1.0",
    }
    assert (task.agent_timeout_s, task.verifier_timeout_s, task.build_timeout_s) == (120, 45, 90)
    assert (task.cpus, task.memory_mb, task.storage_mb) == (2.0, 512, 1024)
    assert task.allow_internet is False and task.workdir == "/app"
    assert task.env == {"GREETING": "hello"} and task.verifier_env == {"STRICT": "1"}
    root = fixtures / "harbor/full-harbor"
    assert task.environment_dir == str(root / "environment")
    assert task.tests_dir == str(root / "tests") and task.test_script == "test.sh"
    assert task.solution_path == str(root / "solution/solve.sh")


def test_harbor_defaults(fixtures: Path) -> None:
    task = load_task(fixtures / "harbor/nested/minimal-harbor")
    assert task.name == "minimal-harbor"  # no [task].name: the directory's
    assert (task.agent_timeout_s, task.verifier_timeout_s, task.build_timeout_s) == (600, 600, 600)
    assert task.memory_mb == 1024  # Harbor's older memory = "1G"
    assert task.category == "" and task.tags == () and task.solution_path is None
    assert task.workdir is None and task.env == {}


def test_legacy_terminal_bench(fixtures: Path) -> None:
    root = fixtures / "legacy/legacy-hello"
    task = load_task(root)
    assert task.format == "terminal-bench" and task.name == "legacy-hello"
    assert task.instruction == 'Create /app/hello.txt containing "hello".'
    assert (task.category, task.tags, task.difficulty) == ("file-operations", ("files", "legacy"), "medium")
    assert (task.agent_timeout_s, task.verifier_timeout_s) == (200, 30)
    assert task.metadata["parser_name"] == "pytest"
    assert task.environment_dir == str(root)
    assert task.test_script == "run-tests.sh" and task.tests_dir == str(root / "tests")
    assert task.solution_path == str(root / "solution.sh")


def test_legacy_descriptions_form_and_defaults(fixtures: Path) -> None:
    task = load_task(fixtures / "legacy/legacy-descriptions")
    assert task.instruction == "Old style instruction."
    assert (task.agent_timeout_s, task.verifier_timeout_s) == (360, 60)
    assert task.difficulty == "hard" and task.solution_path is None


@pytest.mark.parametrize(
    ("name", "file", "words"),
    [
        ("bad-toml", "task.toml", "invalid TOML"),
        ("no-instruction", "instruction.md", "missing instruction.md"),
        ("no-tests", "tests/test.sh", "missing tests/test.sh"),
        ("bad-field", "task.toml", "agent.timeout_sec: expected a number"),
        ("bad-yaml", "task.yaml", "invalid YAML"),
        ("legacy-no-run-tests", "run-tests.sh", "missing run-tests.sh"),
        ("bad-org-name", "task.toml", "task.name: expected \"org/name\""),
        ("legacy-bad-parser", "task.yaml", "parser_name: expected a terminal-bench parser"),
    ],
)
def test_broken_task_names_task_and_file(fixtures: Path, name: str, file: str, words: str) -> None:
    root = fixtures / "broken" / name
    with pytest.raises(TaskError) as info:
        load_task(root)
    assert info.value.task == name
    assert info.value.path == str(root / file)
    assert words in str(info.value)
    assert name in str(info.value) and str(root / file) in str(info.value)


def test_not_a_task(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="not a task directory"):
        detect_format(tmp_path)
    with pytest.raises(TaskError, match="not found"):
        load_task(tmp_path / "nope")


def test_empty_instruction(tmp_path: Path, fixtures: Path) -> None:
    import shutil

    shutil.copytree(fixtures / "harbor/full-harbor", tmp_path / "t")
    (tmp_path / "t/instruction.md").write_text("  \n")
    with pytest.raises(TaskError, match="instruction.md is empty"):
        load_task(tmp_path / "t")


def test_harbor_org_name_and_canary(fixtures: Path) -> None:
    task = load_task(fixtures / "harbor/org-named")
    assert (task.name, task.qualified_name) == ("org-named", "acme/org-named")
    assert task.instruction == "Write `ok` to /app/out.txt."  # the canary line is not for the agent
    bare = load_task(fixtures / "harbor/full-harbor")  # the older bare form still loads
    assert bare.name == bare.qualified_name == "full-harbor"
    unnamed = load_task(fixtures / "harbor/nested/minimal-harbor")  # no [task].name: the directory
    assert unnamed.name == unnamed.qualified_name == "minimal-harbor"


@pytest.mark.parametrize(
    "name", ["acme/too/deep", "/x", "acme/", "acme/.hidden", "ac..me/x", "acme/x y", "  "]
)
def test_bad_harbor_name_is_refused_by_field(tmp_path: Path, fixtures: Path, name: str) -> None:
    import shutil

    shutil.copytree(fixtures / "harbor/org-named", tmp_path / "t")
    toml = tmp_path / "t/task.toml"
    toml.write_text(toml.read_text().replace('"acme/org-named"', f'"{name}"'))
    with pytest.raises(TaskError, match=r"task\.name: expected") as info:
        load_task(tmp_path / "t")
    assert info.value.path == str(toml)


def test_canary_lines_only_at_the_start() -> None:
    text = "# BENCHMARK DATA canary GUID 1\n<!-- Canary: x -->\n\n\nDo it.\n# a canary later stays\n"
    assert strip_canary(text) == "Do it.\n# a canary later stays\n"
    assert strip_canary("No canary here.\n") == "No canary here.\n"


def test_multi_step_task_loads_its_steps(fixtures: Path) -> None:
    root = fixtures / "multistep/two-steps"
    task = load_task(root)  # no task-level instruction.md: Harbor does not read one either
    assert [s.name for s in task.steps] == ["first", "second"]
    assert task.steps[0].agent_timeout_s == 60.0 and task.steps[1].agent_timeout_s == task.agent_timeout_s
    assert task.steps[1].tests_dir == str(root / "steps" / "second" / "tests")
    assert task.multi_step_reward == "mean"


def _steps_task(tmp_path: Path, steps_toml: str, dirs: dict[str, str]) -> Path:
    root = tmp_path / "steps-task"
    (root / "environment").mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n")
    (root / "task.toml").write_text(steps_toml)
    for rel, text in dirs.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.mark.parametrize(("toml", "files", "expected"), [
    ('[[steps]]\nname = "a"\n', {}, "step 'a' has no directory steps/a/"),
    ('[[steps]]\nname = "a"\n', {"steps/a/instruction.md": "do"}, "step 'a' has no test script"),
    ('[[steps]]\nname = "a/b"\n', {}, "steps[0].name: 'a/b' is not a step name"),
    ('[[steps]]\nname = "a"\n[[steps]]\nname = "A"\n', {"steps/a/instruction.md": "x", "tests/test.sh": "x"},
     "steps[1].name: 'A' repeats step 'a'"),
    ('[[steps]]\nname = "a"\nmin_reward = "high"\n', {"steps/a/instruction.md": "x", "tests/test.sh": "x"},
     "steps[0].min_reward: expected a number"),
    ('[[steps]]\nname = "a"\n[steps.healthcheck]\ncommand = "true"\nretries = 0\n',
     {"steps/a/instruction.md": "x", "tests/test.sh": "x"}, "steps[0].healthcheck.retries: expected an integer"),
    ('[[steps]]\nname = "a"\n[steps.agent]\nuser = "bob"\n', {}, "[steps[].agent.user]: refused"),
    ('multi_step_reward_strategy = "max"\n[[steps]]\nname = "a"\n', {}, "'max' is not supported"),
    ('[[steps]]\nname = "a"\n', {"steps/a/instruction.md": "\n", "tests/test.sh": "x"},
     "steps/a/instruction.md is empty"),
])
def test_multi_step_faults_name_the_file_and_field(
    tmp_path: Path, toml: str, files: dict[str, str], expected: str
) -> None:
    with pytest.raises(TaskError) as info:
        load_task(_steps_task(tmp_path, toml, files))
    assert expected in str(info.value) and info.value.task == "steps-task"


def test_step_settings_resolve_against_the_tasks(tmp_path: Path) -> None:
    root = _steps_task(tmp_path, (
        'multi_step_reward_strategy = "final"\n[agent]\ntimeout_sec = 30\n'
        '[verifier]\ntimeout_sec = 40\nenv = { A = "1", B = "1" }\n'
        '[[steps]]\nname = "a"\nmin_reward = 0.5\n[steps.verifier]\nenv = { B = "2" }\nuser = "nobody"\n'
        '[[steps]]\nname = "b"\nmin_reward = { reward = 1, style = 0.5 }\n[steps.agent]\ntimeout_sec = 5\n'),
        {"steps/a/instruction.md": "<!-- canary x -->\nfirst", "steps/a/tests/test.sh": "x",
         "steps/a/solution/solve.sh": "x", "steps/a/workdir/setup.sh": "x",
         "steps/b/instruction.md": "second", "tests/test.sh": "x", "solution/solve.sh": "x"})
    task = load_task(root)
    a, b = task.steps
    assert task.multi_step_reward == "final" and task.instruction == "first"
    assert (a.agent_timeout_s, b.agent_timeout_s, a.verifier_timeout_s) == (30.0, 5.0, 40.0)
    assert a.verifier_env == {"A": "1", "B": "2"} and b.verifier_env == {"A": "1", "B": "1"}
    assert (a.verifier_user, b.verifier_user) == ("nobody", None)
    assert a.min_reward == {"reward": 0.5} and b.min_reward == {"reward": 1.0, "style": 0.5}
    assert a.solution_path == str(root / "steps/a/solution/solve.sh")
    assert b.solution_path == str(root / "solution/solve.sh")  # Harbor's oracle falls back to it
    assert a.workdir_dir == str(root / "steps/a/workdir") and b.workdir_dir is None
    assert a.tests_dir == str(root / "steps/a/tests") and b.tests_dir is None


def test_legacy_parser_name(fixtures: Path) -> None:
    assert load_task(fixtures / "legacy/legacy-hello").test_parser == "pytest"
    assert load_task(fixtures / "legacy/legacy-descriptions").test_parser == "pytest"  # the default
    assert load_task(fixtures / "legacy/legacy-swebench").test_parser == "swebench"
    root = fixtures / "broken/legacy-bad-parser"
    with pytest.raises(TaskError, match=r"parser_name: expected a terminal-bench parser \(pytest, swebench, "
                       r"swelancer, mlebench, sweperf\), got 'junit'") as info:
        load_task(root)
    assert info.value.task == "legacy-bad-parser" and info.value.path == str(root / "task.yaml")
