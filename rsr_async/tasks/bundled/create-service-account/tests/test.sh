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

import grp, pwd, stat

@check
def user():
    u = pwd.getpwnam("reportd")
    return u.pw_shell == "/usr/sbin/nologin" and u.pw_dir == "/var/lib/reportd" and \
        grp.getgrgid(u.pw_gid).gr_name == "reportd" and u.pw_uid < 1000

@check
def home():
    st = os.stat("/var/lib/reportd")
    u = pwd.getpwnam("reportd")
    return st.st_uid == u.pw_uid and st.st_gid == u.pw_gid and stat.S_IMODE(st.st_mode) == 0o750

@check
def alice_groups():
    r = sh("id -nG alice").stdout.split()
    return "reportd" in r and "staff2" in r and "alice" in r

@check
def config():
    st = os.stat("/etc/reportd/reportd.conf")
    return st.st_uid == 0 and grp.getgrgid(st.st_gid).gr_name == "reportd" and \
        stat.S_IMODE(st.st_mode) & 0o047 == 0o040 and read("/etc/reportd/reportd.conf") == "interval = 60\n"


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
