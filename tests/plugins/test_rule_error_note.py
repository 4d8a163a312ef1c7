"""Issue 25 item 4: a kvrules error a third-party rule raises itself keeps its class and text
and gains the rule and its plugin as a note, which the CLI prints."""

from __future__ import annotations

from dataclasses import dataclass

import faulty_plugins as fp
import pytest

import kvrules
from kvrules import EngineConfig, FullAttentionSpec, SpecError, get_plugin_manager
from kvrules.cli.common import error_text
from kvrules.plugin import PlanContext


@dataclass(frozen=True)
class RaisingConverter(fp.FaultyConverter):
    name: str = "raising-convert"

    def convert(self, specs: fp.Specs, ctx: PlanContext) -> dict[str, kvrules.KVCacheSpec]:
        raise SpecError("layer 'l0': the converter's own complaint")


def test_own_spec_error_keeps_class_and_text_and_names_the_rule() -> None:
    pm = get_plugin_manager(
        autoload=False, plugins=[fp.FaultyPlugin("test-raising", rules=lambda: [RaisingConverter()])]
    )
    specs = {"l0": FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16")}
    with pytest.raises(SpecError, match="the converter's own complaint") as caught:
        kvrules.Planner(["vllm", "raising-convert"], plugin_manager=pm).plan(
            specs, 8 << 30, EngineConfig(max_model_len=4096)
        )
    notes = caught.value.__notes__
    assert len(notes) == 1 and "raising-convert" in notes[0] and "test-raising" in notes[0]
    assert notes[0] in error_text(caught.value)
