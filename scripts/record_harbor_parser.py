"""Record Harbor 0.25.0's Terminus 2 JSON parser on our reply corpus.

Runs on demand, not in CI: Harbor needs Python >= 3.12.

    python3.12 -m venv /tmp/harbor312 && /tmp/harbor312/bin/pip install harbor==0.25.0
    /tmp/harbor312/bin/python scripts/record_harbor_parser.py

Each file in ``tests/harness/golden/replies/`` is one model reply (UTF-8, bytes as the
model sent them). Harbor's own ``TerminusJSONPlainParser.parse_response`` reads it, and
``tests/harness/golden/harbor_parser.json`` gets what Terminus 2 uses from the result:
the commands (keystrokes, and the duration Terminus waits: ``min(duration, 60)``),
whether the reply claims completion (Terminus tests it for truth, so ``1`` counts),
the error text and the warning text. ``tests/harness/test_parser_golden.py`` checks ours.

One normalisation: Harbor lists a command's unknown fields by joining a ``set``, whose
order changes from process to process (string hashing is randomised); the recording
sorts that list, which is the order we emit.
"""

from __future__ import annotations

import json
import os
import re
import sys
from importlib.metadata import version
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at import

from harbor.agents.terminus_2.terminus_json_plain_parser import (  # noqa: E402
    TerminusJSONPlainParser,
)

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "harness" / "golden"
UNKNOWN_FIELDS = re.compile(r"^(- Command \d+: Unknown fields: )(.*)$", re.MULTILINE)


def _sorted_unknown_fields(warning: str) -> str:
    return UNKNOWN_FIELDS.sub(lambda m: m[1] + ", ".join(sorted(m[2].split(", "))), warning)


def main() -> None:
    parser = TerminusJSONPlainParser()
    cases = []
    for path in sorted((GOLDEN / "replies").glob("*.txt")):
        result = parser.parse_response(path.read_bytes().decode("utf-8"))
        cases.append(
            {
                "reply": path.name,
                "commands": [
                    # terminus_2.py: Command(keystrokes, duration_sec=min(parsed.duration, 60))
                    {"keystrokes": c.keystrokes, "duration": c.duration, "wait": min(c.duration, 60)}
                    for c in result.commands
                ],
                "task_complete": bool(result.is_task_complete),
                "error": result.error,
                "warning": _sorted_unknown_fields(result.warning),
            }
        )
    record = {
        "harbor": version("harbor"),
        "python": sys.version.split()[0],
        "source": "harbor/agents/terminus_2/terminus_json_plain_parser.py",
        "cases": cases,
    }
    out = GOLDEN / "harbor_parser.json"
    out.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(cases)} replies recorded to {out}")


if __name__ == "__main__":
    main()
