#!/bin/bash
cd /app
sort -n -k1,1 bookings.txt | awk 'NR == 1 { s = $1; e = $2; next } $1 <= e { if ($2 > e) e = $2; next } { print s, e; s = $1; e = $2 } END { print s, e }' > busy.txt
cat busy.txt
