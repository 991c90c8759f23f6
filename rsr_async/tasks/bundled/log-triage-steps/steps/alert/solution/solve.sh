#!/bin/bash
awk -F= 'NR == FNR { if ($0 ~ /^#/ || NF < 2) next; limit[$1] = $2; next } { split($0, f, " "); if ((f[1] in limit) && f[2] > limit[f[1]]) print f[1] }' /app/thresholds.conf /app/work/counts.txt | sort > /app/work/alerts.txt
