#!/bin/bash
# Needs the first step's directory: without it the step cannot start.
[ -d "$ROOT/app/data" ] || { echo "setup: no /app/data" >&2; exit 3; }
cp "$ROOT/app/seed.txt" "$ROOT/app/seeded"
