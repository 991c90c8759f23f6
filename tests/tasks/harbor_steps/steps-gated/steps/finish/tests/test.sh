#!/bin/bash
data="$ROOT/app/data"
reward=0; style=0
[ "$(cat "$data/c.txt" 2>/dev/null)" = gamma ] && reward=1
[ -s "$data/notes.md" ] && style=1
echo "{\"reward\": $reward, \"style\": $style}" > "$ROOT/logs/verifier/reward.json"
