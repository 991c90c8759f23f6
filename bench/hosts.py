"""Several Docker hosts: episodes/min over one daemon vs two, and shipping vs building.

``python -m rsr_async bench hosts --json FILE`` starts a private second ``dockerd`` on
this machine (tests/sandbox/second_daemon.py), ships the base image to it and times that
against rebuilding there, then runs the same short episodes (a fresh container, a few
commands through the persistent shell, removal) over the main daemon alone and over both.
Both daemons share this machine's CPUs, so the ratio says what a second daemon adds on
one box, not what a second machine would.
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import emit, parser  # noqa: E402

from rsr_async.config import SandboxConfig  # noqa: E402
from rsr_async.sandbox import SandboxPool  # noqa: E402
from rsr_async.sandbox.hosts import open_client  # noqa: E402
from rsr_async.sandbox.images import build_task_image, ship_between  # noqa: E402
from rsr_async.schema import Task  # noqa: E402
from tests.sandbox.second_daemon import SecondDaemon, unavailable  # noqa: E402

MAIN = "unix:///var/run/docker.sock"
FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "sandbox" / "fixtures"


async def _episodes(urls: tuple[str, ...], *, episodes: int, concurrency: int, commands: int) -> float:
    """Episodes per minute over ``urls``."""
    config = SandboxConfig(docker_urls=urls, starts_per_s=50.0, api_timeout_s=60.0)
    task = Task(name="bench-hosts", path=str(FIXTURES), instruction="-",
                docker_image=config.base_image)
    limiter = anyio.Semaphore(concurrency)
    async with SandboxPool(config, run_id=f"bench-hosts-{uuid.uuid4().hex[:8]}") as pool:

        async def one(i: int) -> None:
            async with limiter, pool.sandbox(task, key=f"e{i}") as box:
                for _ in range(commands):
                    result = await box.run("ls / | wc -l", time_limit=30)
                    assert result.exit_code == 0, result.output

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(episodes):
                tg.start_soon(one, i)
        return episodes / (time.perf_counter() - start) * 60.0


async def _remove_image(url: str, name: str) -> None:
    docker, connector = open_client(url)
    try:
        with anyio.fail_after(120):
            await docker.images.delete(name, force=True)
    finally:
        await docker.close()
        await connector.close()


async def _build_on(url: str, config: SandboxConfig) -> float:
    task = Task(name="bench-hosts-ok", path=str(FIXTURES), instruction="-",
                environment_dir=str(FIXTURES / "ok"))
    docker, connector = open_client(url)
    try:
        start = time.perf_counter()
        tag, _ = await build_task_image(docker, task, base_image=config.base_image, url=url,
                                        api_timeout_s=600)
        took = time.perf_counter() - start
    finally:
        await docker.close()
        await connector.close()
    await _remove_image(url, tag)
    return took


async def _main(args: Any, daemon: SecondDaemon) -> dict[str, Any]:
    base = SandboxConfig().base_image
    ship_s: list[float] = []
    for i in range(args.repeat):
        if i:
            await _remove_image(daemon.url, base)
        start = time.perf_counter()
        await ship_between(MAIN, daemon.url, base, timeout_s=1800)
        ship_s.append(time.perf_counter() - start)
    build_s = [await _build_on(daemon.url, SandboxConfig()) for _ in range(args.repeat)]
    one: list[float] = []
    two: list[float] = []
    for _ in range(args.repeat):
        kw = {"episodes": args.episodes, "concurrency": args.concurrency, "commands": args.commands}
        one.append(await _episodes((MAIN,), **kw))
        two.append(await _episodes((MAIN, daemon.url), **kw))
    return {
        "benchmark": "hosts",
        "second_daemon_storage_driver": daemon.driver,
        "ship_base_image_s": round(statistics.median(ship_s), 2),
        "build_small_task_image_over_present_base_s": round(statistics.median(build_s), 2),
        "episodes": args.episodes, "concurrency": args.concurrency, "commands_per_episode": args.commands,
        "episodes_per_min_one_daemon": round(statistics.median(one), 1),
        "episodes_per_min_two_daemons": round(statistics.median(two), 1),
        "ratio_two_vs_one": round(statistics.median(two) / statistics.median(one), 2),
        "runs": {"one": [round(x, 1) for x in one], "two": [round(x, 1) for x in two],
                 "ship_s": [round(x, 2) for x in ship_s], "build_s": [round(x, 2) for x in build_s]},
        "repeat": args.repeat,
    }


def main(argv: list[str]) -> int:
    p = parser(__doc__.splitlines()[0] if __doc__ else "hosts benchmark")
    p.set_defaults(repeat=3)
    p.add_argument("--episodes", type=int, default=48)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--commands", type=int, default=5)
    args = p.parse_args(argv)
    why = unavailable()
    if why:
        print(f"bench hosts: no second Docker daemon: {why}", file=sys.stderr)
        return 2
    daemon = SecondDaemon()
    try:
        daemon.start()
        result = anyio.run(_main, args, daemon)
    finally:
        daemon.stop()
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
