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

@check
def largest():
    return read("/app/largest.txt").split() == ["/srv/data/media/video/intro.mp4",
        "/srv/data/tmp/cache/a/blob.bin", "/srv/data/db/main.sqlite"]

@check
def stale_removed():
    return not any(Path(p).exists() for p in ["/srv/data/tmp/cache/a/blob.bin",
        "/srv/data/tmp/uploads/partial-1.upload", "/srv/data/tmp/uploads/partial-2.upload"])

@check
def others_kept():
    keep = ["/srv/data/tmp/uploads/fresh.upload", "/srv/data/tmp/cache/a/recent.bin",
            "/srv/data/media/old-archive.tar", "/srv/data/logs/app.log",
            "/srv/data/db/main.sqlite", "/srv/data/media/video/intro.mp4"]
    return all(Path(p).is_file() for p in keep)

@check
def biggest_dir():
    return read("/app/biggest_dir.txt").strip().rstrip("/").split("/")[-1] == "media"


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
