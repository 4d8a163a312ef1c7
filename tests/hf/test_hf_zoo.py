"""The model zoo: every real config in tests/data/hf planned through kvrules' front door and checked
layer by layer against the independent reference in tests/hf_reference.py.

Parametrised over corpus x KV dtype {auto (bf16), fp8} x TP {1, 2, 8}. Where vLLM accepts the TP
size, kvrules must build every layer with the reference's kind, page bytes, block size and window,
and plan it with vLLM's pool (``num_blocks`` and max concurrency of ``hf_reference.capacity``; the
plan invariants are checked at TP 1); where vLLM refuses it (a head count TP
cannot split), kvrules must refuse with a KVRulesError. Each (config, dtype, TP) is built and
planned once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from fuzz.invariants import check_plan_invariants
from hf_reference import TPRefused, capacity, expected, first_difference, layer_index, observed, window_of

from kvrules import EngineConfig, KVRulesError, Plan, Planner
from kvrules.hf import HFModel, HFOptions, build_hf_model

CORPUS = Path(__file__).parent.parent / "data" / "hf"
NAMES = sorted(p.name for p in CORPUS.iterdir() if (p / "config.json").is_file())
UNCERTAIN = frozenset(json.loads((CORPUS / "uncertain.json").read_text()))
KV_DTYPES = ("auto", "fp8")
TP_SIZES = (1, 2, 8)
MEMORY = 8 << 30
MAX_MODEL_LEN = 4096
MAX_NUM_BATCHED_TOKENS = 2048
CASES = [(name, kv, tp) for name in NAMES for kv in KV_DTYPES for tp in TP_SIZES]


def config_of(name: str) -> dict[str, object]:
    """The decoded config.json of corpus entry ``name``."""
    data: dict[str, object] = json.loads((CORPUS / name / "config.json").read_text())
    return data


@dataclass(frozen=True)
class Outcome:
    """What kvrules did with one (config, dtype, TP): the model and its plan, or the error."""

    model: HFModel | None = None
    plan: Plan | None = None
    error: KVRulesError | None = None


def plan_model(model: HFModel) -> Plan:
    """Plan ``model`` on one worker with small, fixed settings."""
    engine = EngineConfig.from_dict(
        {**model.engine, "max_model_len": MAX_MODEL_LEN, "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS}
    )
    return Planner("vllm").plan(model.specs, MEMORY, engine)


@cache
def outcome(name: str, kv: str, tp: int) -> Outcome:
    """Build (and, when that works, plan) one corpus entry once per dtype and TP."""
    options = HFOptions(kv_cache_dtype=kv, tensor_parallel_size=tp)
    try:
        model = build_hf_model(config_of(name), None, options, strategies="vllm")
    except KVRulesError as exc:
        return Outcome(error=exc)
    try:
        return Outcome(model=model, plan=plan_model(model))
    except KVRulesError as exc:
        return Outcome(model=model, error=exc)


def test_corpus_is_large_and_annotated() -> None:
    assert len(NAMES) >= 60
    for name in NAMES:
        assert (CORPUS / name / "NOTES.md").is_file(), name
    assert UNCERTAIN <= set(NAMES)
    assert 0 < len(UNCERTAIN) < len(NAMES)


@pytest.mark.parametrize(("name", "kv", "tp"), CASES, ids=[f"{n}-{k}-tp{t}" for n, k, t in CASES])
def test_zoo_layers_match_the_reference(name: str, kv: str, tp: int) -> None:
    config = config_of(name)
    try:
        want = expected(config, kv, tp)
    except TPRefused as why:
        result = outcome(name, kv, tp)
        assert result.model is None, (
            f"vLLM refuses TP {tp} ({why}); kvrules built {result.model and result.model.description()}"
        )
        assert isinstance(result.error, KVRulesError)
        return
    result = outcome(name, kv, tp)
    if result.model is None:
        pytest.fail(f"kvrules refused: {type(result.error).__name__}: {result.error}")
    difference = first_difference(want, observed(result.model.specs))
    assert difference is None, difference
    assert result.plan is not None, (
        f"built but planning failed: {type(result.error).__name__}: {result.error}"
    )
    pool = capacity(want, MEMORY, MAX_MODEL_LEN, MAX_NUM_BATCHED_TOKENS)
    if pool is not None:
        assert result.plan.num_blocks == pool.num_blocks
        assert result.plan.max_concurrency == pytest.approx(pool.max_concurrency)
    if tp == 1:  # the invariants (JSON schema included) cost as much as the build: once per config and dtype
        check_plan_invariants(result.plan, result.model.specs, MEMORY)


# ---------------------------------------------------------------- the reader mismatches of issue 13


def test_mistral_v01_window_applies_to_every_layer() -> None:
    """Mistral-7B-v0.1: ``sliding_window`` 4096 and no ``layer_types``; vLLM slides every layer
    (issue 13: 106.39 requests of 32,768 tokens in 80 GiB, not 20.00)."""
    model = build_hf_model(config_of("mistralai__Mistral-7B-v0.1"), None, HFOptions(), strategies="vllm")
    assert {(s.type_name, window_of(s)) for s in model.specs.values()} == {("sliding_window", 4096)}
    plan = Planner("vllm").plan(
        model.specs, 80 << 30, EngineConfig(max_model_len=32768, max_num_batched_tokens=2048)
    )
    # one group of 32 layers, page 16 x 8 x 128 x 2 x 2 B; a request needs cdiv(4095 + 2048, 16) + 1 = 385 blocks
    blocks = (80 << 30) // (16 * 8 * 128 * 2 * 2) // 32
    assert plan.num_blocks == blocks
    assert plan.max_concurrency == pytest.approx(blocks / 385)
    assert round(plan.max_concurrency, 2) == 106.39


def test_gemma3_12b_head_dim_is_the_class_default() -> None:
    """gemma-3-12b-it omits ``head_dim``: Gemma3TextConfig's 256, not hidden/heads = 240."""
    model = build_hf_model(config_of("google__gemma-3-12b-it"), None, HFOptions(), strategies="vllm")
    assert {s.page_size_bytes for s in model.specs.values()} == {16 * 8 * 256 * 2 * 2}


