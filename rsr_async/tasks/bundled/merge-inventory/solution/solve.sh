#!/bin/bash
cd /app
python3 - <<'PY'
import csv, json
cat = json.load(open("catalog.json"))
totals = {}
for name in ("warehouse_a.csv", "warehouse_b.csv"):
    for row in csv.DictReader(open(name)):
        sku = row["sku"].strip().upper()
        totals[sku] = totals.get(sku, 0) + int(row["qty"])
with open("inventory.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["sku", "name", "total_qty"])
    for sku in sorted(totals):
        if sku in cat:
            w.writerow([sku, cat[sku], totals[sku]])
open("unknown_skus.txt", "w").write("".join(s + "\n" for s in sorted(set(totals) - set(cat))))
PY
cat inventory.csv unknown_skus.txt
