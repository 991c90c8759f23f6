#!/bin/bash
cd /app
python3 - <<'PY'
import collections
rows = [r for r in open("maze.txt").read().split("\n") if r]
cells = {(x, y): c for y, r in enumerate(rows) for x, c in enumerate(r)}
s = next(k for k, v in cells.items() if v == "S")
e = next(k for k, v in cells.items() if v == "E")
prev = {s: None}
q = collections.deque([s])
while q:
    cur = q.popleft()
    if cur == e:
        break
    for m, (dx, dy) in (("U", (0, -1)), ("D", (0, 1)), ("L", (-1, 0)), ("R", (1, 0))):
        nxt = (cur[0] + dx, cur[1] + dy)
        if cells.get(nxt, "#") == "#" or nxt in prev:
            continue
        prev[nxt] = (cur, m)
        q.append(nxt)
path, cur = [], e
while prev[cur] is not None:
    cur, m = prev[cur]
    path.append(m)
open("path.txt", "w").write("".join(reversed(path)) + "\n")
PY
cat path.txt
