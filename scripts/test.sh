#!/usr/bin/env bash
# The whole check, from a fresh clone: set-up, lint, types, tests (native and pure twins).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
echo "== ruff"
.venv/bin/ruff check rsr_async tests bench
echo "== mypy (strict on rsr_async/)"
.venv/bin/mypy
echo "== pytest"
.venv/bin/python -m pytest "$@"
