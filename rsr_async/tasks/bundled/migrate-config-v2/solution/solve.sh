#!/bin/bash
cd /app
cat docs/MIGRATION.md config/service.v1.yaml
python3 - <<'PY'
import yaml
old = yaml.safe_load(open("config/service.v1.yaml"))
host, _, port = old["listen"].rpartition(":")
new = {
    "version": 2,
    "name": old["name"],
    "server": {"host": host, "port": int(port), "workers": old["workers"], "timeout": f"{old['timeout']}s"},
    "database": {"url": old["database_url"], "pool_size": old["db_pool"]},
    "features": {f: True for f in old["features"]},
    "logging": {"debug": old["debug"], "level": old["log_level"].upper()},
}
yaml.safe_dump(new, open("config/service.v2.yaml", "w"), sort_keys=False)
PY
cat config/service.v2.yaml
