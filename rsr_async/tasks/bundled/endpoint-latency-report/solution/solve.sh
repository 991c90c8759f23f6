#!/bin/bash
cd /app
head -n 3 logs/access.log
python3 - <<'PY'
import collections, json, math, re
line_re = re.compile(r'"GET ([^ ?]+)\S* HTTP/1.1" (\d{3}) \d+ .* rt=([\d.]+)$')
by = collections.defaultdict(list)
for line in open("logs/access.log"):
    m = line_re.search(line.rstrip("\n"))
    if m:
        by[m.group(1)].append((float(m.group(3)), int(m.group(2))))
out = {}
for path, rows in sorted(by.items()):
    if len(rows) < 50:
        continue
    rts = sorted(r for r, _ in rows)
    def pick(p):
        return rts[max(1, math.ceil(p * len(rts))) - 1]
    out[path] = {"count": len(rows), "p50": pick(0.5), "p95": pick(0.95), "max": rts[-1],
                 "error_rate": round(sum(1 for _, s in rows if s >= 500) / len(rows), 3)}
json.dump(out, open("latency.json", "w"), indent=2)
PY
cat latency.json
