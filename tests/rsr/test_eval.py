"""`python -m rsr_async eval`: bad input fails at once, with one line naming the flag or
path, before any server, sandbox or directory is touched."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rsr_async.analysis.checkpoints import Checkpoint
from rsr_async.config import load_config
from rsr_async.errors import ConfigError, TaskError
from rsr_async.rsr.eval_commands import default_eval_dir, load_benchmarks, parse_checkpoints
from rsr_async.tasks import BUNDLED_SUITE
from tests.conftest import run_cli_env

URL = "http://127.0.0.1:30000"


def _eval(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rsr_async", "eval", *args], cwd=cwd,
                          env=run_cli_env(), capture_output=True, text=True, timeout=120)


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    """A one-task benchmark directory."""
    shutil.copytree(BUNDLED_SUITE / "word-frequency", tmp_path / "bench" / "word-frequency")
    return tmp_path / "bench"


def _closed_port() -> int:
    with socket.socket() as s:  # bound, never listening, closed on exit: nothing answers
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.parametrize(
    ("models", "says"),
    [
        (["foo"], "--model foo: expected NAME=URL (e.g. --model base=http://127.0.0.1:30000)"),
        ([f"a={URL}", "a=http://127.0.0.1:30001"],
         "--model a=http://127.0.0.1:30001: the name 'a' is given twice; each column needs its own"),
        # The one URL check run --llm-url uses too (issue 30: these were tracebacks here).
        (["a=http://127.0.0.1:99999"],
         "--model a=http://127.0.0.1:99999: the URL after '=' ('http://127.0.0.1:99999'): "
         "not a valid URL (Port out of range 0-65535)"),
        (["a=http://[::1"],
         "--model a=http://[::1: the URL after '=' ('http://[::1'): not a valid URL (Invalid IPv6 URL)"),
    ],
)
def test_bad_model_flags(tmp_path: Path, bench: Path, models: list[str], says: str) -> None:
    args = [a for m in models for a in ("--model", m)]
    out = _eval(tmp_path, *args, "--dataset", str(bench))
    assert out.returncode == 1, out.stderr
    assert out.stderr == f"python -m rsr_async eval: error: {says}\n"
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (f"={URL}", f"--model ={URL}: the checkpoint's name (before '=') is empty"),
        (f"../up={URL}", f"--model ../up={URL}: the name '../up' names a directory"),
        ("eval.json=http://x:1", "names a directory"),  # would clash with the eval's own file
        ("a=ftp://host/x", "--model a=ftp://host/x: the URL after '=' ('ftp://host/x'): expected an http://"),
        ("a=", "--model a=: the URL after '=' (''): expected an http://"),
    ],
)
def test_more_bad_model_values(value: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_checkpoints([value])
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_dataset_with_no_tasks(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    out = _eval(tmp_path, "--model", f"a={URL}", "--dataset", str(empty))
    assert out.returncode == 1
    assert out.stderr.strip() == (
        f"python -m rsr_async eval: error: --dataset {empty}: no task directory in {empty} "
        "(none holds a task.toml or task.yaml)"
    )
    assert not (tmp_path / "runs").exists()


def test_dataset_with_only_malformed_tasks(tmp_path: Path) -> None:
    broken = tmp_path / "broken" / "t1"
    broken.mkdir(parents=True)
    (broken / "task.toml").write_text("garbage = [\n")
    out = _eval(tmp_path, "--model", f"a={URL}", "--dataset", str(broken.parent))
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1
    assert f"--dataset {broken.parent}: no loadable task in {broken.parent}: 1 malformed" in out.stderr


def test_missing_dataset_and_clashing_benchmarks(tmp_path: Path, bench: Path) -> None:
    with pytest.raises(TaskError, match=f"--dataset {tmp_path / 'nope'}: not a directory"):
        load_benchmarks([str(tmp_path / "nope")])
    # Two directories of one name would be one benchmark row twice.
    twin = tmp_path / "other" / "bench"
    shutil.copytree(BUNDLED_SUITE / "merge-intervals", twin / "merge-intervals")
    with pytest.raises(ConfigError) as caught:
        load_benchmarks([str(bench), str(twin)])
    assert str(caught.value) == (
        f"--dataset {twin}: benchmark 'bench' (the directory's name) is already {bench}; "
        "benchmark directories need distinct names"
    )
    # One task in two benchmarks: its episodes (keyed by task name) would be shared.
    again = tmp_path / "again"
    shutil.copytree(BUNDLED_SUITE / "word-frequency", again / "word-frequency")
    with pytest.raises(TaskError, match="task 'word-frequency' is also in benchmark 'bench'"):
        load_benchmarks([str(bench), str(again)])
    # Benchmarks keep --dataset order, each named by its directory.
    loaded = load_benchmarks([str(again), str(twin)])
    assert {k: [t.name for t in v] for k, v in loaded.items()} == {
        "again": ["word-frequency"], "bench": ["merge-intervals"]}
    assert list(loaded) == ["again", "bench"]


def test_a_server_that_does_not_answer_is_named(tmp_path: Path, bench: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    out = _eval(tmp_path, "--model", f"good={url}", "--dataset", str(bench), "--run-dir", "ev")
    assert out.returncode == 1
    assert out.stderr.strip() == (
        f"python -m rsr_async eval: error: --model good={url}: no server answers {url}/health "
        "within 10 s; start it, or fix the URL"
    )
    assert not (tmp_path / "ev").exists()  # nothing was started


def test_parse_checkpoints_keeps_order_and_trims() -> None:
    got = parse_checkpoints(["base=http://gpu1:30000/", " sft = https://gpu2:443 "])
    assert got == [Checkpoint(name="base", url="http://gpu1:30000"),
                   Checkpoint(name="sft", url="https://gpu2:443")]
    with pytest.raises(ConfigError, match="names a directory"):
        parse_checkpoints(["eval.json=http://x:1"])  # would clash with the eval directory's file


def test_default_eval_dir_follows_settings_datasets_and_models() -> None:
    config = load_config(values={"run": {"attempts": 3}})
    models = [Checkpoint(name="a", url="http://x:1"), Checkpoint(name="b", url="http://y:2")]
    one = default_eval_dir(config, ["/d/tb2"], models)
    assert one.parent == Path("runs") and one.name.startswith("eval-")
    assert default_eval_dir(config, ["/d/tb2"], models) == one
    assert default_eval_dir(config, ["/d/tb2"], models[:1]) != one
    assert default_eval_dir(config, ["/d/other"], models) != one
    assert default_eval_dir(load_config(values={"run": {"attempts": 2}}), ["/d/tb2"], models) != one
    # What only changes how fast it runs does not move it.
    assert default_eval_dir(load_config(values={"run": {"attempts": 3, "concurrency": 7}}),
                            ["/d/tb2"], models) == one
