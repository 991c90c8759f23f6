"""Every harness through the real runtime on the ``fake`` sandbox backend.

``run --set sandbox.backend=fake`` takes the same path as a Docker run (the command,
:func:`~rsr_async.rsr.runtime.open_pipeline`, the episode runner, the harness, the
verifier, the store), with the simulator and the scripted stand-in as the model. Docker
is pointed at a socket that does not exist, so anything that still reached for Docker
would fail the run. ``tasks validate`` goes through the same table.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from rsr_async.config import load_config
from rsr_async.engine.store import Store
from rsr_async.rsr.runtime import open_pipeline
from rsr_async.schema import EpisodeResult
from rsr_async.tasks import BUNDLED_SUITE, load_dataset
from rsr_async.testing import FakeSandboxPool
from tests.conftest import PYTHON, REPO, run_cli_env

pytestmark = pytest.mark.timeout(300)

# Tasks the scripted stand-in solves often, so each harness has successes to check.
TASKS = ["merge-inventory", "endpoint-latency-report", "normalize-line-endings"]
HARNESSES = ("terminus2", "statem", "rsrt")
NO_DOCKER = 'sandbox.docker_urls=["unix:///nonexistent/rsr-no-docker.sock"]'


class FakeRun:
    def __init__(self, run_dir: Path, done: subprocess.CompletedProcess[str]) -> None:
        self.run_dir = run_dir
        self.done = done
        with Store.open_readonly(run_dir) as store:
            self.results = list(store.outputs(EpisodeResult, stage="discover"))
            self.rows = list(store.rows(stage="discover"))

    def of(self, harness: str) -> list[EpisodeResult]:
        return [r for r in self.results if r.key.harness == harness]


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeRun]:
    tmp = tmp_path_factory.mktemp("fake-backend")
    listing = tmp / "tasks.txt"
    listing.write_text("".join(f"{BUNDLED_SUITE / name}\n" for name in TASKS))
    run_dir = tmp / "run"
    done = subprocess.run(
        [PYTHON, "-m", "rsr_async", "run", "--dataset", str(listing), "--run-dir", str(run_dir),
         "--progress", "none", "--attempts", "1", "--concurrency", "9",
         "--set", f"run.harnesses={list(HARNESSES)!r}".replace("'", '"'),
         "--set", "sandbox.backend=fake", "--set", NO_DOCKER],
        cwd=REPO, env=run_cli_env(), capture_output=True, text=True, timeout=240,
    )
    assert (run_dir / "run.db").exists(), done.stderr[-3000:]
    yield FakeRun(run_dir, done)


def _graded_by_the_fake(run: FakeRun, harness: str) -> list[EpisodeResult]:
    """The harness's episodes, each graded once by the fake's verifier, some passing."""
    rows = [r for r in run.rows if r.harness == harness]
    assert len(rows) == len(TASKS), run.done.stderr[-3000:]
    assert all(r.status in ("succeeded", "failed") and r.tries == 1 for r in rows), \
        [(r.task, r.status, r.error) for r in rows]
    results = run.of(harness)
    for result in results:
        passed = result.status == "succeeded"
        # the fake pool's own words (FakeTaskSandbox.run_hidden): no Docker verifier ran
        assert result.verifier_output == ("solution matched\n" if passed else "solution missing\n")
        assert result.reward == (1.0 if passed else 0.0)
        assert result.image_files is None or result.image_files.image == f"fake:{result.key.task}"
    assert any(r.status == "succeeded" for r in results)
    return results


def test_terminus2_episodes_run_through_the_runtime_on_the_fake_backend(fake_run: FakeRun) -> None:
    results = _graded_by_the_fake(fake_run, "terminus2")
    for result in results:
        first = result.trajectory.messages[0].content
        assert "StateM" not in first and "[rsrt]" not in first


def test_statem_episodes_run_through_the_runtime_on_the_fake_backend(fake_run: FakeRun) -> None:
    results = _graded_by_the_fake(fake_run, "statem")
    harness_text = [[m.content for m in r.trajectory.messages if m.origin == "harness"] for r in results]
    assert all(any("workflow state machine (StateM)" in t for t in texts) for texts in harness_text)
    # the state machine answered commands the model typed into the fake shell
    assert any(t.startswith("$ statem ") for texts in harness_text for t in texts)


def test_rsrt_episodes_run_through_the_runtime_on_the_fake_backend(fake_run: FakeRun) -> None:
    results = _graded_by_the_fake(fake_run, "rsrt")
    for result in results:
        claims = [m.content for m in result.trajectory.messages
                  if m.origin == "harness" and m.content.startswith("[rsrt] completion claim")]
        assert claims, result.key
        if result.status == "succeeded":  # the last hidden run is the verdict
            assert claims[-1].endswith("hidden tests passed")
    assert fake_run.done.returncode == 0, fake_run.done.stderr[-3000:]


def test_open_pipeline_gives_the_fake_pool_the_backend_opened(tmp_path: Path) -> None:
    """In process: the runtime's provider is the fake pool, and it graded every episode."""
    config = load_config([], ["sandbox.backend=fake", NO_DOCKER, 'run.harnesses=["terminus2","statem"]'])
    tasks = [t for t in load_dataset([str(BUNDLED_SUITE)]).tasks if t.name in TASKS]
    listing = tmp_path / "tasks.txt"
    listing.write_text("".join(f"{t.path}\n" for t in tasks))

    async def go() -> tuple[object, int, int, int]:
        async with open_pipeline(config, run_dir=tmp_path / "run", tasks_dir=listing, progress="none") as pipeline:
            statuses = [r.status async for r in pipeline.run(tasks)]
            pool = pipeline.runtime.pool
            assert isinstance(pool, FakeSandboxPool)
            stats = pool.statistics()
            return pool, pool.graded, stats.started, len(statuses)

    pool, graded, started, episodes = anyio.run(go)
    assert episodes == graded == started == 2 * len(TASKS)


