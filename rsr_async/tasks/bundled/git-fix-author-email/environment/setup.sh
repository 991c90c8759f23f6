#!/bin/bash
set -euo pipefail
git config --global user.name "Dev Example"
git config --global user.email dev@example.org
git config --global init.defaultBranch main
git config --global advice.detachedHead false

mkdir -p /app/lib && cd /app/lib
git init -q
echo "def add(a, b):" > mathx.py; echo "    return a + b" >> mathx.py
git add . && git commit -qm "Add add()"
git -c user.email=dev@example.org commit -q --allow-empty -m "Empty commit kept for the changelog"
for f in sub mul div; do
  echo "def $f(a, b): pass" >> mathx.py
  git -c user.email=dev@localhost.localdomain -c user.name="dev" commit -qam "Add $f()"
done
echo "# mathx" > README.md; git add README.md
git commit -qm "Add README"
git config --global user.email dev@example.org
