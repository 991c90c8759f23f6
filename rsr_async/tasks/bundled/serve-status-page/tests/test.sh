#!/bin/bash
# Hidden checks: the server the agent left running answers; one line per check, then
# the reward in /logs/verifier/reward.txt.
mkdir -p /logs/verifier
python3 - <<'PYCHECK'
"""Hidden checks for this task; prints one line per check, writes the reward."""
import json
import socket
import urllib.request
from pathlib import Path

CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


@check
def port_8080_listens():
    with socket.socket() as s:
        s.settimeout(5)
        return s.connect_ex(("127.0.0.1", 8080)) == 0


@check
def status_document_served():
    with urllib.request.urlopen("http://127.0.0.1:8080/status.json", timeout=10) as reply:
        return reply.status == 200 and json.loads(reply.read()) == {"ok": True, "service": "inventory", "version": 3}


@check
def served_from_srv_status():
    # the file on disk is the one served (not a document made up by a handler)
    on_disk = json.loads(Path("/srv/status/status.json").read_text())
    return on_disk == {"ok": True, "service": "inventory", "version": 3}


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
    score = 1 if all(results.values()) else 0
    (out / "reward.txt").write_text(f"{score}\n")
    print("reward", score)


main()
PYCHECK
