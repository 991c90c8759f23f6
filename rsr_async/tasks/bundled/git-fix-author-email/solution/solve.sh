#!/bin/bash
cd /app/lib
git log --format='%h %an <%ae> %s' | cat
git rebase -q --root --rebase-merges --keep-empty --exec 'git commit -q --amend --no-edit --allow-empty --reset-author'
git log --format='%h %an <%ae> %cn <%ce> %s' | cat