def test_tasks_validate_goes_through_the_backend_table() -> None:
    """The oracle's solution, run by the fake, passes; the untouched sandbox fails."""
    done = subprocess.run(
        [PYTHON, "-m", "rsr_async", "tasks", "validate", *(str(BUNDLED_SUITE / n) for n in TASKS[:2]),
         "--set", "sandbox.backend=fake", "--set", NO_DOCKER],
        cwd=REPO, env=run_cli_env(), capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "2/2 tasks valid" in done.stdout
    for name in TASKS[:2]:
        (row,) = [line for line in done.stdout.splitlines() if line.startswith(name)]
        assert row.split()[3:5] == ["1.00", "0.00"] and row.endswith("ok"), row


@pytest.mark.slow
def test_ray_actors_open_the_fake_backend_through_the_same_table(tmp_path: Path) -> None:
    """``run --ray local``: the episode actor opens its runtime from ``sandbox.backend``,
    as the one-process run does; no Docker is reachable, so none was used."""
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [PYTHON, "-m", "rsr_async", "run", "--ray", "local", "--dataset", str(BUNDLED_SUITE / TASKS[0]),
         "--attempts", "2", "--progress", "none", "--run-dir", str(run_dir),
         "--set", 'run.harnesses=["terminus2","statem"]', "--set", "sandbox.backend=fake", "--set", NO_DOCKER],
        cwd=REPO, env=run_cli_env(), capture_output=True, text=True, timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ray: 1 episode actors on 1 nodes" in done.stderr
    with Store.open_readonly(run_dir) as store:
        results = list(store.outputs(EpisodeResult, stage="discover"))
    assert sorted(r.key.harness for r in results) == ["statem", "statem", "terminus2", "terminus2"]
    assert {r.verifier_output for r in results} <= {"solution matched\n", "solution missing\n"}
