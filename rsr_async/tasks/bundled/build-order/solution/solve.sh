#!/bin/bash
cd /app
python3 - <<'PY'
import heapq
g = {}
for line in open("deps.txt"):
    if line.strip():
        k, _, v = line.partition(":")
        g[k.strip()] = v.split()
indeg = {k: len(v) for k, v in g.items()}
users = {k: [] for k in g}
for k, v in g.items():
    for d in v:
        users[d].append(k)
heap = sorted(k for k, n in indeg.items() if n == 0)
out = []
while heap:
    k = heapq.heappop(heap)
    out.append(k)
    for u in users[k]:
        indeg[u] -= 1
        if indeg[u] == 0:
            heapq.heappush(heap, u)
open("order.txt", "w").write("\n".join(out) + "\n")
PY
cat order.txt
