#!/bin/bash
# Hidden checks: the expected counts are computed from the log itself; reward 1 or 0.
mkdir -p /logs/verifier
python3 - <<'PYCHECK'
from collections import Counter
from pathlib import Path

counts = Counter()
for line in Path("/app/logs/app.log").read_text().splitlines():
    parts = line.split()
    if len(parts) >= 3 and parts[1] == "ERROR":
        counts[parts[2].rstrip(":")] += 1
expected = [f"{s} {n}" for s, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
out = Path("/app/error_counts.txt")
got = out.read_text().split("\n") if out.is_file() else None
got = [line.strip() for line in got if line.strip()] if got is not None else None
ok = got == expected
print(f"{'PASS' if ok else 'FAIL'} error_counts: expected {expected}, got {got}")
Path("/logs/verifier/reward.txt").write_text("1\n" if ok else "0\n")
PYCHECK
