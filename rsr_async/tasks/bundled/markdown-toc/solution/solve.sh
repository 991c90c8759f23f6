#!/bin/bash
set +H
cd /app
python3 - <<'PY'
import re
text = open("README.md").read()
out, fenced = [], False
for line in text.splitlines():
    if line.startswith("```"):
        fenced = not fenced
        continue
    m = re.match(r"^(##|###) (.*)$", line)
    if m and not fenced:
        title = m.group(2).strip()
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        indent = "" if m.group(1) == "##" else "  "
        out.append(f"{indent}- [{title}](#{slug})")
toc = "<!-- toc -->\n" + "\n".join(out) + "\n<!-- /toc -->"
text = text.replace("<!-- toc -->\n<!-- /toc -->", toc, 1)
open("README.md", "w").write(text)
PY
head -n 15 README.md
