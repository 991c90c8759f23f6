from __future__ import annotations

import subprocess
import sys

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
