"""The generic architecture, the named ones that map onto it, no silent drop, and the TP rule.

Configs are written inline (the fields that matter, with the published values of the model the
test names); expected numbers are derived in the comments, not taken from kvrules' formulas.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_cli

import kvrules
from kvrules import KVCacheSpec, KVRulesPluginManager, ModelFileError
from kvrules.hf import HFConfig, HFOptions, build_hf_model, layers
from kvrules.hf.examples import load_hf_example_info
from kvrules.hf.select import CACHE_KEYS, reads, tracked
from kvrules.plugin import Architecture

MISTRAL_7B_V01 = {
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 32768,
    "sliding_window": 4096,
    "torch_dtype": "bfloat16",
}

#: a decoder no named architecture claims (standard fields only)
UNKNOWN = {
    "model_type": "my_decoder",
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "hidden_size": 2048,
    "head_dim": 128,
    "max_position_embeddings": 8192,
}

GLM_45_AIR = {
    "architectures": ["Glm4MoeForCausalLM"],
    "model_type": "glm4_moe",
    "hidden_size": 4096,
    "head_dim": 128,
    "num_hidden_layers": 46,
    "num_attention_heads": 96,
    "num_key_value_heads": 8,
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 131072,
    "partial_rotary_factor": 0.5,
    "torch_dtype": "bfloat16",
}

DEEPSEEK_V32 = {
    "architectures": ["DeepseekV32ForCausalLM"],
    "model_type": "deepseek_v32",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "q_lora_rank": 1536,
    "index_head_dim": 128,
    "index_n_heads": 64,
    "index_topk": 2048,
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 163840,
    "torch_dtype": "bfloat16",
}


def build(config: dict[str, Any], draft: Any = None, **options: Any) -> kvrules.hf.HFModel:
    return build_hf_model(config, draft, HFOptions(**options), strategies="vllm")


def counts(specs: dict[str, KVCacheSpec]) -> dict[str, int]:
    return dict(Counter(s.type_name for s in specs.values()))


def applied_arch(model: kvrules.hf.HFModel) -> kvrules.Decision:
    return next(d for d in model.decisions if d.stage == "arch" and d.outcome == "applied")


# -- the generic architecture ------------------------------------------------------------------


def test_an_unclaimed_decoder_is_planned_by_the_generic_architecture() -> None:
    model = build(UNKNOWN)
    assert model.target.architecture == "generic"
    assert counts(model.specs) == {"full_attention": 8}
    page = model.specs["model.layers.0.self_attn.attn"].page_size_bytes
    assert page == 16 * 4 * 128 * 2 * 2  # block x kv heads x head x (K, V) x bf16
    decision = applied_arch(model)
    assert decision.details is not None and decision.details["generic"] is True
    assert "no named architecture claims model_type 'my_decoder'" in decision.reason
    assert "every layer is full attention" in decision.reason  # what it assumed
    assert "head size 128 from head_dim" in decision.details["assumptions"]


def test_mistral_7b_v01_slides_every_layer() -> None:
    model = build(MISTRAL_7B_V01)
    assert counts(model.specs) == {"sliding_window": 32}
    spec = model.specs["model.layers.31.self_attn.attn"]
    assert spec.sliding_window == 4096  # type: ignore[attr-defined]
    assert spec.page_size_bytes == 16 * 8 * 128 * 2 * 2
    assert "every layer slides" in applied_arch(model).reason


def _concurrency(tmp_path: Path, capsys: pytest.CaptureFixture[str], config: dict[str, Any]) -> float:
    path = tmp_path / f"{len(config)}.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    code, out, err = run_cli(capsys, "plan", "--hf-config", str(path), "--memory", "16GiB", "--json")
    assert code == 0, err
    return float(json.loads(out)["max_concurrency"])


def test_mistral_7b_v01_window_multiplies_concurrency(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    windowed = _concurrency(tmp_path, capsys, MISTRAL_7B_V01)
    full = _concurrency(
        tmp_path, capsys, {**MISTRAL_7B_V01, "sliding_window": None}
    )  # absent: 4096 by default
    # the same page, so the same blocks: a request needs 32768 / 16 = 2048 blocks with full attention,
    # cdiv(4096 - 1 + 2048 batched tokens, 16) + 1 = 385 with the window (the issue: 106.39 vs 20.00)
    assert windowed / full == pytest.approx(2048 / 385, rel=1e-3)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"layer_types": ["sliding_attention", "full_attention"] * 4, "sliding_window": 512}, {"sliding_window": 4, "full_attention": 4}),
        ({"layer_types": ["chunked_attention"] * 6 + ["full_attention"] * 2, "attention_chunk_size": 1024}, {"chunked_local": 6, "full_attention": 2}),
        ({"sliding_window_pattern": 4, "sliding_window": 4096}, {"sliding_window": 6, "full_attention": 2}),
        ({"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 5}, {"full_attention": 5, "sliding_window": 3}),
        ({"use_sliding_window": False, "sliding_window": 4096}, {"full_attention": 8}),
    ],
)  # fmt: skip
def test_layer_kinds_from_standard_fields(fields: dict[str, Any], expected: dict[str, int]) -> None:
    assert counts(build({**UNKNOWN, **fields}).specs) == expected


@pytest.mark.parametrize(
    "config",
    [
        MISTRAL_7B_V01,
        {**UNKNOWN, "model_type": "qwen2", "use_sliding_window": False, "sliding_window": 4096},
        {**UNKNOWN, "model_type": "qwen2", "use_sliding_window": True, "sliding_window": 64, "max_window_layers": 3},
        {**UNKNOWN, "model_type": "cohere2", "sliding_window_pattern": 4, "sliding_window": 4096},
    ],
    ids=["mistral", "qwen2-off", "qwen2-on", "cohere2"],
)  # fmt: skip
def test_both_readers_build_the_same_layers(config: dict[str, Any]) -> None:
    def kinds(reader: str) -> list[tuple[str, int | None]]:
        specs = build_hf_model(HFConfig(dict(config), "<test>", reader=reader), None, HFOptions()).specs
        return [(s.type_name, getattr(s, "sliding_window", None)) for s in specs.values()]

    assert kinds("builtin") == kinds("auto")


def test_sliding_window_pattern_keeps_every_fourth_layer_global() -> None:
    specs = build(
        {**UNKNOWN, "model_type": "cohere2", "sliding_window_pattern": 4, "sliding_window": 4096}
    ).specs
    kinds = [s.type_name for s in specs.values()]
    assert kinds == ["sliding_window"] * 3 + ["full_attention"] + ["sliding_window"] * 3 + ["full_attention"]


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"attention_chunk_size": 8192}, "'attention_chunk_size'"),
        ({"layer_types": ["sliding_attention"] * 8}, "'sliding_window'"),
        ({"layer_types": ["linear_attention"] * 8}, "'layer_types' entry 0 is 'linear_attention'"),
        ({"layer_types": ["sliding_attention"] * 8, "sliding_window": 64, "use_sliding_window": False}, "'use_sliding_window'"),
        ({"kv_lora_rank": 512}, "'qk_rope_head_dim'"),
    ],
)  # fmt: skip
def test_ambiguous_or_missing_fields_are_refused_by_name(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(ModelFileError, match=named):
        build({**UNKNOWN, **fields})


def test_generic_mla() -> None:
    model = build({**UNKNOWN, "kv_lora_rank": 512, "qk_rope_head_dim": 64})
    assert counts(model.specs) == {"mla": 8}
    spec = model.specs["model.layers.0.self_attn.attn"]
    assert spec.block_size == 64  # the FlashMLA backend's kernel block
    assert spec.page_size_bytes == 64 * 576 * 2  # one latent of 512 + 64 per token, bf16
    assert "latent 576" in applied_arch(model).reason


def test_generic_does_not_claim_what_is_no_attention_decoder() -> None:
    with pytest.raises(ModelFileError, match="no registered architecture recognises"):
        build({"model_type": "my_ssm", "num_hidden_layers": 4, "state_size": 16})


def test_the_cli_says_the_generic_architecture_was_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(UNKNOWN), encoding="utf-8")
    code, out, err = run_cli(capsys, "specs", "--hf-config", str(path))
    assert code == 0, err
    assert "(generic, 8 layers)" in out
    code, out, err = run_cli(capsys, "plan", "--hf-config", str(path), "--memory", "8GiB", "--json")
    assert code == 0, err
    [arch] = [d for d in json.loads(out)["decisions"] if d["stage"] == "arch" and d["outcome"] == "applied"]
    assert arch["rule"] == "generic" and arch["details"]["generic"] is True
    assert arch["details"]["assumptions"][0] == "no window field: every layer is full attention"


# -- named architectures ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_type", "arch"),
    [
        ("phi3", "phi3"), ("olmo2", "olmo2"), ("cohere", "cohere"),
        ("granite", "granite"), ("internlm3", "internlm3"), ("ernie4_5", "ernie4-5"),
        ("ernie4_5_moe", "ernie4-5"), ("hunyuan_v1_moe", "hunyuan"), ("glm4_moe", "glm4-moe"),
        ("minimax_m2", "minimax-m2"), ("qwen2_5_vl", "qwen2-vl"),
    ],
)  # fmt: skip
def test_named_model_types(model_type: str, arch: str) -> None:
    model = build({**UNKNOWN, "model_type": model_type})
    assert model.target.architecture == arch
    assert counts(model.specs) == {"full_attention": 8}
    details = applied_arch(model).details
    assert details is not None and (details["architecture"], details["generic"]) == (arch, False)
    assert details["assumptions"][-1] == "head size 128 from head_dim"


def test_qwen2_5_vl_text_layers_sit_under_the_language_model() -> None:
    specs = build({**UNKNOWN, "model_type": "qwen2_5_vl"}).specs
    assert next(iter(specs)) == "language_model.model.layers.0.self_attn.attn"


def test_minimax_m2_refuses_linear_attention_layers() -> None:
    config = {**UNKNOWN, "model_type": "minimax_m2", "attn_type_list": [1] * 7 + [0]}
    with pytest.raises(ModelFileError, match="'attn_type_list' entry 7 is 0"):
        build(config)
    assert counts(build({**config, "attn_type_list": [1] * 8}).specs) == {"full_attention": 8}


def test_glm_4_5_air_mtp_names_the_key_it_came_from() -> None:
    model = build(GLM_45_AIR, "mtp")
    assert counts(model.specs) == {"full_attention": 47}
    assert "draft.model.layers.46.self_attn.attn" in model.specs
    mtp = next(d for d in model.decisions if d.stage == "arch" and "multi-token-prediction" in d.reason)
    assert "(num_nextn_predict_layers = 1 (from the file))" in mtp.reason
    assert mtp.details == {"mtp_layers": 1, "source": "num_nextn_predict_layers"}


def test_mtp_count_under_another_key_or_a_default() -> None:
    model = build({**UNKNOWN, "mtp_num_hidden_layers": 2}, "mtp")
    mtp = next(d for d in model.decisions if d.details and "mtp_layers" in d.details)
    assert mtp.details == {"mtp_layers": 2, "source": "mtp_num_hidden_layers"}
    assert "mtp_num_hidden_layers = 2" in mtp.reason
    model = build_hf_model(load_hf_example_info("hf-qwen3-coder-next").config, "mtp", HFOptions())
    mtp = next(d for d in model.decisions if d.details and "mtp_layers" in d.details)
    assert mtp.details == {"mtp_layers": 1, "source": "default"}
    assert "the qwen3-next default" in mtp.reason
    with pytest.raises(ModelFileError, match="'num_mtp_modules'"):  # a count it cannot read is named
        build({**UNKNOWN, "model_type": "minimax_m2", "num_mtp_modules": 3}, "mtp")


def test_deepseek_v32_has_an_indexer_cache_per_layer() -> None:
    model = build(DEEPSEEK_V32, kv_cache_dtype="fp8_ds_mla")
    assert counts(model.specs) == {"mla": 122}
    latent = model.specs["model.layers.0.self_attn.attn"]
    indexer = model.specs["model.layers.0.self_attn.indexer.k_cache"]
    assert latent.page_size_bytes == 64 * 656  # fp8_ds_mla: 512 fp8 + 4 x fp32 scales + 64 bf16 RoPE
    assert indexer.page_size_bytes == 64 * (128 + 128 // 128 * 4)  # fp8 keys + one fp32 scale per 128
    assert indexer.dtype == "uint8"  # type: ignore[attr-defined]
    mtp = build(DEEPSEEK_V32, "mtp").specs
    assert {"draft.model.layers.61.self_attn.attn", "draft.model.layers.61.self_attn.indexer.k_cache"} <= set(
        mtp
    )


def test_deepseek_v32_layer_types_say_which_layers_are_indexed() -> None:
    config = {
        **DEEPSEEK_V32,
        "num_hidden_layers": 4,
        "layer_types": ["indexed_attention", "full_attention"] * 2,
    }
    specs = build(config).specs
    assert [n for n in specs if "indexer" in n] == [
        "model.layers.0.self_attn.indexer.k_cache",
        "model.layers.2.self_attn.indexer.k_cache",
    ]
    with pytest.raises(ModelFileError, match="'layer_types' entry 1 is 'sliding_attention'"):
        build({**config, "layer_types": ["indexed_attention", "sliding_attention"] * 2})


def test_a_window_no_layer_type_uses_is_said_to_be_unused() -> None:
    model = build({**UNKNOWN, "layer_types": ["full_attention"] * 8, "sliding_window": 4096})
    assert counts(model.specs) == {"full_attention": 8}
    assert "sliding_window 4096 unused: no layer_types entry needs it" in applied_arch(model).reason


def test_llama4_empty_no_rope_layers_is_the_default_pattern() -> None:
    config = {**UNKNOWN, "model_type": "llama4_text", "attention_chunk_size": 8192, "no_rope_layers": []}
    specs = build(config).specs
    kinds = [s.type_name for s in specs.values()]
    assert kinds == (["chunked_local"] * 3 + ["full_attention"]) * 2


# -- no silent drop -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({**DEEPSEEK_V32, "model_type": "deepseek_v3", "sliding_window": 4096}, "'sliding_window'"),
        ({**UNKNOWN, "model_type": "hunyuan_v1_moe", "use_cla": True}, "'use_cla'"),
        ({**UNKNOWN, "model_type": "jamba", "sliding_window": 2048}, "'sliding_window'"),
        ({**UNKNOWN, "num_kv_shared_layers": 4}, "'num_kv_shared_layers'"),
    ],
)  # fmt: skip
def test_a_cache_field_the_architecture_ignores_fails_the_build(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ModelFileError, match=f"{field} .*change the KV cache, but architecture"):
        build(config)


def test_off_values_are_no_fields() -> None:
    assert build({**UNKNOWN, "model_type": "hunyuan_v1_moe", "use_cla": False, "sliding_window": None}).specs


@dataclass(frozen=True)
class _WindowBlind(Architecture):
    """A plugin that plans full attention and never looks at the window."""

    name: str = "window-blind"
    model_types: tuple[str, ...] = ("my_decoder",)
    priority: int = 10

    def build(self, config: HFConfig, settings: kvrules.hf.BuildSettings) -> dict[str, KVCacheSpec]:
        spec = layers.full_attention(
            settings, layers.kv_heads_per_rank(config, settings.tp), layers.head_size(config)
        )
        return {f"model.layers.{i}.self_attn.attn": spec for i in range(config.integer("num_hidden_layers"))}


class _BlindPlugin:
    name = "window-blind"

    @staticmethod
    @kvrules.hookimpl
    def kvrules_register_architectures(registry: Any) -> None:
        registry.add(_WindowBlind())


@pytest.mark.kvrules_pm(autoload=False, plugins=[_BlindPlugin()])
def test_a_plugin_that_drops_a_window_is_refused(kvrules_pm: KVRulesPluginManager) -> None:
    pm = kvrules_pm
    assert build_hf_model(UNKNOWN, None, HFOptions(), plugin_manager=pm).target.architecture == "window-blind"
    with pytest.raises(ModelFileError, match=r"'sliding_window' .*'window-blind' does not use"):
        build_hf_model({**UNKNOWN, "sliding_window": 1024}, None, HFOptions(), plugin_manager=pm)
    with pytest.raises(ModelFileError, match=r"draft field.*'sliding_window'"):
        build_hf_model(UNKNOWN, {**UNKNOWN, "sliding_window": 1024}, HFOptions(), plugin_manager=pm)


def test_tracking_leaves_the_config_alone() -> None:
    config = HFConfig(dict(UNKNOWN), "<test>")
    copy = tracked(config)
    copy.integer("num_hidden_layers")
    copy.has("sliding_window")
    assert reads(copy) == {"num_hidden_layers", "sliding_window"}
    assert reads(config) == set() and type(config) is HFConfig
    assert reads(tracked(copy)) == set()  # a tracked copy of a tracked copy starts afresh
    assert {"sliding_window", "kv_lora_rank", "ssm_state_size"} <= set(CACHE_KEYS)


# -- the TP rule --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("heads", "kv", "tp", "per_rank"),
    [(16, 4, 2, 2), (16, 4, 4, 1), (16, 4, 8, 1), (16, 4, 16, 1), (16, 16, 8, 2), (24, 3, 6, 1)],
)
def test_tp_splits_or_replicates_kv_heads(heads: int, kv: int, tp: int, per_rank: int) -> None:
    config = {**UNKNOWN, "num_attention_heads": heads, "num_key_value_heads": kv}
    spec = build(config, tensor_parallel_size=tp).specs["model.layers.0.self_attn.attn"]
    assert spec.num_kv_heads == per_rank  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("heads", "kv", "tp", "named"),
    [
        (28, 4, 8, "'num_attention_heads' = 28 cannot be split over tensor_parallel_size 8"),
        (12, 6, 4, "'num_key_value_heads' = 6 cannot be split over tensor_parallel_size 4"),
        (24, 3, 8, "'num_key_value_heads' = 3 cannot be replicated over tensor_parallel_size 8"),
        (24, 3, 2, "'num_key_value_heads' = 3 cannot be split over tensor_parallel_size 2"),
    ],
)
def test_tp_rule_errors_name_the_field(heads: int, kv: int, tp: int, named: str) -> None:
    config = {**UNKNOWN, "num_attention_heads": heads, "num_key_value_heads": kv}
    with pytest.raises(ModelFileError, match=named):
        build(config, tensor_parallel_size=tp)


# -- docs/hf.md ---------------------------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs" / "hf.md"


def test_the_generic_example_in_the_docs_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = DOCS.read_text(encoding="utf-8")
    match = re.search(r"<!-- docs-test: generic -->\s*```python\n(.*?)```", text, re.S)
    assert match, f"no code block marked 'generic' in {DOCS}"
    exec(compile(match.group(1), f"{DOCS}:generic", "exec"), {})
    assert "every layer slides" in capsys.readouterr().out


@pytest.mark.kvrules_pm(autoload=False)
def test_the_docs_list_every_built_in_architecture(kvrules_pm: KVRulesPluginManager) -> None:
    text = DOCS.read_text(encoding="utf-8")
    for arch in kvrules_pm.registries.architectures.ordered():
        assert f"`{arch.name}`" in text, arch.name
