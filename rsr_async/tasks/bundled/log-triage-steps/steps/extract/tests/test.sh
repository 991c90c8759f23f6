#!/bin/bash
# Hidden check: the ERROR entries, computed from the log itself.
mkdir -p /logs/verifier
python3 - <<'PYCHECK'
from pathlib import Path
lines = Path("/app/logs/service.log").read_text().splitlines()
expected = [line for line in lines if len(line.split()) > 1 and line.split()[1] == "ERROR"]
out = Path("/app/work/errors.log")
got = out.read_text().splitlines() if out.is_file() else None
ok = got == expected
print(f"{'PASS' if ok else 'FAIL'} errors.log: {len(expected)} entries expected, got {None if got is None else len(got)}")
Path("/logs/verifier/reward.txt").write_text("1\n" if ok else "0\n")
PYCHECK
