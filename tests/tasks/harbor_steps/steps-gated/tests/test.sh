#!/bin/bash
# The shared test: compares /app/data/<target> with <expect>, both from the step's tests/.
tests="$ROOT/tests"
target=$(cat "$tests/target")
# A verifier that crashes (no reward at all) when the agent wrote "crash".
[ "$(cat "$ROOT/app/data/$target" 2>/dev/null)" = crash ] && { echo "no reward written" >&2; exit 1; }
if [ "$(cat "$ROOT/app/data/$target" 2>/dev/null)" = "$(cat "$tests/expect")" ]; then echo 1; else echo 0; fi > "$ROOT/logs/verifier/reward.txt"
