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

D = "/app/calc"

def built():
    return sh("make clean >/dev/null 2>&1; make", cwd=D, timeout=60).returncode == 0

def calc(*args):
    return subprocess.run([f"{D}/calc", *args], capture_output=True, text=True, timeout=5)

@check
def builds_clean():
    return built() and os.access(f"{D}/calc", os.X_OK)

@check
def arithmetic():
    cases = [("7", "-", "10", "-3"), ("2", "*", "21", "42"), ("40", "+", "2", "42"),
             ("-7", "/", "2", "-3"), ("17", "%", "5", "2"), ("100", "-", "1", "99")]
    return all(calc(a, op, b).stdout.strip() == want for a, op, b, want in cases)

@check
def division_by_zero():
    results = [calc("5", op, "0") for op in "/%"]
    return all(r.returncode == 1 and "division by zero" in r.stderr for r in results)


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
