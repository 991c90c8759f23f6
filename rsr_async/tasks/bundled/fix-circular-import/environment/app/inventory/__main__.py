import sys

from . import load, report

if len(sys.argv) != 3 or sys.argv[1] != "report":
    sys.exit("usage: python3 -m inventory report FILE")
print(report(load(sys.argv[2])))
