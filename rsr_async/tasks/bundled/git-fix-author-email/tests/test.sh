#!/bin/bash
# Hidden checks: one line per check, then the reward in /logs/verifier/reward.json.
mkdir -p /logs/verifier
cd /app
python3 - <<'PYCHECK'
"""Hidden checks for this task; prints one line per check, writes the reward."""
import json
import os
import subprocess
from pathlib import Path

PARTIAL = True
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

REPO = "/app/lib"

def git(cmd):
    return sh("git " + cmd, cwd=REPO).stdout.strip()

WANT_MSGS = ["Add README", "Add div()", "Add mul()", "Add sub()",
             "Empty commit kept for the changelog", "Add add()"]

@check
def identities():
    ids = git("log main --format='%an|%ae|%cn|%ce'").splitlines()
    return len(ids) == 6 and set(ids) == {"Dev Example|dev@example.org|Dev Example|dev@example.org"}

@check
def messages_and_count():
    return git("log main --format=%s").splitlines() == WANT_MSGS

@check
def contents():
    text = git("show main:mathx.py")
    return text.splitlines() == ["def add(a, b):", "    return a + b", "def sub(a, b): pass",
                                 "def mul(a, b): pass", "def div(a, b): pass"] and \
        git("show main:README.md") == "# mathx" and \
        git("show main~2:mathx.py").count("def ") == 3

@check
def clean_and_on_main():
    return git("rev-parse --abbrev-ref HEAD") == "main" and git("status --porcelain") == ""


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
