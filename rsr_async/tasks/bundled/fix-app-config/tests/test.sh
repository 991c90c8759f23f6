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

import configparser, hashlib

def effective():
    cp = configparser.ConfigParser()
    cp.read("/app/conf/app.ini")
    if os.path.exists("/app/conf/overrides.ini"):
        cp.read("/app/conf/overrides.ini")
    return cp

@check
def check_passes():
    r = sh("python3 /app/server.py --check")
    return r.returncode == 0 and "config ok" in r.stdout

@check
def code_untouched():
    digest = lambda p: hashlib.sha256(Path(p).read_bytes()).hexdigest()
    return digest("/app/server.py") == digest("/root/.app-orig/server.py")

@check
def valid_settings_kept():
    cp = effective()
    plugins = [p.strip() for p in cp.get("plugins", "enabled").split(",")]
    return cp.get("server", "bind") == "0.0.0.0" and cp.get("logging", "directory") == "/var/log/app" \
        and cp.getint("cache", "limit_mb") == 512 and cp.get("logging", "level") == "INFO" \
        and len(plugins) == 3 and plugins[:2] == ["audit", "metrics"]

@check
def wrong_settings_fixed():
    cp = effective()
    return 1024 <= cp.getint("server", "port") <= 65535 and cp.getint("cache", "max_mb") <= 512


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
