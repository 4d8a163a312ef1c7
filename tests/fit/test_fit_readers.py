"""Both Hugging Face readers give the same parameter count for every stored config: the built-in
reader (``auto``'s choice for the model types it knows) must fill in the class defaults the
count reads, as transformers does."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvrules import KVRulesError
from kvrules.hf.config import HFConfig
from kvrules.sizing.params import count_params

pytest.importorskip("transformers")

HF = Path(__file__).parent.parent / "data" / "hf"
CONFIGS = sorted(d.name for d in HF.iterdir() if (d / "config.json").is_file())


def _count(name: str, reader: str) -> object:
    try:
        return count_params(HFConfig.load(HF / name, reader=reader)).total
    except KVRulesError as exc:
        return type(exc).__name__


@pytest.mark.parametrize("name", CONFIGS)
def test_both_readers_count_alike(name: str) -> None:
    builtin = _count(name, "builtin")
    if builtin == "ConfigError":  # a model type the built-in table does not know
        pytest.skip("read by transformers only")
    assert builtin == _count(name, "transformers")
