#!/bin/bash
cd /app
python3 - <<'PY'
import re
def key(name):
    return re.sub(r"[-_.]+", "-", name).lower()
pins = {}
for line in open("installed.txt"):
    if "==" in line:
        n, v = line.strip().split("==")
        pins[key(n)] = v
out = []
for line in open("requirements.txt").read().splitlines():
    s = line.strip()
    if not s or s.startswith("#"):
        out.append(line)
        continue
    req, sep, marker = s.partition(";")
    m = re.match(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?", req.strip())
    name, extras = m.group(1), m.group(2) or ""
    pinned = f"{name}{extras}=={pins[key(name)]}"
    if sep:
        pinned += "; " + marker.strip()
    out.append(pinned)
open("requirements.txt", "w").write("\n".join(out) + "\n")
PY
cat requirements.txt
