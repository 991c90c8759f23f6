#!/bin/bash
set -euo pipefail
git config --global user.name "Dev Example"
git config --global user.email dev@example.org
git config --global init.defaultBranch main
git config --global advice.detachedHead false

mkdir -p /app/project && cd /app/project
git init -q
echo "print('hello')" > app.py
git add . && git commit -qm "Start project"
git checkout -qb experiment
mkdir -p research
printf 'Cache results keyed by (user, day).\nMeasured 3.1x speed-up on the nightly job.\n' > research/caching.md
git add research && git commit -qm "Write up caching experiment"
echo "CACHE = {}" >> app.py
git commit -qam "Prototype cache"
git checkout -q main
echo "print('bye')" >> app.py
git commit -qam "Say goodbye"
git branch -qD experiment
