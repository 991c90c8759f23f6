#!/bin/bash
# One test for every step: the step's tests/want names the file and its content (reward),
# and the other keys record which of the agent's files this verifier can see:
# /app/scratch.txt (never an artifact), /app/draft.txt (the first step's artifact only)
# and /logs/artifacts/log.txt (Harbor's convention directory, always collected).
read -r file want < "$ROOT/tests/want"
# A verifier that crashes (no reward at all) when the agent wrote "crash".
[ "$(cat "$ROOT/app/$file" 2>/dev/null)" = crash ] && { echo "no reward written" >&2; exit 1; }
reward=0; [ "$(cat "$ROOT/app/$file" 2>/dev/null)" = "$want" ] && reward=1
scratch=0; [ -e "$ROOT/app/scratch.txt" ] && scratch=1
draft=0; [ -e "$ROOT/app/draft.txt" ] && draft=1
logs=0; [ -e "$ROOT/logs/artifacts/log.txt" ] && logs=1
echo "{\"reward\": $reward, \"scratch_seen\": $scratch, \"draft_seen\": $draft, \"logs_seen\": $logs}" > "$ROOT/logs/verifier/reward.json"