def test_gemma3_4b_heads_come_from_the_class_defaults() -> None:
    """gemma-3-4b-it's ``text_config`` has no head counts: 8 heads, 4 KV heads, head_dim 256."""
    model = build_hf_model(config_of("google__gemma-3-4b-it"), None, HFOptions(), strategies="vllm")
    kinds = [s.type_name for s in model.specs.values()]
    assert len(kinds) == 34 and kinds.count("full_attention") == 5
    assert {s.page_size_bytes for s in model.specs.values()} == {16 * 4 * 256 * 2 * 2}


def test_llama4_empty_no_rope_layers_means_the_default_pattern() -> None:
    """``no_rope_layers: []`` is transformers' "use the default": global attention every 4th layer."""
    model = build_hf_model(
        config_of("meta-llama__Llama-4-Scout-17B-16E-Instruct"), None, HFOptions(), strategies="vllm"
    )
    full = [layer_index(n) for n, s in model.specs.items() if s.type_name == "full_attention"]
    assert full == list(range(3, 48, 4))


# ---------------------------------------------------------------- the reference itself, on published numbers


def _blocks(name: str, kv: str, tp: int = 1) -> set[tuple[str, int, int]]:
    return {(layer.kind, layer.block, layer.page) for layer in expected(config_of(name), kv, tp)}


def test_reference_reproduces_the_published_hybrid_blocks() -> None:
    """The reference agrees with the block sizes vLLM logs (formulas.md §3.3, §5.4; issue #24280)."""
    assert {b for _, b, _ in _blocks("Qwen__Qwen3-Coder-Next", "auto")} == {544}
    assert {b for _, b, _ in _blocks("Qwen__Qwen3-Coder-Next", "fp8")} == {1072}
    assert {b for _, b, _ in _blocks("Qwen__Qwen3-Coder-Next", "fp8", 8)} == {272}
    assert {b for _, b, _ in _blocks("nvidia__NVIDIA-Nemotron-Nano-9B-v2", "auto")} == {1312}
    assert {b for _, b, _ in _blocks("ai21labs__Jamba-v0.1", "auto")} == {80}
    assert {b for _, b, _ in _blocks("ai21labs__Jamba-v0.1", "fp8")} == {160}
    assert ("mamba", 80, 327680) in _blocks("ai21labs__Jamba-v0.1", "auto")


def test_reference_pages_of_plain_models() -> None:
    """Llama-3.1-8B 65,536 / 32,768 B at block 16; DeepSeek-V3 73,728 / 36,864 B at block 64;
    gpt-oss-20b 12 sliding (128) + 12 full layers of 32,768 B (formulas.md §5.1, §5.2)."""
    assert _blocks("meta-llama__Llama-3.1-8B", "auto") == {("full_attention", 16, 65536)}
    assert _blocks("meta-llama__Llama-3.1-8B", "fp8") == {("full_attention", 16, 32768)}
    assert _blocks("deepseek-ai__DeepSeek-V3", "auto") == {("mla", 64, 73728)}
    assert _blocks("deepseek-ai__DeepSeek-V3", "fp8", 8) == {("mla", 64, 36864)}
    layers = expected(config_of("openai__gpt-oss-20b"), "auto", 1)
    assert [layer.window for layer in layers[:4]] == [128, None, 128, None]
    assert {layer.page for layer in layers} == {32768}


def test_reference_tp_rule() -> None:
    """Attention heads must divide; KV heads divide or are replicated; otherwise vLLM refuses."""
    with pytest.raises(TPRefused):
        expected(config_of("Qwen__Qwen2-7B"), "auto", 8)  # 28 heads
    with pytest.raises(TPRefused):
        expected(config_of("microsoft__Phi-3-medium-4k-instruct"), "auto", 8)  # 10 KV heads
    assert _blocks("Qwen__Qwen3-30B-A3B", "auto", 8) == {("full_attention", 16, 16 * 1 * 128 * 2 * 2)}


def test_reference_groups_gemma3_27b_as_vllm_does() -> None:
    """52 sliding + 10 full layers: group_size 10, 1 full + cdiv(52, 10) = 6 sliding groups
    (formulas.md §5.1); a request of 4096 tokens needs 256 + 6 x (cdiv(1023 + 2048, 16) + 1) blocks."""
    layers = expected(config_of("google__gemma-3-27b-it"), "auto", 1)
    pool = capacity(layers, 10 * 131072 * 100, 4096, 2048)
    assert pool is not None
    assert pool.num_blocks == 100
    assert pool.blocks_per_request == 256 + 6 * (192 + 1)
