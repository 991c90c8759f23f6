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

import shutil, tempfile, time

def scenario():
    d = Path(tempfile.mkdtemp())
    names = ["db 2024-01-01.tar.gz", "db-2024-01-02.tar.gz", "db-2024-01-03.tar.gz",
             "db 2024-01-04.tar.gz", "db-2024-01-05.tar.gz"]
    now = time.time()
    for i, n in enumerate(names):
        (d / n).write_text(n)
        os.utime(d / n, (now - 86400 * (10 - i), now - 86400 * (10 - i)))
    (d / "notes.txt").write_text("x")
    os.utime(d / "notes.txt", (now - 10 ** 7, now - 10 ** 7))
    (d / "old.tar.gz.part").write_text("x")
    os.utime(d / "old.tar.gz.part", (now - 10 ** 7, now - 10 ** 7))
    (d / "sub.tar.gz").mkdir()
    return d, names

@check
def keeps_newest():
    d, names = scenario()
    r = subprocess.run(["/app/rotate.sh", str(d), "2"], capture_output=True, text=True, timeout=10)
    left = sorted(p.name for p in d.iterdir())
    ok = r.returncode == 0 and left == sorted(names[3:] + ["notes.txt", "old.tar.gz.part", "sub.tar.gz"])
    shutil.rmtree(d)
    return ok

@check
def prints_deleted():
    d, names = scenario()
    r = subprocess.run(["/app/rotate.sh", str(d), "3"], capture_output=True, text=True, timeout=10)
    shutil.rmtree(d)
    return sorted(l.strip() for l in r.stdout.splitlines() if l.strip()) == sorted(names[:2])

@check
def keep_more_than_present():
    d, names = scenario()
    r = subprocess.run(["/app/rotate.sh", str(d), "9"], capture_output=True, text=True, timeout=10)
    ok = r.returncode == 0 and len(list(d.iterdir())) == 8 and r.stdout.strip() == ""
    shutil.rmtree(d)
    return ok

@check
def usage_errors():
    d, names = scenario()
    bad = [[], [str(d)], [str(d), "two"], ["/nonexistent", "1"]]
    ok = True
    for args in bad:
        r = subprocess.run(["/app/rotate.sh", *args], capture_output=True, text=True, timeout=10)
        ok = ok and r.returncode == 2 and r.stderr.strip() != ""
    ok = ok and len(list(d.iterdir())) == 8
    shutil.rmtree(d)
    return ok


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
