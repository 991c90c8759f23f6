"""Harbor 0.26's verifier modes: ``shared`` (the agent's sandbox, its processes alive) and
``separate`` (a fresh sandbox holding the artifacts), with collect hooks; and what each
can defend (issue 27). Real containers; task.toml files as Harbor tasks write them."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from rsr_async.config import SandboxConfig
from rsr_async.errors import TaskError
from rsr_async.sandbox import SandboxPool
from rsr_async.schema import CollectHook, Task
from rsr_async.tasks import BUNDLED_SUITE, grade, load_task, validate_task

BASE = SandboxConfig().base_image

# The tests ask python3 whether the answer is right: an agent that replaced python3
# answers for them. Shared mode cannot defend that (the tests use the sandbox's tools).
CHECK_TEST = (
    "#!/bin/bash\n"
    "if python3 -c \"import sys; sys.exit(open('/app/out.txt').read().strip() != '42')\"; "
    "then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
)
FAKE_PYTHON = "#!/bin/sh\nexit 0\n"


def _task(tmp_path: Path, test_sh: str, **fields: object) -> Task:
    tests = tmp_path / "tests"
    tests.mkdir(parents=True, exist_ok=True)
    (tests / "test.sh").write_text(test_sh)
    task = Task(name="modes", path=str(tmp_path), instruction="-", docker_image=BASE,
                tests_dir=str(tests), verifier_timeout_s=30, workdir="/app")
    return msgspec.structs.replace(task, **fields)  # type: ignore[arg-type]


@pytest.mark.docker
async def test_separate_mode_defends_what_shared_mode_cannot(pool: SandboxPool, tmp_path: Path) -> None:
    shared = _task(tmp_path, CHECK_TEST)
    separate = msgspec.structs.replace(shared, verifier_mode="separate", artifacts=("/app/out.txt",))
    async with pool.sandbox(shared, key="modes") as sandbox:
        await sandbox.run("mkdir -p /app && echo 41 > /app/out.txt && "
                          f"printf '{FAKE_PYTHON}' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3",
                          time_limit=20)
        # Shared mode: the tests run the agent's python3, which says yes (the README says so).
        assert (await grade(sandbox, shared, pool=pool, key="modes")).passed
        # Separate mode: a fresh sandbox of the task's environment with only the artifact.
        verdict = await grade(sandbox, separate, pool=pool, key="modes")
        assert verdict.reward == 0.0
        await sandbox.run("echo 42 > /app/out.txt", time_limit=20)
        assert (await grade(sandbox, separate, pool=pool, key="modes")).passed  # the artifact is what counts


ROOM_TEST = (
    "#!/bin/bash\n"
    "skel=$(ls -A /etc/skel | tr '\\n' ' ')\n"
    "echo \"skel=[$skel] out_mode=$(stat -c %a /opt/out)\"\n"
    "echo 1 > /logs/verifier/reward.txt\n"
)


@pytest.mark.docker
async def test_separate_mode_artifacts_replace_what_the_image_has_there(pool: SandboxPool, tmp_path: Path) -> None:
    """Harbor 0.26 (``ArtifactHandler.upload_artifacts``) empties a directory artifact's
    path in the verifier's environment before copying it in, and makes a file artifact's
    parent directory mode 777: a file the agent deleted from a directory the image ships
    stays deleted for the tests, rather than coming back from the image."""
    task = _task(tmp_path, ROOM_TEST, verifier_mode="separate", artifacts=("/etc/skel", "/opt/out/answer.txt"))
    async with pool.sandbox(task, key="room") as sandbox:
        shipped = (await sandbox.run("ls -A /etc/skel", time_limit=20)).output.split()
        assert ".bashrc" in shipped  # the base image ships it: the control
        await sandbox.run("rm /etc/skel/.bashrc && echo mine > /etc/skel/mine.txt && "
                          "mkdir -p /opt/out && echo 42 > /opt/out/answer.txt", time_limit=20)
        verdict = await grade(sandbox, task, pool=pool, key="room")
    listed = verdict.output.split("skel=[", 1)[1].split("]", 1)[0].split()
    assert sorted(listed) == sorted([*(name for name in shipped if name != ".bashrc"), "mine.txt"]), verdict.output
    # A directory artifact's own mode is the copy's (Docker's copy-in sets it); not compared.
    assert "out_mode=777" in verdict.output, verdict.output


LINKS_TEST = (
    "#!/bin/bash\n"
    "cd /app/report && for f in $(ls -A | sort); do echo \"entry=$f:$(readlink $f):$(cat $f 2>/dev/null)\"; done\n"
    "[ -e /app/link.txt ] || [ -L /app/link.txt ] && echo link.txt=present || echo link.txt=absent\n"
    "echo 1 > /logs/verifier/reward.txt\n"
)


@pytest.mark.docker
async def test_separate_mode_skips_links_that_leave_an_artifact(pool: SandboxPool, tmp_path: Path) -> None:
    """Harbor 0.26 copies artifacts through tarfile's ``data`` filter and skips, alone,
    each member it refuses (``extract_dir``): a link inside the artifact crosses over, a
    link out of it (absolute, or ``..``) does not, and an artifact that is itself an
    absolute link is skipped; the grading goes on."""
    task = _task(tmp_path, LINKS_TEST, verifier_mode="separate", artifacts=("/app/report", "/app/link.txt"))
    async with pool.sandbox(task, key="links") as sandbox:
        await sandbox.run("mkdir -p /app/report && cd /app/report && echo ok > ok.txt && ln -s ok.txt inside && "
                          "ln -s /etc/hostname leak && echo s > /app/secret.txt && ln -s ../secret.txt up && "
                          "ln -s /etc/passwd /app/link.txt", time_limit=20)
        verdict = await grade(sandbox, task, pool=pool, key="links")
    assert verdict.passed, verdict.output
    entries = [line for line in verdict.output.splitlines() if line.startswith("entry=")]
    assert entries == ["entry=inside:ok.txt:ok", "entry=ok.txt::ok"], verdict.output
    assert "link.txt=absent" in verdict.output, verdict.output


COLLECT_TEST = (
    "#!/bin/bash\n"
    "state=$(cat /logs/artifacts/counter 2>/dev/null)\n"
    "echo \"state=[$state] private=[$(ls /var/lib/app 2>&1 | head -1)]\"\n"
    "[ \"$state\" = 42 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
)


@pytest.mark.docker
async def test_collect_hooks_feed_the_separate_verifier(pool: SandboxPool, tmp_path: Path) -> None:
    hook = CollectHook(command="mkdir -p /logs/artifacts && cp /var/lib/app/counter /logs/artifacts/counter")
    task = _task(tmp_path, COLLECT_TEST, verifier_mode="separate", verifier_collect=(hook,))
    async with pool.sandbox(task, key="collect") as sandbox:
        await sandbox.run("mkdir -p /var/lib/app && echo 42 > /var/lib/app/counter", time_limit=20)
        verdict = await grade(sandbox, task, pool=pool, key="collect")
        assert verdict.passed, verdict.output
        # only what the hook collected crossed over: the agent's own files did not
        assert "private=[ls: cannot access" in verdict.output
        # a failing hook is logged and the verification goes on (Harbor: best effort)
        failing = msgspec.structs.replace(task, verifier_collect=(CollectHook(command="exit 3"),))
        await sandbox.run("rm -rf /logs/artifacts", time_limit=20)
        assert (await grade(sandbox, failing, pool=pool, key="collect")).reward == 0.0


def _harbor_task(tmp_path: Path, verifier: str, extra: str = "") -> Path:
    root = tmp_path / "task"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (root / "instruction.md").write_text("do it\n")
    (root / "task.toml").write_text(
        f'version = "1.0"\n{extra}\n[verifier]\ntimeout_sec = 30\n{verifier}\n'
        f'[environment]\ndocker_image = "{BASE}"\n')
    return root


def test_task_toml_verifier_keys_load_as_harbor_defines_them(tmp_path: Path) -> None:
    root = _harbor_task(tmp_path / "a", 'environment_mode = "separate"\nuser = "nobody"\n'
                        '[[verifier.collect]]\ncommand = "cp /x /logs/artifacts/x"\ntimeout_sec = 5\n',
                        extra='artifacts = ["/app/out.txt", {source = "/app/dir"}]\n')
    task = load_task(root)
    assert task.verifier_mode == "separate" and task.verifier_user == "nobody"
    assert task.verifier_collect == (CollectHook(command="cp /x /logs/artifacts/x", timeout_s=5.0),)
    assert task.artifacts == ("/app/out.txt", "/app/dir")
    assert load_task(_harbor_task(tmp_path / "b", "")).verifier_mode == "shared"  # Harbor's default
    refused = {
        "bad-mode": 'environment_mode = "isolated"',
        "shared-env": 'environment_mode = "shared"\n[verifier.environment]\ndocker_image = "x"',
        "own-env": "[verifier.environment]\ndocker_image = \"x\"",
        "sidecar-hook": '[[verifier.collect]]\ncommand = "true"\nservice = "db"',
    }
    for name, verifier in refused.items():
        with pytest.raises(TaskError) as info:
            load_task(_harbor_task(tmp_path / name, verifier))
        assert "verifier" in str(info.value), (name, str(info.value))
    with pytest.raises(TaskError, match=r"artifacts\[0\]"):
        load_task(_harbor_task(tmp_path / "rel", "", extra='artifacts = ["relative/path"]\n'))


@pytest.mark.docker
@pytest.mark.timeout(600)
async def test_the_bundled_service_task_validates(pool: SandboxPool) -> None:
    """Its solution leaves an HTTP server running and its tests probe it: the oracle
    passes (under the old kill-first verifier it failed: "Connection refused")."""
    row = await validate_task(load_task(BUNDLED_SUITE / "serve-status-page"), pool)
    assert row.ok, (row.problems, row.oracle_output)
    assert row.oracle_reward == 1.0 and row.nop_reward == 0.0


SEPARATE = Path(__file__).resolve().parent / "harbor_separate"  # Harbor tasks, kept out of fixtures/'s datasets


@pytest.mark.docker
@pytest.mark.timeout(600)
async def test_separate_mode_and_collect_hooks_grade_as_harbor_grades(pool: SandboxPool) -> None:
    """Harbor 0.26.0's own Job graded these tasks under each plan of the agent
    (``scripts/record_harbor_verifier.py``: collect hooks, artifacts, a second
    environment, its Verifier); the same plans in real sandboxes grade the same."""
    recorded = json.loads((SEPARATE / "expected.json").read_text())
    assert recorded["harbor"] == "0.26.0"
    for name, by_plan in sorted(recorded["rewards"].items()):
        task = load_task(SEPARATE / name)
        assert task.verifier_mode == "separate"
        async with pool.sandbox(task, key=f"harbor-{name}") as sandbox:
            for plan, outcome in sorted(by_plan.items()):
                commands = recorded["plans"][plan]
                reset = "rm -rf /var/lib/app /app/out.txt /logs/artifacts"
                await sandbox.run(" && ".join([reset, *commands]), time_limit=30)
                verdict = await grade(sandbox, task, pool=pool, key=f"harbor-{name}-{plan}")
                expected = {k: float(v) for k, v in outcome["rewards"].items()}
                assert verdict.rewards == expected, (name, plan, verdict.output)
