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

import collections, re

def truth():
    failed, invalid, ok = collections.Counter(), collections.defaultdict(set), set()
    for line in read("/app/logs/auth.log").splitlines():
        m = re.search(r"Failed password for invalid user (\S+) from (\S+)", line)
        if m:
            invalid[m.group(2)].add(m.group(1))
            continue
        m = re.search(r"Failed password for (\S+) from", line)
        if m:
            failed[m.group(1)] += 1
            continue
        m = re.search(r"Accepted \S+ for (\S+) from", line)
        if m:
            ok.add(m.group(1))
    return {"failed_by_user": dict(failed),
            "scanners": sorted(ip for ip, names in invalid.items() if len(names) >= 2),
            "accepted_users": sorted(ok)}

@check
def report():
    got = json.loads(read("/app/ssh_report.json"))
    want = truth()
    return got["failed_by_user"] == want["failed_by_user"] and got["scanners"] == want["scanners"] \
        and got["accepted_users"] == want["accepted_users"]


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
