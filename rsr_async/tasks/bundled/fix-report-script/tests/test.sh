#!/bin/bash
# Hidden checks: one line per check, then the reward in /logs/verifier/reward.txt.
mkdir -p /logs/verifier
cd /app
python3 - <<'PYCHECK'
"""Hidden checks for this task; prints one line per check, writes the reward."""
import json
import os
import subprocess
from pathlib import Path

PARTIAL = False
CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def sh(cmd, cwd="/app", timeout=20, env=None):
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full)


def read(path):
    return Path(path).read_text()

import tempfile

def expected(d):
    files = [p for p in Path(d).iterdir() if p.is_file()]
    rows = sorted(((p.stat().st_size, p.name) for p in files), key=lambda x: -x[0])
    return [f"{s}\t{n}" for s, n in rows] + [f"total\t{sum(s for s, _ in rows)}"]

def run(d):
    return subprocess.run(["/app/bin/disk-report", d], capture_output=True, text=True, timeout=10).stdout.splitlines()

@check
def samples():
    return run("/app/samples") == expected("/app/samples")

@check
def fresh_folder():
    d = tempfile.mkdtemp(prefix="r e p ")
    for name, size in [("two  spaces", 33), ("new\\nline?", 3), ("x", 1000), ("$HOME", 64)]:
        Path(d, name).write_text("z" * size)
    os.mkdir(Path(d, "sub"))
    return run(d) == expected(d)

@check
def empty_folder():
    d = tempfile.mkdtemp()
    return run(d) == ["total\t0"]


def main():
    results = {}
    for name, fn in CHECKS.items():
        try:
            ok = bool(fn())
        except Exception as exc:  # a crash in a check is a failed check
            print(f"{name}: error: {exc!r}")
            ok = False
        print(f"{name}: {'PASS' if ok else 'FAIL'}")
        results[name] = 1 if ok else 0
    out = Path("/logs/verifier")
    out.mkdir(parents=True, exist_ok=True)
    if PARTIAL:
        score = round(sum(results.values()) / len(results), 4)
        (out / "reward.json").write_text(json.dumps({"reward": score, **results}))
        print("reward", score)
    else:
        score = 1 if all(results.values()) else 0
        (out / "reward.txt").write_text(f"{score}\n")
        print("reward", score)


main()
PYCHECK
