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

VALUES = {"HOST": "web-01.example.internal", "PORT": "8443", "DOC_ROOT": "/srv/www/html",
          "ADMIN_EMAIL": "ops@example.internal", "TOKEN": "abc=def==ghi", "BASE_PATH": "api/v2"}
import re

def render(text):
    return re.sub(r"\{\{([A-Z_]+)\}\}", lambda m: VALUES.get(m.group(1), m.group(0)), text)

@check
def rendered():
    names = ["nginx.conf", "motd.txt", "app.ini"]
    return all(read(f"/app/out/{n}") == render(read(f"/app/templates/{n}.tmpl")) for n in names)

@check
def missing_listed():
    return read("/app/out/MISSING").split() == ["PAGER", "WINDOW"]

@check
def nothing_extra():
    return sorted(p.name for p in Path("/app/out").iterdir()) == ["MISSING", "app.ini", "motd.txt", "nginx.conf"]


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
