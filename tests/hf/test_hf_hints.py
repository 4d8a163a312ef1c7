"""Issue 26 item 3: a refusal never suggests removing a field that changes the cache (removing it
would plan a cache the engine does not build)."""

from __future__ import annotations

from typing import Any

import pytest
from test_hf_generic import DEEPSEEK_V32, UNKNOWN, build

from kvrules import ModelFileError


@pytest.mark.parametrize(
    "config",
    [
        {**DEEPSEEK_V32, "model_type": "deepseek_v3", "sliding_window": 4096},
        {**UNKNOWN, "model_type": "hunyuan_v1_moe", "use_cla": True},
        {**UNKNOWN, "num_kv_shared_layers": 4},
    ],
)
def test_the_silent_drop_refusal_says_keep_the_field(config: dict[str, Any]) -> None:
    with pytest.raises(ModelFileError) as caught:
        build(config)
    text = str(caught.value)
    assert "Do not remove the field" in text
    assert "use (or write) an architecture that reads it" in text
    assert "Remove the field" not in text
