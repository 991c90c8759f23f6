"""Shared test fixtures. Tests use real parts: Docker, HTTP, SQLite, subprocesses."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def repo_root() -> Path:
    return REPO


def run_cli_env() -> dict[str, str]:
    """Environment for running ``python -m rsr_async`` in a subprocess."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


PYTHON = sys.executable
