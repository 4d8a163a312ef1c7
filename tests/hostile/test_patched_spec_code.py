"""A plugin that patched a built-in spec class with code that raises is named, not the user's
input and not a traceback: the model file's specs are built by kvrules' classes running the
patched code (issue 25, found by the round-2 fuzz campaign)."""

from __future__ import annotations

import pytest

from kvrules import FullAttentionSpec, PluginError, SpecError, spec_from_dict
from kvrules.examples import load_example

ENTRY = {"type": "full_attention", "block_size": 16, "num_kv_heads": 8, "head_size": 128, "dtype": "bfloat16"}


def _raising(error: type[Exception]) -> property:
    def page(self: object) -> int:
        raise error("patched page size")

    return property(page)


@pytest.mark.parametrize("error", [ZeroDivisionError, TypeError, ValueError])
def test_patched_code_that_raises_is_named(monkeypatch: pytest.MonkeyPatch, error: type[Exception]) -> None:
    monkeypatch.setattr(FullAttentionSpec, "page_size_bytes", _raising(error))
    with pytest.raises(
        PluginError, match=rf"module '{__name__}', which is not kvrules, raised {error.__name__}"
    ):
        spec_from_dict(ENTRY, layer="model.layers.0.self_attn")
    with pytest.raises(PluginError, match="kvrules strategies"):
        load_example("llama3-8b")


def test_a_bad_value_is_still_the_users() -> None:
    with pytest.raises(SpecError, match=r"invalid value|head_size"):
        spec_from_dict({**ENTRY, "head_size": -1}, layer="model.layers.0.self_attn")
