#!/bin/bash
# Reference solution: list the items, fetch each, add up qty.
python3 - <<'PY'
import json, urllib.request
get = lambda p: json.load(urllib.request.urlopen(f"http://server:8000{p}", timeout=10))
total = sum(get(f"/items/{i}")["qty"] for i in get("/items"))
open("/app/total_qty.txt", "w").write(f"{total}\n")
print(total)
PY
