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

import importlib.util, math

def mod():
    spec = importlib.util.spec_from_file_location("stats_under_test", "/app/stats/stats.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m

@check
def mean_ok():
    return mod().mean([1, 2, 3, 4]) == 2.5

@check
def median_ok():
    m = mod()
    data: list[float] = [3, 1, 4, 1, 5, 9, 2, 6]
    ok = m.median(data) == 3.5 and data == [3, 1, 4, 1, 5, 9, 2, 6]
    return ok and m.median([5, 1, 3]) == 3 and m.median((2.0, 8.0)) == 5.0

@check
def percentile_ok():
    m = mod()
    data = [15, 20, 35, 40, 50]
    return [m.percentile(data, p) for p in (5, 30, 40, 50, 100)] == [15, 20, 20, 35, 50] \
        and m.percentile(list(range(1, 101)), 90) == 90

@check
def moving_average_ok():
    m = mod()
    return m.moving_average([1, 2, 3, 4], 2) == [1.5, 2.5, 3.5] and \
        m.moving_average([1, 2], 3) == [] and m.moving_average([4, 8], 2) == [6.0]


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
