"""Sandbox throughput: persistent shells over exec streams vs one ``docker exec`` per command.

For each container count (8, 64, 256 by default) the same containers are measured both
ways, in the same run:

- ``persistent``: one bash per container on one attached exec stream (the engine's hot
  path): ``send`` + ``wait`` (prompt-marker early return) + ``observe``, all containers
  at once, for ``--seconds``.
- ``cli``: one ``docker exec CONTAINER bash -c CMD`` process per command, the mechanism
  Harbor's Docker environment uses for every tmux call, one in flight per container
  (at most ``--cli-inflight`` processes at once).

Two workloads: a shell builtin (``echo``) and a spawn-heavy command (``ls / | wc -l``),
which is bounded by process creation inside the containers. Also container starts/s
through the pool (with its start limiter), removals/s and memory per idle sandbox.

``python -m rsr_async bench sandbox --json FILE``
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import emit, parser  # noqa: E402

from rsr_async.config import SandboxConfig  # noqa: E402
from rsr_async.sandbox import DockerSandbox, DockerShell, SandboxPool  # noqa: E402
from rsr_async.schema import Task  # noqa: E402

WORKLOADS = {"builtin": "echo hi", "spawn": "ls / | wc -l"}


def _mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


async def _persistent(shells: list[DockerShell], command: str, seconds: float) -> float:
    done = 0
    deadline = time.monotonic() + seconds

    async def loop(shell: DockerShell) -> None:
        nonlocal done
        while time.monotonic() < deadline:
            await shell.send(command + "\n")
            if not await shell.wait(30):
                raise RuntimeError(f"command did not finish: {shell.screen()[-300:]}")
            shell.observe()
            done += 1

    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        for shell in shells:
            tg.start_soon(loop, shell)
    return done / (time.monotonic() - started)


async def _cli(ids: list[str], command: str, seconds: float, inflight: int) -> float:
    done = 0
    deadline = time.monotonic() + seconds
    limiter = anyio.CapacityLimiter(inflight)

    async def loop(container_id: str) -> None:
        nonlocal done
        while time.monotonic() < deadline:
            async with limiter:
                if time.monotonic() >= deadline:
                    return
                with anyio.fail_after(120):
                    result = await anyio.run_process(
                        ["docker", "exec", container_id, "bash", "-c", command], check=False
                    )
                if result.returncode != 0:
                    raise RuntimeError(result.stderr.decode(errors="replace"))
                done += 1

    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        for container_id in ids:
            tg.start_soon(loop, container_id)
    return done / (time.monotonic() - started)


def _shim_rss_mib(ids: list[str]) -> float:
    """Median resident memory of the containerd shims serving these containers, in MiB."""
    wanted = set(ids)
    values: list[float] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            if not args or not args[0].endswith(b"containerd-shim-runc-v2"):
                continue
            if b"-id" not in args or args[args.index(b"-id") + 1].decode() not in wanted:
                continue
            values.extend(
                int(line.split()[1]) / 1024
                for line in (proc / "status").read_text().splitlines()
                if line.startswith("VmRSS:")
            )
        except (OSError, IndexError):
            continue
    return statistics.median(values) if values else float("nan")


async def _idle_memory(sandboxes: list[DockerSandbox]) -> float:
    """Median cgroup memory of up to 16 idle sandboxes, in MiB (shell open, nothing running)."""
    values: list[float] = []
    for sandbox in sandboxes[:16]:
        result = await sandbox.run(
            "cat /sys/fs/cgroup/memory/memory.usage_in_bytes 2>/dev/null "
            "|| cat /sys/fs/cgroup/memory.current",
            time_limit=10,
        )
        if result.output.strip().isdigit():
            values.append(int(result.output) / 2**20)
    return statistics.median(values) if values else float("nan")


async def _measure(count: int, args: Any, task: Task, config: SandboxConfig) -> dict[str, Any]:
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    out: dict[str, Any] = {"containers": count}
    memory_before = _mem_available()
    async with SandboxPool(config, run_id=run_id) as pool:
        sandboxes: list[DockerSandbox] = []
        shells: list[DockerShell] = []
        release = anyio.Event()
        all_ready = anyio.Event()

        async def hold(i: int) -> None:
            async with pool.sandbox(task, key=f"bench-{i}") as sandbox:
                shells.append(await sandbox.shell())
                sandboxes.append(sandbox)
                if len(sandboxes) == count:
                    all_ready.set()
                await release.wait()

        async with anyio.create_task_group() as tg:
            started = time.monotonic()
            for i in range(count):
                tg.start_soon(hold, i)
            with anyio.fail_after(600):
                await all_ready.wait()
            out["start_s"] = round(time.monotonic() - started, 2)
            out["starts_per_s"] = round(count / out["start_s"], 2)
            await anyio.sleep(1.0)
            out["mem_available_drop_per_sandbox_mib"] = round(
                (memory_before - _mem_available()) / count / 2**20, 1
            )
            out["cgroup_mem_per_idle_sandbox_mib"] = round(await _idle_memory(sandboxes), 1)
            ids = [s.id for s in sandboxes]
            out["shim_rss_per_sandbox_mib"] = round(_shim_rss_mib(ids), 1)
            for name, command in WORKLOADS.items():
                persistent = [
                    await _persistent(shells, command, args.seconds) for _ in range(args.repeat)
                ]
                cli = [
                    await _cli(ids, command, args.seconds, min(count, args.cli_inflight))
                    for _ in range(args.repeat)
                ]
                p, c = statistics.median(persistent), statistics.median(cli)
                out[name] = {
                    "command": command,
                    "persistent_cmds_per_s": round(p, 1),
                    "cli_cmds_per_s": round(c, 1),
                    "ratio": round(p / c, 1) if c else None,
                    "persistent_runs": [round(x, 1) for x in persistent],
                    "cli_runs": [round(x, 1) for x in cli],
                    "cli_inflight": min(count, args.cli_inflight),
                }
            release.set()
            removing = time.monotonic()
        out["remove_s"] = round(time.monotonic() - removing, 2)
        out["removes_per_s"] = round(count / out["remove_s"], 2) if out["remove_s"] else None
        stats = pool.statistics()
        out["start_failures"] = stats.start_failures
    return out


async def _main(args: Any) -> dict[str, Any]:
    config = SandboxConfig(
        starts_per_s=args.starts_per_s,
        max_concurrent_starts=args.concurrent_starts,
        default_cpus=2.0,
        default_memory_mb=512,
    )
    task = Task(name="bench", path=".", instruction="bench", docker_image=config.base_image)
    results = [await _measure(count, args, task, config) for count in args.containers]
    return {
        "benchmark": "sandbox",
        "seconds_per_measurement": args.seconds,
        "repeat": args.repeat,
        "starts_per_s_limit": args.starts_per_s,
        "max_concurrent_starts": args.concurrent_starts,
        "results": results,
    }


def main(argv: list[str]) -> int:
    p = parser(__doc__.splitlines()[0] if __doc__ else "sandbox benchmark")
    p.set_defaults(repeat=3)
    p.add_argument("--containers", type=int, nargs="+", default=[8, 64, 256])
    p.add_argument("--seconds", type=float, default=2.5, help="length of one measurement")
    p.add_argument("--cli-inflight", type=int, default=64,
                   help="most docker exec processes at once (more only thrashes the CPUs)")
    p.add_argument("--starts-per-s", type=float, default=50.0)
    p.add_argument("--concurrent-starts", type=int, default=16)
    args = p.parse_args(argv)
    try:
        import uvloop

        result = uvloop.run(_main(args))
    except ImportError:
        result = anyio.run(_main, args)
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
