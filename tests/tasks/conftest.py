"""Fixtures for the tasks room: task directories on disk, a real sandbox pool."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rsr_async.config import SandboxConfig
from rsr_async.sandbox import SandboxPool

FIXTURES = Path(__file__).resolve().parent / "fixtures"

# The fixtures hold task test files (tests/test_outputs.py) meant for containers, not for us.
collect_ignore_glob = ["fixtures/*", "thirdparty/*"]


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
async def pool(tmp_path: Path) -> AsyncIterator[SandboxPool]:
    """A real Docker pool with its own run id; asserts nothing is left behind."""
    config = SandboxConfig(starts_per_s=20.0, api_timeout_s=60.0)
    async with SandboxPool(config, run_id=f"test-tasks-{uuid.uuid4().hex[:10]}", run_dir=tmp_path / "run") as p:
        yield p
        assert await p.containers() == []
