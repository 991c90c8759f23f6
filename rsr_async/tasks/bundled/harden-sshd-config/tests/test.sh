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

def parse():
    glob, blocks, cur = {}, [], None
    for raw in read("/app/sshd_config").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        key, value = key.lower(), value.strip()
        if key == "match":
            cur = {}
            blocks.append(cur)
            continue
        target = glob if cur is None else cur
        target.setdefault(key, value)
    return glob, blocks

@check
def root_login():
    return parse()[0].get("permitrootlogin") == "no"

@check
def passwords_off():
    g, blocks = parse()
    return g.get("passwordauthentication") == "no" and \
        all(b.get("passwordauthentication", "no") == "no" for b in blocks)

@check
def no_x11():
    g, blocks = parse()
    return g.get("x11forwarding") == "no" and all(b.get("x11forwarding", "no") == "no" for b in blocks)

@check
def keepalive():
    g, _ = parse()
    return g.get("clientaliveinterval") == "300" and g.get("clientalivecountmax") == "2"

@check
def rest_unchanged():
    g, _ = parse()
    text = read("/app/sshd_config")
    return g.get("port") == "2222" and g.get("usepam") == "yes" and \
        "#PermitRootLogin prohibit-password" in text and "Subsystem sftp /usr/lib/openssh/sftp-server" in text \
        and "AcceptEnv LANG LC_*" in text and "Match User backup" in text


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
