#!/bin/bash
set -euo pipefail
chmod +x /app/bin/disk-report
mkdir -p "/app/samples" "/app/samples/a dir"
printf '%0500d' 0 > "/app/samples/big file.log"
printf '%0120d' 0 > "/app/samples/-dash.txt"
printf '%020d' 0 > "/app/samples/plain.txt"
printf '%07d' 0 > "/app/samples/star*.txt"
