"""The episode's terminal two ways: tmux in the sandbox vs emulating it in-process.

- ``tmux``: :class:`DockerShell`, Harbor's tmux pane in the container, driven over one
  control-mode exec stream (plus a ``sh`` probe stream for the early-return check).
- ``emulated``: :class:`PtyShell`, a login bash on a pty exec stream with the in-process
  emulation (pyte) and its stream-based observations (what every episode used before).

Fidelity: the share of the terminal corpus (``tests/sandbox/golden/tmux_corpus.json``,
recorded with Harbor's own ``TmuxSession`` and real tmux) each one reproduces exactly.
Cost, on the same container, measured back to back: shell start-up, the latency of one
command that returns early (``echo hi``: send + wait + observe), the client's CPU time
per command, and the resident memory of what the shell added inside the container.

``python -m rsr_async bench terminal [--repeat 5] [--commands 40] [--json FILE]``
"""

from __future__ import annotations

import json
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
from rsr_async.harness import protocol  # noqa: E402
from rsr_async.sandbox import DockerSandbox, DockerShell, SandboxPool  # noqa: E402
from rsr_async.sandbox.shell import PtyShell  # noqa: E402
from rsr_async.schema import Task  # noqa: E402

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "sandbox" / "golden" / "tmux_corpus.json"
SHELL_PROCESSES = "ps -eo rss=,args= | grep -E 'tmux|rsr-probe|bash --login' | grep -v grep"


async def _open(kind: str, sandbox: DockerSandbox) -> DockerShell | PtyShell:
    if kind == "tmux":
        return await sandbox.open_shell()
    shell = PtyShell(sandbox._container, name=sandbox.name, api_timeout_s=60)
    await shell.start(sandbox._tg, env=sandbox._env, workdir=sandbox._workdir)
    return shell


async def _fidelity(kind: str, sandbox: DockerSandbox, corpus: dict[str, Any]) -> int:
    shell = await _open(kind, sandbox)
    try:
        shell.observe()
        same = int(protocol.screen_text(shell) == corpus["initial"])
        for turn in corpus["turns"]:
            for keys, duration in turn["commands"]:
                await shell.send(keys)
                await shell.wait(duration)
            same += protocol.observe(shell) == turn["observation"]
        return same
    finally:
        await shell.close()


async def _cost(kind: str, sandbox: DockerSandbox, commands: int) -> dict[str, float]:
    started = time.perf_counter()
    shell = await _open(kind, sandbox)
    start_s = time.perf_counter() - started
    try:
        rss = await sandbox.run(SHELL_PROCESSES, time_limit=30)
        latencies = []
        cpu = time.process_time()
        for _ in range(commands):
            began = time.perf_counter()
            await shell.send("echo hi\n")
            if not await shell.wait(30):
                raise RuntimeError(f"{kind}: echo did not return early")
            protocol.observe(shell)
            latencies.append(time.perf_counter() - began)
        cpu_per_command = (time.process_time() - cpu) / commands
    finally:
        await shell.close()
    return {
        "start_s": start_s,
        "command_ms": 1000 * statistics.median(latencies),
        "client_cpu_ms_per_command": 1000 * cpu_per_command,
        "container_rss_kib": sum(int(line.split()[0]) for line in rss.output.splitlines() if line.strip()),
    }


async def _main(repeat: int, commands: int) -> dict[str, Any]:
    corpus = json.loads(CORPUS.read_text("utf-8"))
    total = len(corpus["turns"]) + 1
    task = Task(name="bench-terminal", path=str(CORPUS.parent), instruction="bench",
                docker_image=SandboxConfig().base_image, workdir=corpus["workdir"])
    result: dict[str, Any] = {"benchmark": "terminal", "corpus_observations": total}
    async with SandboxPool(SandboxConfig(), run_id=f"bench-terminal-{uuid.uuid4().hex[:8]}") as pool:
        for kind in ("tmux", "emulated"):
            async with pool.sandbox(task, key=f"fidelity-{kind}") as sandbox:
                same = await _fidelity(kind, sandbox, corpus)
            runs: list[dict[str, float]] = []
            for i in range(repeat):
                async with pool.sandbox(task, key=f"cost-{kind}-{i}") as sandbox:
                    runs.append(await _cost(kind, sandbox, commands))
            result[kind] = {
                "identical": same,
                "identical_share": same / total,
                "median": {key: statistics.median(r[key] for r in runs) for key in runs[0]},
                "runs": runs,
            }
    return result


def main(argv: list[str]) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--commands", type=int, default=40, help="echo commands per cost run")
    args = p.parse_args(argv)
    emit(anyio.run(_main, args.repeat, args.commands), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
