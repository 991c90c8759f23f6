#!/bin/bash
# One test for both steps: each step's tests/want names the file and its content.
read -r file want < "$ROOT/tests/want"
# A verifier that crashes (no reward at all) when the agent wrote "crash".
[ "$(cat "$ROOT/app/$file" 2>/dev/null)" = crash ] && { echo "no reward written" >&2; exit 1; }
if [ "$(cat "$ROOT/app/$file" 2>/dev/null)" = "$want" ]; then echo 1; else echo 0; fi > "$ROOT/logs/verifier/reward.txt"
