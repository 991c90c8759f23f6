#!/bin/bash
cd /app
python3 server.py --check
cat conf/app.ini conf/overrides.ini
ls plugins
sed -i 's/^port = 80$/port = 8080/; s/^level = Info$/level = INFO/; s/^max_mb = 1024$/max_mb = 256/' conf/overrides.ini
sed -i 's/ratelimit$/rate_limit/' conf/app.ini
python3 server.py --check
