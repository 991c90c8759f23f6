#!/bin/bash
# Reference solution: count ERROR-level lines per service (the level is the 2nd field).
cd /app
awk '$2 == "ERROR" { sub(":", "", $3); n[$3]++ } END { for (s in n) print s, n[s] }' "$LOG_FILE" \
  | sort -k2,2nr -k1,1 > /app/error_counts.txt
cat /app/error_counts.txt
