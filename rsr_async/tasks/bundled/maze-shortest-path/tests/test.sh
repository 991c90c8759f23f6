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

import collections

def load():
    rows = read("/app/maze.txt").split("\n")
    rows = [r for r in rows if r]
    cells = {(x, y): c for y, r in enumerate(rows) for x, c in enumerate(r)}
    s = next(k for k, v in cells.items() if v == "S")
    e = next(k for k, v in cells.items() if v == "E")
    return cells, s, e

def shortest(cells, s, e):
    dist = {s: 0}
    q = collections.deque([s])
    while q:
        x, y = q.popleft()
        for nx, ny in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
            if cells.get((nx, ny), "#") != "#" and (nx, ny) not in dist:
                dist[(nx, ny)] = dist[(x, y)] + 1
                q.append((nx, ny))
    return dist[e]

@check
def valid_shortest_route():
    cells, s, e = load()
    moves = read("/app/path.txt").strip()
    pos = s
    step = {"U": (0, -1), "D": (0, 1), "L": (-1, 0), "R": (1, 0)}
    for m in moves:
        dx, dy = step[m]
        pos = (pos[0] + dx, pos[1] + dy)
        if cells.get(pos, "#") == "#":
            return False
    return pos == e and len(moves) == shortest(cells, s, e)


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
