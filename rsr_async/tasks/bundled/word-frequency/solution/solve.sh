#!/bin/bash
cd /app
tr -cs 'A-Za-z' '\n' < corpus.txt | tr 'A-Z' 'a-z' | grep -v '^$' | sort | uniq -c | sort -k1,1nr -k2,2 | head -n 10 | awk '{print $1, $2}' > top_words.txt
cat top_words.txt
