"""The sandbox seam: one ``sandbox.backend`` setting, one name → factory table, and
nothing above ``sandbox/`` that knows Docker runs the sandboxes.

The layering is read from the source (every import and name outside ``sandbox/``) and
checked in a fresh interpreter (importing everything outside ``sandbox/`` loads no
Docker client), so a new leak fails here naming its file and line.
"""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import anyio
import pytest

import rsr_async.sandbox
from rsr_async.config import Config, SandboxConfig, load_config
from rsr_async.engine.store import Store, resume_view
from rsr_async.errors import ConfigError, ConfigMismatchError
from rsr_async.sandbox.backends import BACKENDS, sandbox_backend
from rsr_async.sandbox.docker_backend import DockerBackend
from rsr_async.sandbox.fake import FakeBackend, FakeSandboxPool
from rsr_async.tasks import BUNDLED_SUITE, load_dataset
from tests.conftest import PYTHON, REPO, run_cli_env

PACKAGE = REPO / "rsr_async"

DOCKER_MODULES = frozenset(
    f"rsr_async.sandbox.{name}"
    for name in ("container", "pool", "hosts", "ownership", "shell", "images", "host_images", "hidden",
                 "compose_wait", "subnets", "docker_backend")
)
"""The Docker side of ``sandbox/`` (each imports aiodocker, or is the Docker backend)."""
DOCKER_NAMES = frozenset({"DockerSandbox", "DockerShell", "DockerHost", "SandboxPool", "docker_errors",
                          "DockerUnavailableError", "DockerBackend"})
"""Names that only the Docker backend's code has reason to use (a Docker class, the
Docker error mapping, the one Docker-specific exception)."""
LAZY_DOCKER_NAMES = frozenset(rsr_async.sandbox._HOME)
"""What ``rsr_async.sandbox`` loads from its Docker modules on first use."""


