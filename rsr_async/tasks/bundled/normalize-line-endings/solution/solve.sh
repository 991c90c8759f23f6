#!/bin/bash
cd /app/notes
find . -name '*.txt' -type f | while read -r f; do python3 -c '
import sys
p = sys.argv[1]
t = open(p, newline="").read().replace("\r\n", "\n").replace("\r", "\n")
t = "\n".join(l.rstrip(" \x09") for l in t.split("\n")).rstrip("\n") + "\n"
open(p, "w").write(t)
' "$f"; done
cd /app
