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

import glob

EXPECTED = {
    "/app/notes/monday.txt": "Standup at 9\nReview PR #12\n\n\nLunch with Ana\n",
    "/app/notes/tuesday.txt": "Deploy v2.3\n  indented line stays indented\nCall vendor\n",
    "/app/notes/sub/wednesday.txt": "Write report\nno CR here\n",
}

@check
def contents():
    return all(Path(p).read_bytes().decode() == text for p, text in EXPECTED.items())

@check
def no_files_lost():
    return sorted(glob.glob("/app/notes/**/*.txt", recursive=True)) == sorted(EXPECTED)


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
