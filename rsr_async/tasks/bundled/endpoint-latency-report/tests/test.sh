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

import collections, math, re

LINE = re.compile(r'"GET ([^ ?]+)\S* HTTP/1.1" (\d{3}) \d+ .* rt=([\d.]+)$')

def truth():
    by = collections.defaultdict(list)
    for line in read("/app/logs/access.log").splitlines():
        m = LINE.search(line)
        if m:
            by[m.group(1)].append((float(m.group(3)), int(m.group(2))))
    out = {}
    for path, rows in by.items():
        if len(rows) < 50:
            continue
        rts = sorted(r for r, _ in rows)
        pick = lambda p: rts[max(1, math.ceil(p * len(rts))) - 1]
        out[path] = {"count": len(rows), "p50": pick(0.5), "p95": pick(0.95), "max": rts[-1],
                     "error_rate": round(sum(1 for _, s in rows if s >= 500) / len(rows), 3)}
    return out

def got():
    return json.loads(read("/app/latency.json"))

def field(name, tol=1e-9):
    want, have = truth(), got()
    return set(want) == set(have) and all(abs(have[k][name] - want[k][name]) <= tol for k in want)

@check
def endpoints_and_counts():
    return field("count")

@check
def p50():
    return field("p50")

@check
def p95():
    return field("p95")

@check
def maximum():
    return field("max")

@check
def error_rate():
    return field("error_rate", 0.0005)


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
