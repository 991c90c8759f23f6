#!/bin/bash
cd /app
awk '{print $5}' logs/auth.log | cut -d'[' -f1 | sort | uniq -c
python3 - <<'PY'
import collections, json, re
failed, invalid, ok = collections.Counter(), collections.defaultdict(set), set()
for line in open("logs/auth.log"):
    m = re.search(r"Failed password for invalid user (\S+) from (\S+)", line)
    if m:
        invalid[m.group(2)].add(m.group(1))
        continue
    m = re.search(r"Failed password for (\S+) from", line)
    if m:
        failed[m.group(1)] += 1
        continue
    m = re.search(r"Accepted \S+ for (\S+) from", line)
    if m:
        ok.add(m.group(1))
report = {"failed_by_user": dict(failed),
          "scanners": sorted(ip for ip, n in invalid.items() if len(n) >= 2),
          "accepted_users": sorted(ok)}
json.dump(report, open("ssh_report.json", "w"), indent=2)
PY
cat ssh_report.json
