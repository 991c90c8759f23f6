#!/bin/bash
cd /app
find /srv/data -type f -printf '%s %p\n' | sort -rn | head -n 3 | cut -d' ' -f2- > /app/largest.txt
cat /app/largest.txt
find /srv/data/tmp -type f -mtime +7 -print -delete
du -s /srv/data/*/ | sort -rn | head -n 1 | awk '{print $2}' | xargs basename > /app/biggest_dir.txt
cat /app/biggest_dir.txt
