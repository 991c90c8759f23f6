#!/bin/bash
set -euo pipefail
cd /app/ledger
python3 - <<'EOF'
import random
rng = random.Random(3)
names = ["rent", "groceries", "salary", "utilities-electricity-and-gas-combined",
         "coffee", "transport", "quarterly-professional-membership-subscription-fees"]
lines = []
for i in range(300):
    lines.append(f"{rng.choice(names)},{rng.randint(-50000, 50000)}")
    if i in (40, 190):
        lines.append("")
    if i == 120:
        lines.append("corrupted record without separator")
open("transactions.csv", "w").write("\n".join(lines) + "\n")
EOF
