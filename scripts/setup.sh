#!/usr/bin/env bash
# Set up a virtual environment in .venv with kvrules and its test tools (idempotent).
# Installs the pinned CPU build of torch first when no torch is importable, so pip never pulls
# a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  .venv/bin/python -m pip install -q "torch==2.13.0"
fi
.venv/bin/python -m pip install -q -e ".[dev]" --config-settings editable_mode=strict
