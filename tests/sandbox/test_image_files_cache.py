"""A task image's listing is kept by image id across pools (sandbox.image_files_cache)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from rsr_async.config import SandboxConfig
from rsr_async.sandbox import SandboxPool
from rsr_async.schema import ImageFiles

from .conftest import containers_of, new_run_id, remove_image
from .test_image_files import ledger_task


@pytest.mark.docker
async def test_a_later_pool_reads_the_kept_listing_and_a_broken_one_lists_again(tmp_path: Path) -> None:
    task = ledger_task(tmp_path)
    cache = tmp_path / "cache"
    config = SandboxConfig(starts_per_s=20.0, api_timeout_s=60.0, image_files_cache=str(cache))
    tag = None
    try:
        async with SandboxPool(config, run_id=new_run_id(), run_dir=tmp_path / "run1") as pool:
            tag = await pool.ensure_image(task)
            listed = await pool.image_files(task)
        assert "/app/ledger.py" in listed.paths and not listed.truncated
        (entry,) = cache.glob("*.json")
        assert msgspec.json.decode(entry.read_bytes(), type=ImageFiles) == listed
        # Marked, so the next pool's answer shows where it came from.
        entry.write_bytes(msgspec.json.encode(msgspec.structs.replace(listed, listed_s=123.0)))
        async with SandboxPool(config, run_id=new_run_id(), run_dir=tmp_path / "run2") as pool:
            kept = await pool.image_files(task)
        assert kept.listed_s == 123.0 and kept.paths == listed.paths
        # An unreadable entry is a miss: the image is listed again, and the entry rewritten.
        entry.write_text("{not json")
        async with SandboxPool(config, run_id=new_run_id(), run_dir=tmp_path / "run3") as pool:
            again = await pool.image_files(task)
            assert await containers_of(pool.run_id) == []
        assert again.paths == listed.paths and again.listed_s != 123.0
        assert msgspec.json.decode(entry.read_bytes(), type=ImageFiles) == again
    finally:
        if tag:
            await remove_image(tag)
