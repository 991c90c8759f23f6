#!/bin/bash
cd /app/repo
git log --oneline | cat
git bisect start HEAD "$(git rev-list --max-parents=0 HEAD)"
git bisect run ./check.sh
git rev-parse refs/bisect/bad > /app/bad_commit.txt
git bisect reset
cat /app/bad_commit.txt
git show "$(cat /app/bad_commit.txt)" | cat
sed -i 's/"km": 100.0/"km": 1000.0/' units.py
./check.sh
git commit -qam "Restore the kilometre factor"
