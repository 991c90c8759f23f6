"""Compose episodes at scale: N multi-container episodes at once on one Docker host.

``python -m rsr_async bench compose [--episodes 128] [--default-pools] [--json FILE]``

Each episode is a compose task's ``main`` and a ``web`` sidecar (``python3 -m
http.server``) on the episode's own private network, through the real
:class:`~rsr_async.sandbox.SandboxPool`; ``main`` fetches ``http://web:8000/`` by name.
All episodes are held open until every one has its sandbox (so N networks exist at
once), then released. Reported: episodes that got their sandbox and reached their
sidecar, the failures grouped by message, the wall time, the most networks alive at
once, and the containers and networks of the run left behind after the pool closed
(must be 0).

Docker's default address pools hold about 31 bridge networks per host (Harbor fails 2
of 32 trials at 32 at once on this); the pool's own small subnets
(``sandbox.compose_subnets``) are the fix measured here. ``--default-pools`` runs the
same with ``sandbox.compose_subnets=""`` (Docker's pools) to show the failure; it
takes every default pool of the host while it runs, so other users' new networks fail
meanwhile: do not use it on a shared machine.
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import emit, load_average, parser  # noqa: E402

from rsr_async.config import SandboxConfig  # noqa: E402
from rsr_async.sandbox import SandboxPool  # noqa: E402
from rsr_async.sandbox.hosts import open_client  # noqa: E402
from rsr_async.sandbox.pool import LABEL_RUN  # noqa: E402
from rsr_async.tasks.loader import load_task  # noqa: E402

_COMPOSE = """\
services:
  main:
    depends_on:
      web: {condition: service_started}
  web:
    image: {base}
    command: ["python3", "-m", "http.server", "8000", "--directory", "/etc"]
"""
_FETCH = (
    "for i in $(seq 100); do curl -fsS -o /dev/null http://web:8000/hostname && exit 0; "
    "sleep 0.2; done; exit 1"
)


def _task(root: Path, base: str) -> Path:
    task = root / "compose-scale"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "task.toml").write_text('[task]\nname = "compose-scale"\n')
    (task / "instruction.md").write_text("Reach the web service.\n")
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (task / "environment" / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n")
    (task / "environment" / "docker-compose.yaml").write_text(_COMPOSE.replace("{base}", base))
    return task


async def _leftovers(url: str, run_id: str) -> tuple[int, int]:
    docker, connector = open_client(url)
    try:
        with anyio.fail_after(60):
            label = {"label": [f"{LABEL_RUN}={run_id}"]}
            containers = await docker.containers.list(all=True, filters=label)
            networks = await docker.networks.list(filters=label)
        return len(containers), len(networks)
    finally:
        await docker.close()
        await connector.close()


async def _run(episodes: int, default_pools: bool) -> dict[str, Any]:
    config = SandboxConfig(api_timeout_s=300.0, **({"compose_subnets": ""} if default_pools else {}))
    run_id = f"bench-compose-{uuid.uuid4().hex[:10]}"
    errors: Counter[str] = Counter()
    reached = 0
    held = 0
    peak = 0
    all_in = anyio.Event()
    settled = 0
    with tempfile.TemporaryDirectory(prefix="rsr-bench-compose-") as tmp:
        task = load_task(_task(Path(tmp), config.base_image))
        async with SandboxPool(config, run_id=run_id, run_dir=Path(tmp) / "run") as pool:
            await pool.ensure_image(task)
            started = time.monotonic()

            def settle() -> None:
                nonlocal settled
                settled += 1
                if settled == episodes:
                    all_in.set()

            async def one(index: int) -> None:
                nonlocal reached, held, peak
                try:
                    async with pool.sandbox(task, key=f"c{index}") as sandbox:
                        held += 1
                        peak = max(peak, held)
                        result = await sandbox.run(_FETCH, time_limit=60)
                        if result.exit_code == 0:
                            reached += 1
                        else:
                            errors[f"fetch exited {result.exit_code}: {result.output[-200:]}"] += 1
                        settle()
                        with anyio.fail_after(900):
                            await all_in.wait()  # every network alive at once
                        held -= 1
                except Exception as exc:
                    errors[" ".join(str(exc).split())[:300]] += 1
                    settle()

            with anyio.fail_after(1800):
                async with anyio.create_task_group() as tg:
                    for index in range(episodes):
                        tg.start_soon(one, index)
            wall = time.monotonic() - started
            stats = pool.statistics()
        containers, networks = await _leftovers(config.docker_urls[0], run_id)
    return {
        "episodes": episodes,
        "subnets": config.compose_subnets or "Docker's default pools",
        "reached_sidecar": reached,
        "failed": sum(errors.values()),
        "errors": dict(errors.most_common(5)),
        "peak_open_at_once": peak,
        "wall_s": round(wall, 1),
        "containers_started": stats.started,
        "remove_failures": stats.remove_failures,
        "left_behind": {"containers": containers, "networks": networks},
    }


def main(argv: list[str]) -> int:
    p = parser(__doc__ or "")
    p.set_defaults(repeat=1)
    p.add_argument("--episodes", type=int, default=128)
    p.add_argument("--default-pools", action="store_true",
                   help="use Docker's default address pools (shows the failure; not on a shared host)")
    args = p.parse_args(argv)
    load = load_average()
    runs = [anyio.run(_run, args.episodes, args.default_pools) for _ in range(args.repeat)]
    result = {"benchmark": "compose", "load_before": load, "runs": runs}
    emit(result, args.json)
    bad = any(r["failed"] or any(r["left_behind"].values()) for r in runs)
    return 1 if bad and not args.default_pools else 0
