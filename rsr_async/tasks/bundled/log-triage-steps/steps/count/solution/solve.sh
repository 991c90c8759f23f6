#!/bin/bash
awk '{ sub(":$", "", $3); n[$3]++ } END { for (c in n) print c, n[c] }' /app/work/errors.log | sort -k2,2nr -k1,1 > /app/work/counts.txt
