#!/usr/bin/env bash
# Make this checkout ready to run: venv, dependencies, native build, base image.
# Idempotent and quick when nothing changed; safe to run on a fresh machine (as root).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: $PYTHON is older than Python 3.11; set PYTHON=/path/to/python3.11" >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi

# Reinstall dependencies only when pyproject.toml or setup.py changed.
stamp=.venv/.rsr-installed
want=$(cat pyproject.toml setup.py | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing dependencies"
  log=.venv/install.log
  if ! { .venv/bin/python -m pip install -q --upgrade pip setuptools wheel &&
         .venv/bin/python -m pip install -q -e '.[dev]'; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup: installing dependencies failed (log above, also in $log)" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi

# Build the Cython extensions in place (fails under CI=1 rather than falling back).
.venv/bin/python setup.py -q build_ext --inplace 2>&1 | { grep -v -E '^(Compiling|\[[0-9]+/[0-9]+\] Cythonizing)' || true; }
.venv/bin/python -c 'import rsr_async._native as n; print("setup: native extensions", "active" if n.NATIVE else "NOT built (pure-Python twins)")'

# The verifier's static helper (rsr_async/sandbox/verifier_helper.c), compiled once into
# ~/.cache/rsr_async: it needs gcc and a static C library.
if ! command -v cc >/dev/null || [ ! -f /usr/lib/x86_64-linux-gnu/libc.a ] && [ ! -f /usr/lib/libc.a ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing gcc and libc6-dev (the verifier's static helper)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null
  fi
fi
.venv/bin/python -c 'from rsr_async.sandbox.hidden import helper_binary; print("setup: verifier helper", helper_binary())'

# A headless browser for the viewer's tests (tests/viewer/test_browser.py fails without it
# under CI=1): Debian's chromium and its driver, installed once.
if [ ! -x /usr/bin/chromedriver ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing chromium and chromium-driver (the viewer's browser tests)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "setup: /usr/bin/chromedriver is missing; the viewer's browser tests need chromium and chromium-driver (apt-get, as root)" >&2
  fi
fi

# The offline base image for sandboxes (debootstrap + docker import; skipped when present).
if ! docker image inspect rsr-base:bookworm >/dev/null 2>&1 && ! command -v debootstrap >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing debootstrap (needed once, to build the base image)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
fi
.venv/bin/python -m rsr_async images bootstrap
