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

import configparser
REPO = "/app/service"

def git(cmd):
    return sh("git " + cmd, cwd=REPO).stdout.strip()

@check
def merge_commit():
    parents = git("rev-list --parents -n1 HEAD").split()[1:]
    return len(parents) == 2 and git("rev-parse feature/export") in parents and \
        git("rev-parse --abbrev-ref HEAD") == "main"

@check
def settings_resolved():
    text = read(f"{REPO}/settings.ini")
    if "<<<<<<<" in text or ">>>>>>>" in text or "=======" in text:
        return False
    cp = configparser.ConfigParser()
    cp.read_string(text)
    return dict(cp["server"]) == {"host": "0.0.0.0", "port": "8080", "timeout": "20", "workers": "4"} \
        and dict(cp["features"]) == {"search": "on", "export": "on", "export_format": "csv"}

@check
def clean_tree():
    return git("status --porcelain") == ""


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
