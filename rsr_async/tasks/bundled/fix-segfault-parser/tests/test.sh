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

def expected(path):
    totals, skipped = {}, []
    for n, line in enumerate(Path(path).read_text().split("\n")[:-1], start=1):
        if not line.strip():
            continue
        if "," not in line:
            skipped.append(n)
            continue
        name, amount = line.split(",", 1)
        totals[name] = totals.get(name, 0) + int(amount)
    return [f"{k} {v}" for k, v in totals.items()], skipped

def run(path):
    sh("make -B", cwd="/app/ledger", timeout=60)
    return subprocess.run(["/app/ledger/ledger", path], capture_output=True, text=True, timeout=10)

@check
def real_data():
    r = run("/app/ledger/transactions.csv")
    want, skipped = expected("/app/ledger/transactions.csv")
    return r.returncode == 0 and r.stdout.splitlines() == want and \
        all(f"skipped line {n}" in r.stderr for n in skipped)

@check
def totals_file():
    want, _ = expected("/app/ledger/transactions.csv")
    return read("/app/ledger/totals.txt").splitlines() == want

@check
def unseen_data():
    f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
    long = "x" * 300
    lines = ["a,1", "", "no comma here", long + ",5"] + [f"acct{i},{i}" for i in range(100)] + ["a,-3", long + ",2"]
    f.write("\n".join(lines) + "\n")
    f.close()
    r = run(f.name)
    want, _ = expected(f.name)
    return r.returncode == 0 and r.stdout.splitlines() == want and "skipped line 3" in r.stderr


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
