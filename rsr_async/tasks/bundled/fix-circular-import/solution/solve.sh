#!/bin/bash
cd /app
python3 -m inventory report data/stock.csv
cat > inventory/money.py <<'EOF'
def money(cents: int) -> str:
    return f"${cents // 100}.{cents % 100:02d}"
EOF
sed -i 's/^from .report import money$/from .money import money/' inventory/models.py
python3 - <<'PY'
p = "inventory/report.py"
s = open(p).read()
s = s.replace('def money(cents: int) -> str:\n    return f"${cents // 100}.{cents % 100:02d}"\n', "from .money import money\n")
open(p, "w").write(s)
PY
python3 -m inventory report data/stock.csv
