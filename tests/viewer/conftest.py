"""Fixtures of the viewer's tests: one synthetic run, written once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from .runs import write_run


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic run of :mod:`tests.viewer.runs` (read-only for the tests)."""
    path = tmp_path_factory.mktemp("viewer-run")
    write_run(path)
    return path
