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

REPO = "/app/repo"

def git(cmd):
    return sh("git " + cmd, cwd=REPO).stdout.strip()

def bad():
    return git("log --format=%H --grep='Tidy factor table'")

@check
def found_commit():
    return read("/app/bad_commit.txt").strip() == bad()

@check
def history_kept():
    return sh(f"git merge-base --is-ancestor {bad()} HEAD", cwd=REPO).returncode == 0 and \
        int(git("rev-list --count HEAD")) >= 20 and git("rev-parse --abbrev-ref HEAD") == "main"

@check
def check_passes():
    return sh("./check.sh", cwd=REPO).returncode == 0

@check
def features_kept():
    r = sh("python3 -c 'import units; print(units.to_metres(1, \"ft\"), units.to_metres(1, \"in\"))'", cwd=REPO)
    return r.stdout.split() == ["0.3048", "0.0254"]

@check
def committed():
    return git("status --porcelain --untracked-files=no") == ""


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
