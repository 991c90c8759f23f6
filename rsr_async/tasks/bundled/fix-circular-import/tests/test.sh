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

WANT = ["A-1      Anchor            3 x $19.99", "B-2      Bracket          12 x $3.50",
        "C-9      Clamp            40 x $1.25", "TOTAL $151.97"]

@check
def cli_works():
    r = sh("python3 -m inventory report data/stock.csv")
    return r.returncode == 0 and r.stdout.splitlines() == WANT

@check
def api_works():
    r = sh("cd /tmp && PYTHONPATH=/app python3 -c 'from inventory import Item, load, report; "
           "print(report([Item(\"Z\", \"Zip\", 2, 5)]))'")
    return r.returncode == 0 and r.stdout.split("\n")[1] == "TOTAL $0.10"

@check
def other_data():
    Path("/tmp/other.csv").write_text("sku,name,qty,price_cents\nQ,Quill,1,7\n")
    r = sh("python3 -m inventory report /tmp/other.csv")
    return r.stdout.splitlines() == ["Q        Quill             1 x $0.07", "TOTAL $0.07"]


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
