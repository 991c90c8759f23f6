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

import shutil, stat, tempfile
D = "/app/wordcount"

def install(prefix=None):
    stage = tempfile.mkdtemp()
    args = f"DESTDIR={stage}" + (f" PREFIX={prefix}" if prefix else "")
    r = sh(f"make clean >/dev/null; make install {args}", cwd=D, timeout=60)
    return stage, r

def mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)

@check
def installs_with_prefix():
    stage, r = install("/opt/wc")
    base = Path(stage, "opt/wc")
    ok = r.returncode == 0 and mode(base / "bin/wordcount") == 0o755 and \
        mode(base / "share/man/man1/wordcount.1") == 0o644 and \
        mode(base / "share/doc/wordcount/README") == 0o644
    out = subprocess.run([str(base / "bin/wordcount")], input="a b  c\nd", capture_output=True, text=True)
    return ok and out.stdout.strip() == "4"

@check
def default_prefix():
    stage, r = install()
    return r.returncode == 0 and Path(stage, "usr/local/bin/wordcount").is_file()

@check
def uninstall():
    stage, r = install("/usr")
    extra = Path(stage, "usr/share/doc/wordcount/NEWS")
    extra.write_text("not ours")
    u = sh(f"make uninstall DESTDIR={stage} PREFIX=/usr", cwd=D)
    left = sorted(str(p.relative_to(stage)) for p in Path(stage).rglob("*") if p.is_file())
    return u.returncode == 0 and left == ["usr/share/doc/wordcount/NEWS"]

@check
def build_and_clean():
    a = sh("make clean && make && test -x wordcount", cwd=D, timeout=60).returncode == 0
    b = sh("make clean && test ! -e wordcount", cwd=D).returncode == 0
    return a and b


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
