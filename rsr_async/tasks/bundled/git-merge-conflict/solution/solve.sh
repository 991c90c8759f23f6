#!/bin/bash
cd /app/service
git merge feature/export --no-edit
git diff | cat
cat > settings.ini <<'EOF'
[server]
host = 0.0.0.0
port = 8080
timeout = 20
workers = 4

[features]
search = on
export = on
export_format = csv
EOF
git add settings.ini
git commit --no-edit
git log --oneline --graph | cat
