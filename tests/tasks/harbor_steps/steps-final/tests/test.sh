#!/bin/bash
# One test for both steps: each step's tests/want names the file and its content.
read -r file want < "$ROOT/tests/want"
if [ "$(cat "$ROOT/app/$file" 2>/dev/null)" = "$want" ]; then echo 1; else echo 0; fi > "$ROOT/logs/verifier/reward.txt"
