#!/bin/bash
cd /app
awk '{print $1}' logs/access.log | sort | uniq -c | sort -k1,1nr -k2,2 | head -n 5 | awk '{print $1, $2}' > top_ips.txt
cat top_ips.txt
