#!/bin/bash
# The shared test: compares /app/data/<target> with <expect>, both from the step's tests/.
tests="$ROOT/tests"
target=$(cat "$tests/target")
if [ "$(cat "$ROOT/app/data/$target" 2>/dev/null)" = "$(cat "$tests/expect")" ]; then echo 1; else echo 0; fi > "$ROOT/logs/verifier/reward.txt"
