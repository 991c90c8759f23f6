#!/bin/bash
set -euo pipefail
git config --global user.name "Dev Example"
git config --global user.email dev@example.org
git config --global init.defaultBranch main
git config --global advice.detachedHead false

mkdir -p /app/service && cd /app/service
git init -q
cat > settings.ini <<'EOF'
[server]
host = 0.0.0.0
port = 8080
timeout = 30

[features]
search = on
EOF
echo "# service" > README.md
git add . && git commit -qm "Initial settings"
git checkout -qb feature/export
cat > settings.ini <<'EOF'
[server]
host = 0.0.0.0
port = 8080
timeout = 45

[features]
search = on
export = on
export_format = csv
EOF
git commit -qam "Enable CSV export (and bump timeout for big exports)"
git checkout -q main
cat > settings.ini <<'EOF'
[server]
host = 0.0.0.0
port = 8080
timeout = 20
workers = 4

[features]
search = on
EOF
git commit -qam "Tune server: 4 workers, shorter timeout"
git rev-parse main > /tmp/main_before
