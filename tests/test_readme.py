"""The README's code blocks run: the minimal plugin and the Python API example."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_python_blocks_run(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = python_blocks()
    assert len(blocks) >= 2
    for index, block in enumerate(blocks):
        module = types.ModuleType(f"readme_block_{index}")
        monkeypatch.setitem(sys.modules, module.__name__, module)
        exec(compile(block, str(README), "exec"), module.__dict__)


def test_readme_starts_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    commands = re.findall(r"^bash scripts/setup.sh && .*$", text, flags=re.M)
    assert commands[:2] == [
        "bash scripts/setup.sh && .venv/bin/kvrules plan --example issue-43626",
        "bash scripts/setup.sh && .venv/bin/python -m pytest -q",
    ]
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci
