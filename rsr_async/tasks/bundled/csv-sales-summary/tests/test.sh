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

import csv

def truth():
    rows, by_region, qty = 0, {}, {}
    with open("/app/data/sales.csv", newline="") as f:
        for rec in csv.DictReader(f):
            q = (rec.get("quantity") or "").strip()
            if not q.isdigit():
                continue
            rows += 1
            rev = int(q) * float(rec["unit_price"])
            region = rec["region"].strip().lower()
            by_region[region] = by_region.get(region, 0) + rev
            qty[rec["product"]] = qty.get(rec["product"], 0) + int(q)
    return rows, by_region, max(qty, key=qty.get)

def got():
    return json.loads(read("/app/summary.json"))

@check
def row_count():
    return got()["rows"] == truth()[0]

@check
def total_revenue():
    return abs(got()["total_revenue"] - round(sum(truth()[1].values()), 2)) < 0.006

@check
def regions():
    want = {k: round(v, 2) for k, v in truth()[1].items()}
    have = got()["by_region"]
    return set(have) == set(want) and all(abs(have[k] - want[k]) < 0.006 for k in want)

@check
def top_product():
    return got()["top_product"] == truth()[2]


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
