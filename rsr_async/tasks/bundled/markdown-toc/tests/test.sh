#!/bin/bash
# Hidden checks: one line per check, then the reward in /logs/verifier/reward.json.
mkdir -p /logs/verifier
cd /app
python3 - <<'PYCHECK'
"""Hidden checks for this task; prints one line per check, writes the reward."""
import json
import os
import subprocess
from pathlib import Path

PARTIAL = True
CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def sh(cmd, cwd="/app", timeout=20, env=None):
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full)


def read(path):
    return Path(path).read_text()

import re

ORIGINAL = '# Widget Toolkit\n\n<!-- toc -->\n<!-- /toc -->\n\nWidget Toolkit builds widgets.\n\n## Getting Started\n\nInstall it and run it.\n\n### Requirements & Setup\n\nYou need a computer.\n\n### First Run\n\n```bash\n## this is a shell comment, not a heading\n./widget --init\n```\n\n## Configuration Options\n\n### The `config.yaml` File\n\nKeys and values.\n\n### Environment Variables (advanced)\n\nSet them.\n\n## FAQ\n\n# Not a section (level one headings are titles)\n\n## Contributing / License\n\nBe nice.\n'
HEADINGS = [
    (2, "Getting Started"), (3, "Requirements & Setup"), (3, "First Run"),
    (2, "Configuration Options"), (3, "The `config.yaml` File"),
    (3, "Environment Variables (advanced)"), (2, "FAQ"), (2, "Contributing / License"),
]

def anchor(text):
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")

def block():
    text = read("/app/README.md")
    m = re.search(r"<!-- toc -->\n(.*?)<!-- /toc -->", text, re.S)
    return text, m

def entries():
    _, m = block()
    return [l for l in m.group(1).splitlines() if l.strip()]

@check
def markers_kept():
    text, m = block()
    return m is not None and text.count("<!-- toc -->") == 1

@check
def body_unchanged():
    text, m = block()
    return text[: m.start(1)] + text[m.end(1):] == ORIGINAL

@check
def every_heading_listed():
    got = [re.sub(r"^\s*- \[(.*)\]\(.*\)$", r"\1", l) for l in entries()]
    return got == [h for _, h in HEADINGS]

@check
def anchors_correct():
    got = [re.sub(r"^.*\]\(#(.*)\)$", r"\1", l) for l in entries()]
    return got == [anchor(h) for _, h in HEADINGS]

@check
def nesting():
    want = ["- " if lvl == 2 else "  - " for lvl, _ in HEADINGS]
    got = [l[: len(w)] for l, w in zip(entries(), want)]
    return len(entries()) == len(want) and got == want


def main():
    results = {}
    for name, fn in CHECKS.items():
        try:
            ok = bool(fn())
        except Exception as exc:  # a crash in a check is a failed check
            print(f"{name}: error: {exc!r}")
            ok = False
        print(f"{name}: {'PASS' if ok else 'FAIL'}")
        results[name] = 1 if ok else 0
    out = Path("/logs/verifier")
    out.mkdir(parents=True, exist_ok=True)
    if PARTIAL:
        score = round(sum(results.values()) / len(results), 4)
        (out / "reward.json").write_text(json.dumps({"reward": score, **results}))
        print("reward", score)
    else:
        score = 1 if all(results.values()) else 0
        (out / "reward.txt").write_text(f"{score}\n")
        print("reward", score)


main()
PYCHECK
