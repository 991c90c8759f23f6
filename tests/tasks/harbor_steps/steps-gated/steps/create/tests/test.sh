#!/bin/bash
# $ROOT is set only when Harbor's recording runs this on a host directory.
if [ "$(cat "$ROOT/app/data/a.txt" 2>/dev/null)" = alpha ]; then echo 1; else echo 0; fi > "$ROOT/logs/verifier/reward.txt"
