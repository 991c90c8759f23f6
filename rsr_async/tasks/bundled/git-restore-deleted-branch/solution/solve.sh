#!/bin/bash
cd /app/project
git reflog | head -n 20
git branch experiment "$(git reflog --format='%H %gs' | grep 'commit: Prototype cache' | head -n 1 | cut -d' ' -f1)"
git log --oneline experiment | cat
