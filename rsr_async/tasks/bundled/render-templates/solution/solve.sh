#!/bin/bash
cd /app
mkdir -p out
python3 - <<'PY'
import re, pathlib
values = {}
for line in open("values.env"):
    line = line.rstrip("\n")
    if not line.strip() or line.lstrip().startswith("#"):
        continue
    k, _, v = line.partition("=")
    values[k.strip()] = v
missing = set()
def sub(m):
    if m.group(1) in values:
        return values[m.group(1)]
    missing.add(m.group(1))
    return m.group(0)
for t in pathlib.Path("templates").glob("*.tmpl"):
    out = re.sub(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}", sub, t.read_text())
    pathlib.Path("out", t.name[:-5]).write_text(out)
pathlib.Path("out/MISSING").write_text("".join(m + "\n" for m in sorted(missing)))
PY
cat out/MISSING
