#!/bin/bash
cd /app/stats
python3 example.py
python3 - <<'PY'
import re
src = open("stats.py").read()
src = src.replace("""    values.sort()
    mid = len(values) // 2
    return values[mid]""", """    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2""")
src = src.replace("""    rank = int(p / 100 * len(ordered))
    return ordered[rank]""", """    import math
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]""")
src = src.replace("range(len(values) - window)", "range(len(values) - window + 1)")
open("stats.py", "w").write(src)
PY
python3 example.py
cd /app
