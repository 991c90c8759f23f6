"""Record the terminal corpus: what Harbor 0.25.0's Terminus 2 shows for each keystroke
sequence, with real tmux, into ``tests/sandbox/golden/tmux_corpus.json``.

On demand, not in CI (needs Python >= 3.12 with ``pip install harbor==0.25.0``, Debian's
``tmux`` on this host, Docker and the base image)::

    python3.12 -m venv /tmp/harbor-venv && /tmp/harbor-venv/bin/pip install harbor==0.25.0
    /tmp/harbor-venv/bin/python scripts/record_tmux_corpus.py [--image rsr-base:bookworm]

Harbor's own code does the work: ``TmuxSession`` starts the session, sends the keys and
builds every observation (``get_incremental_output``), and ``Terminus2._limit_output_length``
cuts it, as in an episode. Only where commands run differs: Harbor runs ``tmux`` inside
the container; here the host's tmux runs them (through a small environment adapter) and
its pane's ``bash --login`` is the container's, reached with ``docker exec -it``, in a
container made like a sandbox (hostname ``sandbox``, workdir ``/tmp``). Each command
waits its full duration, as Terminus 2 does; the durations leave room to spare.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path, PurePosixPath

from harbor.agents.terminus_2.terminus_2 import Terminus2
from harbor.agents.terminus_2.tmux_session import TmuxSession
from harbor.environments.base import ExecResult

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "sandbox" / "golden" / "tmux_corpus.json"
LABEL = "rsr_async.run=record-tmux-corpus"
WORKDIR = "/tmp"

FLOOD = "head -c 1000000 /dev/zero | tr '\\0' x | fold -w 100\n"
"""1 MB in 10,000 lines: more than the 2000 lines of history Harbor's pane keeps."""

# Each turn is the commands of one model reply: (keystrokes, duration in seconds).
CORPUS: list[tuple[str, list[tuple[str, float]]]] = [
    ("ls", [("ls -la /etc/apt/apt.conf.d\n", 1.0)]),
    ("echo", [("echo hello world\n", 1.0)]),
    ("exit status", [("false; echo status=$?\n", 1.0)]),
    ("stderr", [("ls /nonexistent\n", 1.0)]),
    ("long output line wraps at 160", [("printf 'abcdefghij%.0s' $(seq 40); echo\n", 1.0)]),
    ("long command line wraps", [("echo " + "long-argument-" * 14 + "end\n", 1.0)]),
    ("carriage-return progress bar", [
        ("for i in 1 2 3 4 5; do printf '\\rprogress %d/5' $i; sleep 0.05; done; echo\n", 2.0)
    ]),
    ("colours", [("printf '\\033[31mred\\033[0m \\033[1;32mbold green\\033[0m\\n'\n", 1.0)]),
    ("ls with colours", [("ls --color=always /usr\n", 1.0)]),
    ("tabs and unicode", [("printf 'a\\tb\\tc\\n'; echo 'héllo wörld ✓ 日本語'\n", 1.0)]),
    ("heredoc", [
        ("cat > /tmp/h.txt <<'EOF'\nline one\n  indented $HOME\nEOF\n", 1.0),
        ("cat /tmp/h.txt\n", 1.0),
    ]),
    ("two commands in one reply", [("echo one\n", 1.0), ("echo two\n", 1.0)]),
    ("300 lines", [("seq 1 300\n", 1.5)]),
    ("cd changes the prompt", [("cd /usr/share\n", 1.0), ("cd /tmp\n", 1.0)]),
    ("python REPL start", [("python3\n", 1.0)]),
    ("python REPL expression", [("print(6 * 7)\n", 0.5)]),
    ("python REPL block", [("for i in range(3):\n    print(i)\n\n", 0.5)]),
    ("python REPL exit", [("exit()\n", 0.5)]),
    ("bc", [("bc -q\n", 0.5), ("2^64\n", 0.5), ("quit\n", 0.5)]),
    ("sleep running", [("sleep 30\n", 0.5)]),
    ("C-c on sleep", [("C-c", 1.0)]),
    ("typed without Enter", [("echo typed-not-run", 0.5)]),
    ("then Enter", [("Enter", 0.5)]),
    ("C-c on a typed line", [("echo never", 0.3), ("C-c", 1.0)]),
    ("empty keystrokes poll", [("", 0.5)]),
    ("less (alternate screen)", [("seq 1 200 | less\n", 0.7)]),
    ("less scrolled", [("G", 0.5)]),
    ("less quit", [("q", 1.0)]),
    ("clear", [("clear\n", 1.0)]),
    ("after clear", [("echo after clear\n", 1.0)]),
    # Job-control lines without a PID (which differs between any two containers).
    ("job started", [("(sleep 1.5; echo late-job)\n", 0.3)]),
    ("C-z stops it", [("C-z", 0.5)]),
    ("bg: a running job's late output", [("bg\n", 1.5)]),
    ("done job reported", [("true\n", 1.0)]),
    ("untracked background process", [("sh -c '(sleep 0.3; echo late-orphan) &'\n", 1.0)]),
    ("1 MB flood", [(FLOOD, 6.0)]),
    ("after the flood", [("echo done\n", 1.0)]),
]


