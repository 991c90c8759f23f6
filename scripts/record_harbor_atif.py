#!/usr/bin/env python3
"""Record Harbor's ATIF schema and check our ATIF export with Harbor's own model.

Run on demand (not in CI), with a Python that has Harbor 0.26.0 installed::

    python3.12 -m venv /tmp/harbor-venv && /tmp/harbor-venv/bin/pip install harbor==0.26.0
    /tmp/harbor-venv/bin/python scripts/record_harbor_atif.py

It (1) writes the JSON schema of ``harbor.models.trajectories.Trajectory`` to
``tests/export/golden/atif_schema.json``, which the tests validate our ATIF files against
with ``jsonschema``; (2) builds the sample export of ``tests/export/samples.py`` with this
repository's Python (``RSR_PYTHON``, default ``.venv/bin/python``) and validates every
``atif/*.json`` in it with Harbor's pydantic model, which also checks what the JSON schema
cannot express (step ids from 1, observation results naming a tool call of their step).
Extra ATIF files or folders given as arguments are validated too. Exits non-zero on any
failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from harbor.models.trajectories import Trajectory

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "export" / "golden" / "atif_schema.json"
EXPECTED_HARBOR = "0.26.0"
BUILD_SAMPLE = (
    "import sys; from pathlib import Path; from tests.export.samples import suite; "
    "from rsr_async.export import write_export; write_export(suite(), Path(sys.argv[1]))"
)


def record_schema() -> None:
    version = metadata.version("harbor")
    if version != EXPECTED_HARBOR:
        sys.exit(
            f"record_harbor_atif: harbor {version} is installed; the reference is {EXPECTED_HARBOR}"
        )
    schema = Trajectory.model_json_schema()
    schema["$comment"] = (
        f"JSON schema of harbor=={version} harbor.models.trajectories.Trajectory, "
        "recorded by scripts/record_harbor_atif.py; do not edit by hand"
    )
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN.relative_to(REPO)}")


def validate(paths: list[Path]) -> int:
    failures = 0
    for path in paths:
        data = json.loads(path.read_text(encoding="utf-8"))
        try:
            model = Trajectory.model_validate(data)
        except Exception as exc:  # pydantic's ValidationError, reported per file
            failures += 1
            print(f"INVALID {path.name}: {exc}")
            continue
        same = model.to_json_dict() == data
        print(
            f"ok {path.name} ({len(model.steps)} steps, round-trip {'identical' if same else 'differs'})"
        )
    return failures


def main() -> None:
    record_schema()
    python = os.environ.get("RSR_PYTHON", str(REPO / ".venv" / "bin" / "python"))
    paths: list[Path] = []
    for arg in sys.argv[1:]:
        p = Path(arg)
        paths += sorted(p.glob("*.json")) if p.is_dir() else [p]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "export"
        subprocess.run([python, "-c", BUILD_SAMPLE, str(out)], cwd=REPO, check=True)
        sample = sorted((out / "atif").glob("*.json"))
        if not sample:
            sys.exit("record_harbor_atif: the sample export has no ATIF files")
        failures = validate(sample + paths)
    print(f"{len(sample) + len(paths) - failures} valid, {failures} invalid (Harbor's own model)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
