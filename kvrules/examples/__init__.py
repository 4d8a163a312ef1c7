"""The built-in examples shipped inside the package: model files (``*.json`` here) and ``hf-*``
Hugging Face configs (``hf/``), built through the model front door."""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources

from kvrules.errors import ModelFileError
from kvrules.hf.examples import hf_example_names, load_hf_example
from kvrules.model import ModelFile, parse_model
from kvrules.specs.base import KVCacheSpec


def example_names() -> list[str]:
    """Names of the built-in examples shipped inside the package (model files, then ``hf-*`` configs)."""
    folder = resources.files("kvrules") / "examples"
    files = sorted(p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json"))
    return files + hf_example_names()


def load_example(name: str, spec_types: Mapping[str, type[KVCacheSpec]] | None = None) -> ModelFile:
    """A built-in example by name (an ``hf-*`` example is built from its Hugging Face config)."""
    if name not in example_names():
        raise ModelFileError(f"unknown example {name!r}; available: {', '.join(example_names())}")
    if name.startswith("hf-"):
        return load_hf_example(name)
    text = (resources.files("kvrules") / "examples" / f"{name}.json").read_text(encoding="utf-8")
    return parse_model(json.loads(text), f"example {name!r}", spec_types)
