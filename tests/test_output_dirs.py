"""``--out`` never deletes what the command did not write (issue 30): ``export`` and
``analyze`` replace an earlier export or analysis whole, and refuse, in one line naming
the directory, anything else that is not empty: a run directory, the directory holding
their own input, the working directory, the filesystem root."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from rsr_async.errors import ConfigError
from rsr_async.output_dirs import check_output_dir, is_analysis_dir, is_export_dir

from .analysis import scenario
from .conftest import PYTHON, REPO, run_cli_env


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "rsr_async", *args], cwd=cwd, env=run_cli_env(),
                          capture_output=True, text=True, timeout=240)


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def _digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` (less SQLite's own -wal/-shm), by content."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(("-wal", "-shm"))
    }


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A real run directory (SQLite store and event log) of the analysis scenario."""
    path = scenario.write_run(tmp_path / "run")
    assert (path / "run.db").is_file() and (path / "events.jsonl").is_file()
    return path


@pytest.mark.parametrize("command", ["export", "analyze"])
def test_out_set_to_the_run_directory_deletes_nothing(run_dir: Path, command: str) -> None:
    before = _digest(run_dir)
    extra = ["--allow-scripted"] if command == "export" else ["--no-figures"]
    line = _one_error_line(_cli(command, str(run_dir), "--out", str(run_dir), *extra))
    assert f"--out {run_dir}" in line and "run.db" in line and "Nothing was written" in line
    assert _digest(run_dir) == before
    assert not list(run_dir.parent.glob(".run.*")), "no staging directory is left behind"


def test_analyze_refuses_the_directory_holding_its_input(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    results = scenario.write_jsonl(data / "f.jsonl")
    (data / "notes.txt").write_text("mine\n")
    before = _digest(data)
    line = _one_error_line(_cli("analyze", "--results", str(results), "--out", str(data), "--no-figures"))
    assert "f.jsonl" in line and "notes.txt" in line
    assert _digest(data) == before


def test_analyze_to_the_working_directory_or_the_root_is_one_line(tmp_path: Path) -> None:
    results = scenario.write_jsonl(tmp_path / "f.jsonl")
    line = _one_error_line(_cli("analyze", "--results", str(results), "--out", ".", "--no-figures",
                                cwd=tmp_path))
    assert "--out ." in line and "f.jsonl" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.jsonl"]
    root = _one_error_line(_cli("analyze", "--results", str(results), "--out", "/", "--no-figures"))
    assert "--out /" in root and "filesystem root" in root


def test_an_earlier_output_of_ours_is_replaced(run_dir: Path, tmp_path: Path) -> None:
    export, analysis = tmp_path / "export", tmp_path / "analysis"
    export.mkdir()  # an empty directory is ours to fill
    for _ in range(2):  # the second run replaces the first's output whole
        assert _cli("export", str(run_dir), "--out", str(export), "--allow-scripted").returncode == 0
        assert _cli("analyze", str(run_dir), "--out", str(analysis), "--no-figures").returncode == 0
    assert is_export_dir(export) and is_analysis_dir(analysis)
    assert not is_export_dir(analysis) and not is_analysis_dir(export)
    # One foreign file makes either ours no longer: it is refused, and kept.
    for out, command, extra in ((export, "export", "--allow-scripted"), (analysis, "analyze", "--no-figures")):
        (out / "mine.txt").write_text("keep me\n")
        line = _one_error_line(_cli(command, str(run_dir), "--out", str(out), extra))
        assert "mine.txt" in line
        assert (out / "mine.txt").read_text() == "keep me\n"


def test_a_file_an_export_does_not_write_is_not_ours(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "export"
    assert _cli("export", str(run_dir), "--out", str(out), "--allow-scripted").returncode == 0
    (out / "atif" / "stale.json").write_text("{}")  # a trajectory in our folder: ours
    assert is_export_dir(out)
    for name in ("notes.txt", "atif/notes.txt"):
        (out / name).write_text("mine\n")
        assert not is_export_dir(out)
        with pytest.raises(ConfigError, match=name):
            check_output_dir(out, "export")
        (out / name).unlink()
    assert check_output_dir(out, "export") == out.resolve()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        check_output_dir(tmp_path / "file", "analysis")


def test_run_refuses_a_foreign_out_before_the_discover_stage(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine\n")
    line = _one_error_line(_cli("run", "--stages", "discover,export", "--out", str(tmp_path),
                                "--run-dir", str(tmp_path / "never")))
    assert "keep.txt" in line
    assert not (tmp_path / "never").exists(), "refused before any run directory was made"
