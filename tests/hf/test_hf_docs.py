"""The plugin examples in docs/hf.md run: an architecture plugin and an aligner plugin."""

from __future__ import annotations

import re
import sys
import types
from collections import Counter
from pathlib import Path

import pytest

import kvrules
from kvrules.hf import HFOptions, build_hf_model
from kvrules.hf.examples import load_hf_example_info

DOCS = Path(__file__).resolve().parents[2] / "docs" / "hf.md"


def docs_module(marker: str) -> types.ModuleType:
    """The Python block after ``<!-- docs-test: marker -->`` in docs/hf.md, as a module."""
    text = DOCS.read_text(encoding="utf-8")
    match = re.search(rf"<!-- docs-test: {marker} -->\s*```python\n(.*?)```", text, re.S)
    assert match, f"no code block marked {marker!r} in {DOCS}"
    module = types.ModuleType(f"test-docs-{marker}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(match.group(1), f"{DOCS}:{marker}", "exec"), module.__dict__)
    return module


def test_the_architecture_plugin_in_the_docs() -> None:
    pm = kvrules.get_plugin_manager(autoload=False, plugins=[docs_module("architecture-plugin")])
    config = {"model_type": "my_model", "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 2,
              "hidden_size": 1024}  # fmt: skip
    model = build_hf_model(config, None, HFOptions(tensor_parallel_size=2), plugin_manager=pm)
    assert Counter(s.type_name for s in model.specs.values()) == {"full_attention": 4, "sliding_window": 2}
    assert model.specs["model.layers.0.self_attn.attn"].num_kv_heads == 1  # type: ignore[attr-defined]
    assert model.target.architecture == "my-model"
    applied = [d for d in model.decisions if d.stage == "arch" and d.outcome == "applied"]
    assert [d.rule for d in applied] == ["my-model"]
    assert "my-model" in pm.registries.architectures.providers


def test_the_aligner_plugin_in_the_docs() -> None:
    pm = kvrules.get_plugin_manager(autoload=False, plugins=[docs_module("aligner-plugin")])
    ex = load_hf_example_info("hf-gemma-3-27b")
    model = build_hf_model(ex.config, None, ex.options, strategies=["vllm", "round-to-64"], plugin_manager=pm)
    assert {s.block_size for s in model.specs.values()} == {64}
    [decision] = [d for d in model.decisions if d.stage == "align" and d.layer is None]
    assert (decision.rule, decision.outcome) == ("round-to-64", "applied")
    with pytest.raises(kvrules.PluginError, match="unknown strategy set 'round-to-64'"):
        build_hf_model(ex.config, None, ex.options, strategies=["round-to-64"])  # not installed by default
