"""Task images never hold the hidden tests or the reference solution, even for a
Dockerfile that does ``COPY . /app`` from a context that is the task's root, nor what the
context's ``.dockerignore`` leaves out (as under ``docker build``). Real builds."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import anyio
import pytest

from rsr_async.config import SandboxConfig
from rsr_async.sandbox import SandboxPool
from rsr_async.sandbox.images import context_digest, dockerignored, hidden_entries
from rsr_async.tasks import load_task

pytestmark = pytest.mark.docker

BASE = SandboxConfig().base_image
COPY_ALL = f"ARG BASE_IMAGE={BASE}\nFROM ${{BASE_IMAGE}}\nCOPY . /app\n"


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def legacy_task(root: Path) -> Path:
    return write(root, {
        "task.yaml": "instruction: Create /app/out.txt.\n",
        "Dockerfile": COPY_ALL,
        "run-tests.sh": "cd /app && pytest -rA $TEST_DIR\n",
        "solution.sh": "echo SECRET-ANSWER > /app/out.txt\n",
        "tests/test_outputs.py": "def test_out(): assert open('/app/out.txt').read() == 'SECRET-ANSWER\\n'\n",
        "data/input.txt": "public input\n",
        "src/tests/test_app.py": "# the app's own tests are part of the environment\n",
    })


def harbor_task_rooted_at_itself(root: Path) -> Path:
    """A Harbor task whose environment/ is the task root (a symlink to ``.``)."""
    write(root, {
        "task.toml": "[task]\nname = 'rooted'\n",
        "instruction.md": "Create /app/out.txt.\n",
        "Dockerfile": COPY_ALL,
        "tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n",
        "solution/solve.sh": "echo SECRET-ANSWER > /app/out.txt\n",
        "solution/answer.txt": "SECRET-ANSWER\n",
        "data/input.txt": "public input\n",
    })
    os.symlink(".", root / "environment")
    return root


async def listing(pool: SandboxPool, task_dir: Path) -> list[str]:
    """Every path under /app in the task's image, built now (a nonce defeats the cache),
    then any file of the image's /app that holds the answer."""
    write(task_dir, {"data/nonce.txt": uuid.uuid4().hex})
    task = load_task(task_dir)
    tag = await pool.ensure_image(task)
    try:
        async with pool.sandbox(task, key="context") as sandbox:
            out = await sandbox.run("cd /app && find . -mindepth 1 | sort; grep -rl SECRET-ANSWER /app || true",
                                    time_limit=60)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.run_process(["docker", "rmi", "-f", tag], check=False)
    return out.output.split()


@pytest.mark.slow  # two real builds: each commits layers over a 660 MB base (fuse-overlayfs here)
async def test_copy_all_images_hold_no_tests_and_no_solution(pool: SandboxPool, tmp_path: Path) -> None:
    found: dict[str, list[str]] = {}

    async def build(name: str, task_dir: Path) -> None:
        found[name] = await listing(pool, task_dir)

    async with anyio.create_task_group() as tg:  # two real builds at once: half the wait
        tg.start_soon(build, "legacy", legacy_task(tmp_path / "legacy-copy-all"))
        tg.start_soon(build, "harbor", harbor_task_rooted_at_itself(tmp_path / "rooted"))

    legacy = found["legacy"]
    assert {"./data/input.txt", "./Dockerfile", "./task.yaml"} <= set(legacy), legacy
    assert "./src/tests/test_app.py" in legacy  # only the task root's tests/ is hidden
    for hidden in ("./tests", "./solution.sh", "./run-tests.sh"):
        assert not any(f == hidden or f.startswith(hidden + "/") for f in legacy), (hidden, legacy)

    harbor = found["harbor"]
    assert {"./data/input.txt", "./instruction.md", "./task.toml"} <= set(harbor), harbor
    for hidden in ("./tests", "./solution"):
        assert not any(f == hidden or f.startswith(hidden + "/") for f in harbor), (hidden, harbor)

    for files in found.values():
        assert not [f for f in files if f.startswith("/")], files  # the answer is nowhere in /app


def test_hidden_files_do_not_change_the_image_tag(tmp_path: Path) -> None:
    root = legacy_task(tmp_path / "legacy")
    task = load_task(root)
    hidden = hidden_entries(task, root)
    assert hidden == {"tests", "solution.sh", "run-tests.sh"}
    before = context_digest(root, base_id="b", exclude=hidden)
    (root / "tests" / "test_outputs.py").write_text("# a new hidden test\n")
    (root / "solution.sh").write_text("echo other\n")
    assert context_digest(root, base_id="b", exclude=hidden) == before  # no rebuild for them
    (root / "data" / "input.txt").write_text("changed\n")
    assert context_digest(root, base_id="b", exclude=hidden) != before
    # A Harbor task's usual environment/ holds neither: nothing to hide there.
    harbor = load_task(Path(__file__).parent / "fixtures/harbor/full-harbor")
    assert hidden_entries(harbor, Path(harbor.environment_dir or "")) == frozenset()


# Published terminal-bench tasks ship a .dockerignore beside their Dockerfile (listing
# Dockerfile, docker-compose.yaml, task.yaml); these lines add the other pattern forms.
DOCKERIGNORE = """\
# not part of the image
Dockerfile
docker-compose.yaml
task.yaml
*.md
/data/private/
!data/private/keep.txt
**/*.log
"""


def ignoring_task(root: Path) -> Path:
    return write(legacy_task(root), {
        ".dockerignore": DOCKERIGNORE,
        "README.md": "root notes\n",
        "docs/guide.md": "kept: *.md is one segment deep\n",
        "data/private/secret.txt": "ignored\n",
        "data/private/keep.txt": "re-included\n",
        "build.log": "ignored\n",
        "src/deep/run.log": "ignored\n",
    })


def test_dockerignore_is_read_as_docker_reads_it(tmp_path: Path) -> None:
    root = ignoring_task(tmp_path / "ignoring")
    ignored = dockerignored(root)
    # The Dockerfile and .dockerignore are always sent (the daemon hides them from COPY).
    assert ignored == {"task.yaml", "README.md", "data/private/secret.txt",
                       "build.log", "src/deep/run.log"}, ignored
    assert dockerignored(root, "build/Dockerfile.dev") >= {"Dockerfile"}
    task = load_task(root)
    exclude = hidden_entries(task, root) | ignored
    before = context_digest(root, base_id="b", exclude=exclude)
    (root / "data/private/secret.txt").write_text("changed\n")
    (root / "README.md").write_text("changed\n")
    assert context_digest(root, base_id="b", exclude=exclude) == before  # no rebuild for them
    (root / "data/private/keep.txt").write_text("changed\n")
    assert context_digest(root, base_id="b", exclude=exclude) != before
    assert dockerignored(tmp_path) == frozenset()  # no .dockerignore: nothing left out


@pytest.mark.slow  # a real build over the 660 MB base
async def test_copy_all_images_leave_out_what_dockerignore_lists(pool: SandboxPool, tmp_path: Path) -> None:
    files = set(await listing(pool, ignoring_task(tmp_path / "ignoring")))
    assert {"./data/input.txt", "./data/private/keep.txt", "./docs/guide.md", "./.dockerignore"} <= files, files
    for left_out in ("./Dockerfile", "./task.yaml", "./README.md",
                     "./data/private/secret.txt", "./build.log", "./src/deep/run.log", "./tests", "./solution.sh"):
        assert left_out not in files, (left_out, sorted(files))
