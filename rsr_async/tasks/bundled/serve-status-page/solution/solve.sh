#!/bin/bash
cd /srv/status
printf '{"ok": true, "service": "inventory", "version": 3}\n' > status.json
nohup python3 -m http.server 8080 --bind 127.0.0.1 > /tmp/status-server.log 2>&1 &
for i in $(seq 50); do python3 -c "import socket, sys; sys.exit(socket.socket().connect_ex(('127.0.0.1', 8080)))" && break; sleep 0.1; done
