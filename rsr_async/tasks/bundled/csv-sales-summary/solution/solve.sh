#!/bin/bash
cd /app
head -n 5 data/sales.csv
grep -n 'region' data/sales.csv
python3 - <<'PY'
import csv, json
rows, by_region, qty = 0, {}, {}
with open("data/sales.csv", newline="") as f:
    for rec in csv.DictReader(f):
        q = (rec.get("quantity") or "").strip()
        if not q.isdigit():
            continue
        rows += 1
        rev = int(q) * float(rec["unit_price"])
        reg = rec["region"].strip().lower()
        by_region[reg] = by_region.get(reg, 0) + rev
        qty[rec["product"]] = qty.get(rec["product"], 0) + int(q)
out = {"rows": rows, "total_revenue": round(sum(by_region.values()), 2),
       "by_region": {k: round(v, 2) for k, v in by_region.items()},
       "top_product": max(qty, key=qty.get)}
json.dump(out, open("summary.json", "w"), indent=2)
PY
cat summary.json
