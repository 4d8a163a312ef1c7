#!/usr/bin/env bash
# Set up a virtual environment in .venv with kvrules and its test tools (idempotent).
# Installs the pinned CPU build of torch first when no torch is importable, so pip never pulls
# a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
LOG=.venv/setup.log
# quiet on success; the whole pip log on failure
pip_install() { .venv/bin/python -m pip install -q "$@" >>"$LOG" 2>&1 || { cat "$LOG" >&2; exit 1; }; }
: >"$LOG"
pip_install --upgrade pip
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  pip_install "torch==2.13.0"
fi
pip_install -e ".[dev]" --config-settings editable_mode=strict
