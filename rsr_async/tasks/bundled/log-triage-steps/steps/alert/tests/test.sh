#!/bin/bash
# Hidden check: the components over their limits, computed from the log and the limits.
mkdir -p /logs/verifier
python3 - <<'PYCHECK'
from collections import Counter
from pathlib import Path
counts = Counter()
for line in Path("/app/logs/service.log").read_text().splitlines():
    parts = line.split()
    if len(parts) > 2 and parts[1] == "ERROR":
        counts[parts[2].rstrip(":")] += 1
limits = {}
for line in Path("/app/thresholds.conf").read_text().splitlines():
    if line.strip() and not line.startswith("#") and "=" in line:
        name, value = line.split("=", 1)
        limits[name.strip()] = int(value)
expected = sorted(c for c, n in counts.items() if c in limits and n > limits[c])
out = Path("/app/work/alerts.txt")
got = [line.strip() for line in out.read_text().splitlines() if line.strip()] if out.is_file() else None
ok = got == expected
print(f"{'PASS' if ok else 'FAIL'} alerts.txt: expected {expected}, got {got}")
Path("/logs/verifier/reward.txt").write_text("1\n" if ok else "0\n")
PYCHECK
