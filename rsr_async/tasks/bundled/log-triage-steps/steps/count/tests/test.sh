#!/bin/bash
# Hidden check: the counts, computed from the log itself.
mkdir -p /logs/verifier
python3 - <<'PYCHECK'
from collections import Counter
from pathlib import Path
counts = Counter()
for line in Path("/app/logs/service.log").read_text().splitlines():
    parts = line.split()
    if len(parts) > 2 and parts[1] == "ERROR":
        counts[parts[2].rstrip(":")] += 1
expected = [f"{c} {n}" for c, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
out = Path("/app/work/counts.txt")
got = [line.strip() for line in out.read_text().splitlines() if line.strip()] if out.is_file() else None
ok = got == expected
print(f"{'PASS' if ok else 'FAIL'} counts.txt: expected {expected}, got {got}")
Path("/logs/verifier/reward.txt").write_text("1\n" if ok else "0\n")
PYCHECK
