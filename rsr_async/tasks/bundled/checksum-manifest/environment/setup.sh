#!/bin/bash
set -euo pipefail
mkdir -p "/app/data/raw/2024 q1" /app/data/reports /app/data/.hidden
for i in 1 2 3; do head -c $((i * 1000)) /dev/zero | tr '\0' "$i" > "/app/data/raw/2024 q1/part-$i.bin"; done
echo "quarterly report" > /app/data/reports/q1.txt
echo "secret" > /app/data/.hidden/token
echo "readme" > /app/data/README