def _above_sandbox() -> list[Path]:
    """Every module of the package outside ``sandbox/`` (the bundled tasks' own code aside)."""
    return sorted(
        path for path in PACKAGE.rglob("*.py")
        if "sandbox" not in path.relative_to(PACKAGE).parts[:1] and "bundled" not in path.parts
    )


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _docker_uses(text: str, module: str) -> list[str]:
    """Where the source ``text`` of ``module`` imports a Docker module or names a
    Docker-only name, as ``line: what``."""
    package = module if module.endswith(".__init__") else module.rsplit(".", 1)[0]
    package = package.removesuffix(".__init__")
    found: list[str] = []
    for node in ast.walk(ast.parse(text)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            imported = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            found += [f"{line}: imports {m}" for m in imported if m in DOCKER_MODULES]
            if base == "rsr_async.sandbox":
                found += [f"{line}: imports {a.name}" for a in node.names if a.name in LAZY_DOCKER_NAMES]
            if base.split(".")[0] == "aiodocker":
                found.append(f"{line}: imports {base}")
        elif isinstance(node, ast.Import):
            found += [f"{line}: imports {a.name}" for a in node.names
                      if a.name in DOCKER_MODULES or a.name.split(".")[0] == "aiodocker"]
        elif isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name in DOCKER_NAMES:
                found.append(f"{line}: names {name}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            # a dynamic import by name: importlib.import_module("rsr_async.sandbox.pool")
            if node.value.split(":")[0] in DOCKER_MODULES:
                found.append(f"{line}: imports {node.value}")
    return sorted(set(found))


def _layer_params() -> list[object]:
    params: list[object] = []
    for path in _above_sandbox():
        where = str(path.relative_to(REPO))
        if path.name == "errors.py" and path.parent == PACKAGE:
            continue  # the exception tree defines DockerUnavailableError (it maps Docker's errors)
        params.append(pytest.param(path, id=where))
    return params


@pytest.mark.parametrize("path", _layer_params())
def test_no_module_above_sandbox_imports_or_names_the_docker_side(path: Path) -> None:
    assert _docker_uses(path.read_text(encoding="utf-8"), _module_of(path)) == []


def test_the_layering_check_finds_each_kind_of_docker_use() -> None:
    """The check above can fail: imports relative and absolute, lazy names, a dynamic
    import by name, a Docker class named in an annotation."""
    text = (
        "from ..sandbox import SandboxPool, sandbox_backend\n"
        "from ..sandbox.hosts import DockerHost\n"
        "from rsr_async.sandbox import sweep\n"
        "import aiodocker\n"
        "importlib.import_module('rsr_async.sandbox.container')\n"
        "def f(s: DockerSandbox, b: SandboxBackend) -> None: ...\n"
    )
    assert _docker_uses(text, "rsr_async.rsr.runtime") == [
        "1: imports SandboxPool",
        "2: imports rsr_async.sandbox.hosts",
        "3: imports sweep",
        "4: imports aiodocker",
        "5: imports rsr_async.sandbox.container",
        "6: names DockerSandbox",
    ]


def test_importing_everything_above_sandbox_loads_no_docker_client() -> None:
    modules = [_module_of(p) for p in _above_sandbox() if p.name != "__main__.py"]
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'aiodocker' "
        "or m.startswith('rsr_async.sandbox.'))))\n"
    )
    done = subprocess.run([PYTHON, "-c", code], cwd=REPO, env=run_cli_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(json.loads(done.stdout))
    assert loaded & (DOCKER_MODULES | {"aiodocker"}) == set()


def test_the_table_makes_each_backend_bound_to_its_settings() -> None:
    assert set(BACKENDS) == {"docker", "fake"}
    assert Config().sandbox.backend == "docker"
    docker = sandbox_backend(SandboxConfig())
    assert isinstance(docker, DockerBackend) and docker.config == SandboxConfig()
    config = SandboxConfig(backend="fake", warm_pool=3)
    fake = sandbox_backend(config)
    assert isinstance(fake, FakeBackend) and fake.config is config


def test_an_unknown_backend_is_refused_naming_the_setting_and_the_known_names() -> None:
    config = load_config([], ["sandbox.backend=k8s"])  # the name is checked against the table
    with pytest.raises(ConfigError, match=r"^sandbox\.backend: unknown sandbox backend 'k8s'; known: docker, fake$"):
        sandbox_backend(config.sandbox)


@pytest.mark.parametrize("command", [["run", "--progress", "none"], ["tasks", "validate"]])
def test_the_commands_refuse_an_unknown_backend_before_anything_starts(command: list[str], tmp_path: Path) -> None:
    task = str(BUNDLED_SUITE / "merge-inventory")
    args = [*command, "--run-dir", str(tmp_path / "run"), "--dataset", task] if command[0] == "run" else [*command, task]
    done = subprocess.run([PYTHON, "-m", "rsr_async", *args, "--set", "sandbox.backend=k8s"], cwd=REPO,
                          env=run_cli_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "error: sandbox.backend: unknown sandbox backend 'k8s'; known: docker, fake" in done.stderr
    assert "simulator" not in done.stderr  # no model server was started
    assert not (tmp_path / "run" / "run.db").exists()


def test_the_fake_backend_opens_a_fresh_fake_pool_and_has_no_host_to_prepare_check_or_sweep() -> None:
    task = next(t for t in load_dataset([str(BUNDLED_SUITE)]).tasks if t.name == "merge-inventory")
    backend = sandbox_backend(SandboxConfig(backend="fake"))

    async def go() -> tuple[int, int, int, str | None, str | None]:
        await backend.prepare()
        await backend.check_tasks([task])
        async with backend.open(run_id="r", run_dir=None) as pool:
            assert isinstance(pool, FakeSandboxPool)
            assert await pool.ensure_image(task) == "fake:merge-inventory"
            async with pool.sandbox(task, key="k") as sandbox:
                url, stopped = sandbox.url, await sandbox.stopped_by_agent()
                live = pool.statistics().live
        return live, pool.statistics().live, await backend.sweep(["r"]), url, stopped

    assert anyio.run(go) == (1, 0, 0, None, None)


def _stored(tmp_path: Path, config: dict[str, object]) -> Path:
    run_dir = tmp_path / "run"
    with Store.open(run_dir, config=config):
        pass
    return run_dir


def test_a_run_stored_before_the_backend_setting_resumes_and_a_fake_run_does_not_resume_on_docker(
    tmp_path: Path,
) -> None:
    before = Config().to_dict()
    del before["sandbox"]["backend"]  # what runs stored before this setting recorded
    assert resume_view(before) == resume_view(Config().to_dict())  # same default run directory too
    run_dir = _stored(tmp_path, before)
    with Store.open(run_dir, config=Config().to_dict()):
        pass
    fake = load_config([], ["sandbox.backend=fake"]).to_dict()
    assert resume_view(fake)["sandbox.backend"] == "fake"
    with pytest.raises(ConfigMismatchError, match=r"sandbox\.backend: '<unset>' -> 'fake'"):
        with Store.open(run_dir, config=fake):
            pass
    with Store.open_readonly(run_dir) as store:
        assert json.loads(store.meta()["config"])["sandbox"]["backend"] == "docker"  # refused: unchanged
