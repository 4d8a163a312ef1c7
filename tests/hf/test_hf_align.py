"""The align stage: ``hybrid-align`` (vLLM's config-time block size) and the Aligner contract."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kvrules
from kvrules import KVRulesPluginManager, PluginError
from kvrules.hf import AlignContext, HFOptions, build_hf_model, hybrid_block_size
from kvrules.hf.examples import load_hf_example_info
from kvrules.plugin.presets import BUILTIN_PRESETS
from kvrules.plugin.rules import Aligner, Check, applies
from kvrules.specs import KVCacheSpec, MambaSpec

NEMOTRON = "hf-nemotron-nano-9b-v2"


def build(name: str, strategies: Any = "vllm", plugin_manager: Any = None, **options: Any) -> Any:
    ex = load_hf_example_info(name, options)
    return build_hf_model(
        ex.config, ex.draft, ex.options, strategies=strategies, plugin_manager=plugin_manager
    )


@pytest.mark.kvrules_pm(autoload=False)
def test_hybrid_align_is_in_the_vllm_preset_and_default(kvrules_pm: KVRulesPluginManager) -> None:
    assert "hybrid-align" in BUILTIN_PRESETS["vllm"]
    pm = kvrules_pm
    rule = pm.registries.rules.rules["hybrid-align"]
    assert rule.kind == "align" and rule.stage == "align" and rule.default


@given(
    page=st.integers(1, 10**8),
    per_token=st.integers(1, 10**5),
    align=st.sampled_from([16, 32, 64, 128]),
)
def test_block_formula_covers_the_mamba_page(page: int, per_token: int, align: int) -> None:
    """The aligned page covers the Mamba page, is a multiple of the alignment, and is the smallest such."""
    block = hybrid_block_size(page, per_token, align)
    assert block % align == 0
    assert block * per_token >= page
    assert (block - align) * per_token < page


@given(page=st.integers(1, 10**8), per_token=st.integers(1, 10**5), chunk=st.sampled_from([64, 128, 256]))
def test_all_mode_block_is_a_multiple_of_the_chunk(page: int, per_token: int, chunk: int) -> None:
    block = hybrid_block_size(page, per_token, 16, mode="all", chunk=chunk)
    assert block % chunk == 0
    assert block * per_token >= page


def test_decisions_record_the_alignment() -> None:
    model = build(NEMOTRON, mamba_ssm_cache_dtype="bfloat16")
    align = [d for d in model.decisions if d.stage == "align"]
    model_level = [d for d in align if d.layer is None]
    assert [(d.rule, d.outcome) for d in model_level] == [("hybrid-align", "applied")]
    assert "16 x cdiv(2695168, 16 x 4096) = 672" in model_level[0].reason
    mamba = next(d for d in align if d.layer == "model.layers.0.mixer")
    assert mamba.before == {
        "spec_type": "mamba",
        "block_size": 16,
        "page_size_bytes": 2_695_168,
        "page_size_padded": None,
    }
    assert mamba.after == {
        "spec_type": "mamba",
        "block_size": 672,
        "page_size_bytes": 2_752_512,
        "page_size_padded": 2_752_512,
    }
    assert mamba.padding_bytes == 2_752_512 - 2_695_168


def test_non_hybrid_models_are_declined() -> None:
    model = build("hf-gemma-3-27b")
    [decision] = [d for d in model.decisions if d.stage == "align"]
    assert (decision.rule, decision.outcome) == ("hybrid-align", "declined")
    assert "no Mamba" in decision.reason


@pytest.mark.kvrules_pm(autoload=False, blocked=["align"])
def test_without_the_aligner_blocks_stay_as_configured(kvrules_pm: KVRulesPluginManager) -> None:
    # a strategy list that names no aligner keeps the preset's aligner
    model = build(NEMOTRON, strategies=["vllm", "mamba-pad"], mamba_ssm_cache_dtype="bfloat16")
    assert {s.block_size for s in model.specs.values()} == {672}
    # with the align plugin blocked, nothing aligns: the backend's 16-token blocks stay
    pm = kvrules_pm
    unaligned = build(NEMOTRON, strategies=None, plugin_manager=pm)
    assert {s.block_size for s in unaligned.specs.values()} == {16}
    assert any(d.stage == "align" and d.outcome == "declined" for d in unaligned.decisions)


def test_user_block_size_is_a_floor_and_sets_the_alignment() -> None:
    # alignment = max(16, 1024): one kernel-aligned step of 1024 tokens covers the Mamba page
    model = build(NEMOTRON, block_size=1024, mamba_ssm_cache_dtype="bfloat16")
    assert {s.block_size for s in model.specs.values()} == {1024}
    attn = model.specs["model.layers.14.mixer.attn"]
    assert model.specs["model.layers.0.mixer"].page_size_bytes == attn.page_size_bytes == 1024 * 4096


def test_mamba_cache_mode_none_keeps_max_model_len_blocks() -> None:
    model = build(NEMOTRON, mamba_cache_mode="none", mamba_ssm_cache_dtype="bfloat16")
    assert model.specs["model.layers.0.mixer"].block_size == 131072  # max_position_embeddings
    assert model.specs["model.layers.14.mixer.attn"].block_size == 672


def test_mamba_cache_mode_all_uses_the_chunk() -> None:
    model = build(NEMOTRON, mamba_cache_mode="all", mamba_block_size=256, mamba_ssm_cache_dtype="bfloat16")
    # lcm(256, 16) * cdiv(cdiv(2695168, 4096), 256) = 256 * cdiv(659, 256) = 768
    assert model.specs["model.layers.14.mixer.attn"].block_size == 768
    assert model.specs["model.layers.0.mixer"].block_size == 768
    # the file names no chunk size: NemotronHConfig's class default chunk_size 128 applies, as in
    # vLLM: lcm(128, 16) * cdiv(cdiv(5316608, 4096), 128) = 128 * 11 = 1408
    model = build(NEMOTRON, mamba_cache_mode="all")
    assert model.specs["model.layers.14.mixer.attn"].block_size == 1408
    assert model.specs["model.layers.0.mixer"].block_size == 1408


def test_draft_attention_follows_the_cache_block_size() -> None:
    model = build("hf-qwen3-coder-next")
    assert model.specs["draft.model.layers.0.self_attn.attn"].block_size == 1136
    assert model.specs["draft.model.layers.0.self_attn.attn"].page_size_bytes == 2 * 1_163_264


# -- the contract --------------------------------------------------------------------------------
@dataclass(frozen=True)
class FixedBlock(Aligner):
    """A toy aligner: every layer gets block size ``block``."""

    name: str = "test-fixed-block"
    priority: int = 1000
    block: int = 256
    default: bool = False

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: AlignContext) -> Check:
        return applies(f"every layer gets {self.block} tokens ({len(ctx.draft_layers)} draft layers).")

    def align(self, specs: Mapping[str, KVCacheSpec], ctx: AlignContext) -> dict[str, KVCacheSpec]:
        return {n: s.evolve(block_size=self.block) for n, s in specs.items()}


@dataclass(frozen=True)
class Faulty(FixedBlock):
    name: str = "test-faulty"
    touches: ClassVar[frozenset[str]] = frozenset({"page_size_padded"})


class _Plugin:
    def __init__(self, rule: Aligner) -> None:
        self.rule = rule
        self.name = f"test-{rule.name}"

    @kvrules.hookimpl
    def kvrules_register_rules(self, registry: Any) -> None:
        registry.add(self.rule)


@pytest.mark.kvrules_pm(autoload=False, plugins=[_Plugin(FixedBlock())])
def test_a_plugin_aligner_runs_first_and_the_rest_decline(kvrules_pm: KVRulesPluginManager) -> None:
    pm = kvrules_pm
    model = build(
        "hf-qwen3-coder-next", strategies=["vllm", "test-fixed-block", "hybrid-align"], plugin_manager=pm
    )
    assert {s.block_size for s in model.specs.values()} == {256}
    outcomes = [(d.rule, d.outcome) for d in model.decisions if d.stage == "align" and d.layer is None]
    assert outcomes == [("test-fixed-block", "applied"), ("hybrid-align", "declined")]


@pytest.mark.kvrules_pm(autoload=False, plugins=[_Plugin(Faulty())])
def test_an_aligner_touching_other_fields_is_a_faulty_plugin(kvrules_pm: KVRulesPluginManager) -> None:
    pm = kvrules_pm
    with pytest.raises(PluginError, match=r"test-faulty.*block_size"):
        build("hf-qwen3-coder-next", strategies=["test-faulty"], plugin_manager=pm)


def test_mamba_padding_only_in_vllm_order() -> None:
    """The Mamba page is padded by the aligner only when the attention page is larger (bf16: +1.49 %)."""
    model = build("hf-qwen3-coder-next", kv_cache_dtype="auto", num_speculative_tokens=0)
    mamba = model.specs["model.layers.0.linear_attn"]
    assert isinstance(mamba, MambaSpec)
    assert mamba.page_size_padded == 544 * 2048 == 1_114_112
    assert mamba.page_size_bytes - mamba.real_page_size_bytes == 16_384
    assert HFOptions().mamba_cache_mode == "align"
