from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

import rsr_async
from tests.conftest import run_cli_env


def test_all_is_exactly_the_public_namespace() -> None:
    eager = {
        n for n, v in vars(rsr_async).items()
        if not n.startswith("_") and type(v).__name__ != "module"
    } - {"annotations", "TYPE_CHECKING"}
    lazy = {"Engine", "Job", "Pipeline", "open_pipeline"}  # loaded on first use, to keep the import light
    assert set(rsr_async.__all__) - {"__version__"} == eager | lazy
    for name in rsr_async.__all__:
        assert getattr(rsr_async, name) is not None
    assert rsr_async.Engine is __import__("rsr_async.engine", fromlist=["Engine"]).Engine


def test_import_is_fast_and_light() -> None:
    code = (
        "import sys, time; t = time.perf_counter(); import rsr_async; "
        "print(time.perf_counter() - t); "
        "print(','.join(m for m in ('aiodocker', 'aiohttp', 'httpx', 'rich', 'pyte', 'jinja2') if m in sys.modules))"
    )
    times = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], env=run_cli_env(), capture_output=True, text=True, check=True)
        seconds, heavy = out.stdout.splitlines()
        assert heavy == "", f"import rsr_async pulled in {heavy}"
        times.append(float(seconds))
    assert min(times) < 0.3, times


def test_every_exception_is_in_the_tree() -> None:
    from rsr_async import errors

    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.RsrError)
        assert name in (errors.__doc__ or ""), f"{name} missing from the tree drawing"


# -- the wheel, installed outside the checkout -------------------------------------------------

REPO = Path(__file__).resolve().parent.parent


def _build(kind: str, out: Path, source: Path = REPO, **env: str) -> Path:
    # No build isolation: the build needs setuptools and Cython, which the dev venv holds,
    # and no network. `setup.py sdist` is what `python -m build --sdist` runs underneath.
    if kind == "sdist":
        cmd = [sys.executable, "setup.py", "-q", "sdist", "-d", str(out)]
    else:
        cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
               "-w", str(out), str(source)]
    subprocess.run(cmd, cwd=source, check=True, capture_output=True, timeout=600,
                   env={**os.environ, **env})
    (built,) = out.glob("*.tar.gz" if kind == "sdist" else "*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_installed_outside_the_checkout_finds_its_configs_and_benchmarks(tmp_path: Path) -> None:
    wheel = _build("wheel", tmp_path / "dist")
    names = zipfile.ZipFile(wheel).namelist()
    for shipped in ("configs/default.toml", "configs/paper.toml", "bench/native.py", "bench/_common.py",
                    "bench/leak_corpus/corpus.jsonl"):
        assert f"rsr_async/_shipped/{shipped}" in names, shipped
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    # The dependencies come from the dev venv's site-packages, appended after the new venv's
    # own: a .pth line adds a directory but runs none of its .pth files, so the checkout's
    # editable install (a .pth finder there) is not on the path; the wheel's copy is.
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {"PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "HOME": str(tmp_path)}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), cwd=away, env=env, capture_output=True, text=True, timeout=300)

    where = run(str(py), "-c", "import rsr_async, rsr_async.config as c; print(rsr_async.__file__); "
                "print(c.load_config(['paper']).rsr); print(c.CONFIG_DIR)")
    assert where.returncode == 0, where.stderr
    module_file, paper, config_dir = where.stdout.splitlines()
    assert module_file.startswith(str(venv)), module_file
    assert config_dir.startswith(str(venv)), config_dir
    assert "RsrConfig(" in paper
    version = run(str(venv / "bin" / "rsr-async"), "--version")
    assert version.returncode == 0 and version.stdout.startswith("rsr_async "), version.stderr
    helped = run(str(venv / "bin" / "rsr-async"), "bench", "--help")
    assert helped.returncode == 0 and "native" in helped.stdout, helped.stdout + helped.stderr
    bench = run(str(py), "-m", "rsr_async", "bench", "native", "--episodes", "1", "--pairs", "8",
                "--json", str(tmp_path / "native.json"))
    assert bench.returncode == 0, bench.stderr[-2000:]
    assert json.loads((tmp_path / "native.json").read_text())


@pytest.mark.slow
def test_an_sdist_carries_what_the_wheel_needs(tmp_path: Path) -> None:
    sdist = _build("sdist", tmp_path / "sdist")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        for needed in ("configs/paper.toml", "bench/native.py", "setup.py", "MANIFEST.in",
                       "rsr_async/_native/leakscan.pyx", "rsr_async/_native/rsr_find.h",
                       "rsr_async/sandbox/verifier_helper.c",
                       "rsr_async/tasks/bundled/build-order/task.toml"):
            assert needed in names, needed
        tar.extractall(tmp_path / "src", filter="data")
    (source,) = (tmp_path / "src").iterdir()
    # The extensions are not what this checks (their build is CI's own step): skip them.
    wheel = _build("wheel", tmp_path / "dist", source, RSR_NO_EXTENSIONS="1")
    shipped = zipfile.ZipFile(wheel).namelist()
    assert "rsr_async/_shipped/configs/paper.toml" in shipped
    assert "rsr_async/sandbox/verifier_helper.c" in shipped  # the verifier builds its helper from it


def _imports(folder: Path) -> set[str]:
    import ast

    out: set[str] = set()
    for path in folder.rglob("*.py"):
        if "bundled" in path.parts:  # the tasks' own code, run inside their sandboxes
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out.add(node.module.split(".")[0])
    local = {p.stem for p in folder.glob("*.py")}  # bench/'s modules import one another
    # bench hosts borrows the suite's second-dockerd helper (and says, installed, that it
    # runs from a checkout).
    return out - set(sys.stdlib_module_names) - local - {"rsr_async", "__future__", "tests"}


def test_the_declared_dependencies_are_what_the_code_imports() -> None:
    import re
    import tomllib
    from importlib.metadata import packages_distributions

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

    def names(specs: list[str]) -> set[str]:
        return {re.split(r"[<>=!;\[ ]", s, maxsplit=1)[0].lower().replace("_", "-") for s in specs}

    core = names(project["dependencies"])
    extras = {k: names(v) for k, v in project["optional-dependencies"].items()}
    dist_of = {m: {d.lower().replace("_", "-") for d in ds} for m, ds in packages_distributions().items()}
    used_by_package = {d for m in _imports(REPO / "rsr_async") for d in dist_of.get(m, {m})}
    used_by_bench = {d for m in _imports(REPO / "bench") for d in dist_of.get(m, {m})}
    assert core <= used_by_package, f"declared but never imported by rsr_async/: {core - used_by_package}"
    optional = set().union(*(v for k, v in extras.items() if k != "dev"))
    assert used_by_package <= core | optional, f"imported but not declared: {used_by_package - core - optional}"
    assert used_by_bench <= core | extras["bench"] | extras["analysis"], used_by_bench - core - extras["bench"]