class HostEnvironment:
    """The few ``BaseEnvironment`` members TmuxSession uses, run on this host."""

    session_id = "record-tmux-corpus"

    def __init__(self, env: dict[str, str]) -> None:
        self._env = env

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        proc = await asyncio.create_subprocess_exec(
            "/bin/bash", "-c", command, env=self._env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout_sec or 60)
        return ExecResult(stdout=out.decode("utf-8", "replace"),
                          stderr=err.decode("utf-8", "replace"), return_code=proc.returncode or 0)


async def record(image: str) -> dict[str, object]:
    started = await asyncio.to_thread(
        subprocess.run,
        ["docker", "run", "-d", "--rm", "--label", LABEL, "--hostname", "sandbox", "-w", WORKDIR,
         "--network", "none", "--init", image, "sleep", "infinity"],
        check=True, capture_output=True, text=True,
    )
    container = started.stdout.strip()
    try:
        with tempfile.TemporaryDirectory(prefix="rsr-record-") as tmp:
            wrapper = Path(tmp) / "bin" / "bash"
            wrapper.parent.mkdir()
            # tmux starts `bash --login` through $SHELL -c, which finds this one first.
            wrapper.write_text(
                "#!/bin/sh\nexec docker exec -it -e TERM=\"$TERM\" -e SHELL=/bin/bash "
                f"-w {WORKDIR} {container} bash \"$@\"\n"
            )
            wrapper.chmod(0o755)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG", "TMUX"))}
            env.update(PATH=f"{wrapper.parent}:{env['PATH']}", TMUX_TMPDIR=tmp, HOME=tmp)
            session = TmuxSession(
                session_name="agent", environment=HostEnvironment(env),  # type: ignore[arg-type]
                logging_path=PurePosixPath(tmp) / "pane.log",
                local_asciinema_recording_path=None, remote_asciinema_recording_path=None,
            )
            await session.start()
            deadline = time.monotonic() + 30
            while "root@sandbox" not in await session.capture_pane():
                if time.monotonic() > deadline:
                    raise SystemExit("the container's bash gave no prompt in 30 s")
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)
            limit = Terminus2._limit_output_length
            initial = limit(None, await session.get_incremental_output())  # type: ignore[arg-type]
            turns = []
            for name, commands in CORPUS:
                for keys, duration in commands:
                    await session.send_keys(keys, block=False, min_timeout_sec=min(duration, 60))
                observation = limit(None, await session.get_incremental_output())  # type: ignore[arg-type]
                turns.append({"name": name, "commands": commands, "observation": observation})
                print(f"{name}: {len(observation)} chars", file=sys.stderr)
            await session.environment.exec("tmux kill-server")
    finally:
        await asyncio.to_thread(subprocess.run, ["docker", "rm", "-f", container], capture_output=True)
    version = await asyncio.to_thread(subprocess.run, ["tmux", "-V"], capture_output=True, text=True)
    tmux = version.stdout.strip()
    return {
        "recorded_with": f"harbor 0.25.0 TmuxSession + Terminus2._limit_output_length, {tmux} "
                         f"on {platform.platform()}",
        "image": image,
        "workdir": WORKDIR,
        "initial": initial,
        "turns": turns,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image", default="rsr-base:bookworm")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    data = asyncio.run(record(args.image))
    args.out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}: {len(data['turns'])} turns", file=sys.stderr)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
