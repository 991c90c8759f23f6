#!/bin/bash
cd /app
python3 - <<'PY'
import csv
rows = [(r["name"], int(r["weight_g"]), int(r["value"])) for r in csv.DictReader(open("gear.csv"))]
cap = 4000
best = {0: (0, [])}
for name, w, v in rows:
    for used, (val, names) in list(best.items()):
        nu = used + w
        if nu <= cap and (nu not in best or best[nu][0] < val + v):
            best[nu] = (val + v, names + [name])
val, names = max(best.values())
print(val)
open("pack.txt", "w").write("\n".join(names) + "\n")
PY
cat pack.txt
