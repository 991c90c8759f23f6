"""Bad input to ``analyze``: one line naming the file, field or directory; exit 1 (2 for
usage); nothing written over an earlier analysis."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ..conftest import PYTHON, REPO, run_cli_env
from . import scenario


def _analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "rsr_async", "analyze", *args], cwd=REPO,
                          env=run_cli_env(), capture_output=True, text=True, timeout=240)


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_a_directory_without_a_run(tmp_path: Path) -> None:
    proc = _analyze(str(tmp_path))
    assert proc.returncode == 1
    assert str(tmp_path) in _one_error_line(proc) and "no run database" in proc.stderr


def test_a_malformed_results_line_names_the_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text('{"task": "a", "harness": "h", "attempt": 0, "reward": 1}\n'
                    '{"task": "a", "harness": "h", "attempt": "one", "reward": 1}\n')
    proc = _analyze("--results", str(path), "--out", str(tmp_path / "out"))
    assert proc.returncode == 1
    line = _one_error_line(proc)
    assert f"{path}:2" in line and "attempt" in line
    assert not (tmp_path / "out").exists()


def test_usage_errors_say_what_to_give(tmp_path: Path) -> None:
    path = scenario.write_jsonl(tmp_path / "results.jsonl")
    assert "--out: required" in _one_error_line(_analyze("--results", str(path)))
    both = _analyze(str(tmp_path), "--results", str(path))
    assert "exactly one of RUN_DIR" in _one_error_line(both)
    subset = _analyze("--results", str(path), "--out", str(tmp_path / "o"), "--subset-key", "metadata.x")
    assert "--subset-key" in _one_error_line(subset)


def test_a_bad_subset_key_leaves_the_previous_analysis(tmp_path: Path) -> None:
    run_dir = scenario.write_run(tmp_path / "run")
    assert _analyze(str(run_dir), "--no-figures").returncode == 0
    before = (run_dir / "analysis" / "tables" / "coverage.md").read_text()
    proc = _analyze(str(run_dir), "--subset-key", "source")
    assert proc.returncode == 1 and "metadata.KEY" in _one_error_line(proc)
    assert (run_dir / "analysis" / "tables" / "coverage.md").read_text() == before
    assert "no figures" in (run_dir / "analysis" / "report.html").read_text().lower()
