#!/bin/bash
cd /app
grep -c ERROR logs/app.log
grep -E '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[^ ]+ \[ERROR\]' logs/app.log | cut -c1-16 | tr 'T' ' ' | sort | uniq -c | sort -k1,1nr | head -n 1 | awk '{print $2, $3, $1}' > spike.txt
grep -E '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[^ ]+ \[ERROR\]' logs/app.log | awk '{print $3}' | tr -d ':' | sort | uniq -c | awk '{print $2, $1}' > errors_by_worker.txt
cat spike.txt errors_by_worker.txt
