"""kvrules never changes the host process's environment (issue 25, R11).

Before, the transformers reader did ``os.environ.setdefault("HF_HUB_OFFLINE", "1")``: after one
Hugging Face read every later hub access of the process (an engine loading weights) ran offline.
Now the reader is offline by construction, per call (transformers' ``from_dict``, which never
reaches the hub), and nothing in ``kvrules/`` or ``plugins/`` writes to ``os.environ``.
"""

from __future__ import annotations

import ast
import importlib
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from kvrules.hf import HFConfig, build_hf_model

ROOT = Path(__file__).resolve().parents[2]
QWEN = ROOT / "kvrules/examples/hf/qwen3-coder-next"


@pytest.fixture
def transformers() -> Any:
    return pytest.importorskip("transformers", exc_type=ImportError)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("network access while reading a config")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


#: importing transformers' config modules imports ``torch._dynamo``, which sets
#: ``TORCHINDUCTOR_CACHE_DIR`` itself (torch's doing, in any process importing it): imported first
TORCH_OWN_MODULE = "torch._dynamo"


def torch_own_import() -> None:
    importlib.import_module(TORCH_OWN_MODULE)


@pytest.mark.usefixtures("no_network")
def test_a_transformers_read_leaves_the_environment_alone_and_works_offline(
    transformers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    torch_own_import()
    before = dict(os.environ)
    for model_type in ("llama", "gemma3", "deepseek_v3"):
        config = HFConfig({"model_type": model_type}, "x.json", reader="transformers")
        assert config.get("num_hidden_layers") and config.reading.reader == "transformers"
    model = build_hf_model(HFConfig.load(QWEN, reader="transformers"))
    assert model.specs
    assert dict(os.environ) == before


def test_a_host_process_stays_online_after_a_read(transformers: Any, tmp_path: Path) -> None:
    """In a fresh interpreter (huggingface_hub reads ``HF_HUB_OFFLINE`` once, at import): after a
    read through transformers, huggingface_hub is still online and the environment unchanged."""
    code = (
        "import os, socket\n"
        "def refuse(*a, **k):\n"
        "    raise AssertionError('network access while reading a config')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        f"import {TORCH_OWN_MODULE}\n"
        "before = dict(os.environ)\n"
        "from kvrules.hf import HFConfig\n"
        f"config = HFConfig.load({str(QWEN)!r}, reader='transformers')\n"
        "assert config.get('num_hidden_layers') and config.reading.reader == 'transformers'\n"
        "import huggingface_hub.constants as hub\n"
        "assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items())\n"
        "assert hub.HF_HUB_OFFLINE is False, 'huggingface_hub was made offline'\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]


# -- no environment writes anywhere in the library --------------------------------------------------

#: methods of ``os.environ`` that change it
_WRITERS = {"setdefault", "update", "pop", "popitem", "clear", "__setitem__", "__delitem__"}


def _environ(node: ast.AST) -> bool:
    """``os.environ`` or ``environ`` (``from os import environ``), or ``os.environb``."""
    if isinstance(node, ast.Attribute):
        return (
            node.attr in ("environ", "environb")
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        )
    return isinstance(node, ast.Name) and node.id in ("environ", "environb")


def environment_writes(source: str, name: str) -> list[str]:
    """``name:line: what`` for each write to the process environment in ``source``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, name)):
        line = getattr(node, "lineno", 0)
        targets: Sequence[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Subscript) and _environ(target.value):
                found.append(f"{name}:{line}: os.environ[...] written")
            elif _environ(target):
                found.append(f"{name}:{line}: os.environ replaced")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            if func.attr in _WRITERS and _environ(func.value):
                found.append(f"{name}:{line}: os.environ.{func.attr}()")
            if (
                func.attr in ("putenv", "unsetenv")
                and isinstance(func.value, ast.Name)
                and func.value.id == "os"
            ):
                found.append(f"{name}:{line}: os.{func.attr}()")
    return found


def test_the_scan_finds_every_kind_of_write() -> None:
    source = (
        "import os\nfrom os import environ\n"
        "os.environ['A'] = '1'\nos.environ.setdefault('B', '1')\nos.environ.update(C='1')\n"
        "os.putenv('D', '1')\ndel os.environ['E']\nenviron['F'] = '1'\nos.environ.pop('G', None)\n"
        "x = os.environ.get('H')\nenv = {**os.environ, 'I': '1'}\n"
    )
    assert sorted(environment_writes(source, "m.py")) == [
        "m.py:3: os.environ[...] written",
        "m.py:4: os.environ.setdefault()",
        "m.py:5: os.environ.update()",
        "m.py:6: os.putenv()",
        "m.py:7: os.environ[...] written",
        "m.py:8: os.environ[...] written",
        "m.py:9: os.environ.pop()",
    ]


def test_kvrules_and_the_built_in_plugins_never_write_the_environment() -> None:
    files = sorted((ROOT / "kvrules").rglob("*.py")) + sorted((ROOT / "plugins").rglob("*.py"))
    assert len(files) > 50
    writes = [
        hit
        for path in files
        for hit in environment_writes(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert writes == []
