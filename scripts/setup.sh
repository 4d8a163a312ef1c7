#!/usr/bin/env bash
# Set up a virtual environment in .venv with kvrules and its test tools (idempotent).
# Installs the pinned CPU build of torch first when no torch is importable, so pip never pulls
# a multi-GB CUDA build. Says what it is doing; pip's own log goes to .venv/setup.log and is
# shown only when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
step() { printf 'setup: %s\n' "$*" >&2; }
if [ ! -x .venv/bin/python ]; then
  step "creating the virtual environment .venv ($("$PY" --version 2>&1))"
  "$PY" -m venv .venv
fi
LOG=.venv/setup.log
: >"$LOG"
pip_install() { .venv/bin/python -m pip install -q "$@" >>"$LOG" 2>&1 || { cat "$LOG" >&2; exit 1; }; }
step "upgrading pip"
pip_install --upgrade pip
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  step "installing torch 2.13.0 (CPU build; about a minute)"
  pip_install "torch==2.13.0"
fi
step "installing kvrules with its test and lint tools (pip install -e .[dev])"
pip_install -e ".[dev]" --config-settings editable_mode=strict
step "done: .venv/bin/kvrules and .venv/bin/python -m pytest are ready"
