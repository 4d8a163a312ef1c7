"""Every shared case with a vLLM 0.33.0 answer: the ``vllm-0.33`` preset must reproduce it field
by field (cases/README.md, "vLLM 0.33.0 answers"), the KV-cache layout the answer records taken
as ``EngineConfig.kv_cache_layout``."""

from __future__ import annotations

import importlib.util
import json
import math
import warnings
from pathlib import Path

import pytest
from case_loader import (
    CASES_DIR,
    backing_multiset,
    case_names,
    expected_layer_specs,
    kv_triple,
    load_case,
    spec_triple,
    tensor_multiset,
    tensors_as_028,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import kvrules
from kvrules import (
    EngineConfig,
    GroupingError,
    KVCacheSpec,
    KVRulesError,
    KVRulesPluginManager,
    MLAAttentionSpec,
    Planner,
    SlidingWindowMLASpec,
    UnificationError,
)
from kvrules.plan import plan_json_schema
from kvrules.plugin import Layout
from kvrules.plugin.presets import BUILTIN_PRESETS, PRESET_ALIASES

NAMES = case_names("vllm-0.33")
REPO = Path(__file__).resolve().parents[2]


def test_every_case_has_a_033_answer() -> None:
    assert len(NAMES) >= 19, f"expected the *.vllm-0.33.json answers in {CASES_DIR}"
    assert set(NAMES) == set(case_names())


@pytest.mark.parametrize("name", NAMES)
def test_plan_matches_vllm_033(name: str) -> None:
    case = load_case(name, "vllm-0.33")
    answer = case.answer
    planner = Planner("vllm-0.33")
    if "error" in answer:
        with pytest.raises(KVRulesError):
            planner.plan(case.workers, case.memory, case.config)
        return
    plan = planner.plan(case.workers, case.memory, case.config)
    expected_groups = sorted(sorted(g["layer_names"]) for g in answer["kv_cache_groups"])
    assert sorted(sorted(g.layer_names) for g in plan.groups) == expected_groups
    # group ids index block tables: vLLM's group order (and layer order inside a group) counts
    assert [list(g.layer_names) for g in plan.groups] == [g["layer_names"] for g in answer["kv_cache_groups"]]
    assert not any(g.is_eagle_group for g in plan.groups)
    for layer, triple in expected_layer_specs(answer).items():
        assert kv_triple(plan.specs[layer]) == triple, layer
    assert len(plan.workers) == len(answer["kv_cache_configs"])
    for worker, expected in zip(plan.workers, answer["kv_cache_configs"], strict=True):
        assert worker.num_blocks == expected["num_blocks"]
        assert backing_multiset(list(worker.backing)) == backing_multiset(expected["kv_cache_tensors"])
        assert len({t.size for t in worker.backing}) == 1, "one backing allocation per worker"
        assert tensor_multiset(list(worker.tensors)) == tensors_as_028(expected["tensors_as_028"])
        assert expected["kv_tp_replicas"] == 1
    assert math.isclose(plan.max_concurrency, answer["max_concurrency"], rel_tol=1e-9)
    assert plan.capacity_tokens == answer["kv_cache_capacity_tokens"]
    assert plan.max_model_len == answer["max_model_len_after"]
    assert plan.num_blocks == answer["scheduler_num_blocks"]
    assert plan.strategy_set == "vllm-0.33"


@pytest.mark.parametrize("name", NAMES)
def test_unify_matches_vllm_033(name: str) -> None:
    case = load_case(name, "vllm-0.33")
    unified = case.answer.get("unified_specs")
    if unified is None:
        pytest.skip("this case records no unify answer")
    planner = Planner("vllm-0.33")
    if "error" in unified:
        with pytest.raises(UnificationError):
            planner.unify(case.all_specs)
        return
    result = planner.unify(case.all_specs)
    for layer, spec in unified.items():
        assert kv_triple(result.specs[layer]) == spec_triple(spec), layer


def test_the_plans_round_trip_and_validate() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = plan_json_schema()
    for name in ("c5c_dsv4_like", "c2c_gemma_5to1_x2_pp2", "quantized/c10a_fp8_per_token_head_draft_bf16"):
        case = load_case(name, "vllm-0.33")
        plan = Planner("vllm-0.33").plan(case.workers, case.memory, case.config)
        data = plan.to_dict()
        assert data["workers"][0]["backing"]
        jsonschema.validate(data, schema)
        assert json.loads(plan.to_json()) == data
        assert kvrules.Plan.from_dict(data).to_dict() == data


def test_a_v1_document_with_a_backing_is_refused() -> None:
    case = load_case("c1_full_x4", "vllm-0.33")
    data = Planner("vllm-0.33").plan(case.workers, case.memory, case.config).to_dict()
    data["schema"] = "kvrules.plan/v1"
    del data["spec_sizes"]
    data["groups"] = [{k: v for k, v in g.items() if not k.endswith("_bytes")} for g in data["groups"]]
    data["decisions"] = [{k: v for k, v in d.items() if k != "details"} for d in data["decisions"]]
    with pytest.raises(kvrules.ModelFileError, match=r"workers\[0\]\.backing"):
        kvrules.Plan.from_dict(data)


# -- what the layout decides ----------------------------------------------------------------------
def test_layer_outermost_c5c_unifies_and_block_outermost_packs() -> None:
    """README: under a layer-outermost layout c5c unifies its pages to 16,384 blocks."""
    case = load_case("c5c_dsv4_like", "vllm-0.33")
    layer_outer = EngineConfig(**{**case.config.to_dict(), "kv_cache_layout": "LBNHC"})
    plan = Planner("vllm-0.33").plan(case.workers, case.memory, layer_outer)
    assert plan.route == "unified-page"
    assert plan.num_blocks == 16_384
    packed = Planner("vllm-0.33").plan(case.workers, case.memory, case.config)
    assert packed.route == "layout-packing"


def test_the_default_layout_is_lbnhc() -> None:
    config = EngineConfig(max_model_len=16)
    assert (config.kv_cache_layout, config.resolved_kv_cache_layout, config.block_outermost) == (
        None,
        "LBNHC",
        False,
    )


@pytest.mark.parametrize("value", ["lbnhc", "BLH", 3, ""])
def test_an_unknown_layout_is_refused_naming_the_field(value: object) -> None:
    with pytest.raises(kvrules.ConfigError, match=r"EngineConfig\.kv_cache_layout=.*LBNHC"):
        EngineConfig(max_model_len=16, kv_cache_layout=value)  # type: ignore[arg-type]


def _swa(head: int, window: int = 128) -> SlidingWindowMLASpec:
    return SlidingWindowMLASpec(
        block_size=64, num_kv_heads=1, head_size=head, dtype="bfloat16", sliding_window=window
    )


def _mla(head: int) -> MLAAttentionSpec:
    return MLAAttentionSpec(block_size=64, num_kv_heads=1, head_size=head, dtype="bfloat16")


def _packed_groups(specs: dict[str, KVCacheSpec]) -> list[list[str]]:
    config = EngineConfig(max_model_len=4096, kv_cache_layout="BLNHC")
    plan = Planner("vllm-0.33").plan([specs], [1 << 30], config)
    assert plan.route == "layout-packing"
    return [list(g.layer_names) for g in plan.groups]


def test_packed_groups_follow_the_first_layer_of_each_bucket() -> None:
    """vLLM 0.33.0's _get_packed_kv_cache_groups on this shape (run in venv-0.33): buckets in
    layer order, the 1:1 MLA pattern whole, the sliding-window buckets split to match it."""
    specs: dict[str, KVCacheSpec] = {}
    for i in range(6):
        specs[f"l{i}.swa"] = _swa(512)
        if i % 2:
            specs |= {f"l{i}.attn": _mla(576), f"l{i}.idx": _mla(128)}
        specs[f"l{i}.st"] = _swa(64, window=8)
    assert _packed_groups(specs) == [
        ["l0.swa", "l2.swa", "l4.swa"],
        ["l1.swa", "l3.swa", "l5.swa"],
        ["l0.st", "l2.st", "l4.st"],
        ["l1.st", "l3.st", "l5.st"],
        ["l1.attn", "l1.idx", "l3.attn", "l3.idx", "l5.attn", "l5.idx"],
    ]


def test_packed_state_buckets_are_capped_at_what_a_block_holds() -> None:
    """No mixed-page pattern: a sliding-window bucket whose page exceeds the block's other needs
    goes one state per group (vLLM 0.33.0's answer on this shape)."""
    specs: dict[str, KVCacheSpec] = {}
    for i in range(6):
        specs |= {f"l{i}.swa": _swa(2048), f"l{i}.attn": _mla(64), f"l{i}.state": _swa(64, window=8)}
    assert _packed_groups(specs) == [
        *[[f"l{i}.swa"] for i in range(6)],
        [f"l{i}.attn" for i in range(6)],
        [f"l{i}.state" for i in range(6)],
    ]


def test_an_unbalanced_bucket_that_must_split_is_refused_naming_it() -> None:
    from plugins.routers import PackBucket

    bucket = PackBucket.of({"a": _swa(512), "b": _swa(64), "c": _swa(64)})
    assert bucket.groups(1)[0].layer_names == ("a", "b", "c")
    with pytest.raises(GroupingError, match=r"layout-packing: the bucket of 'a'.*\{\d+: 1, \d+: 2\}"):
        bucket.groups(2)


def test_the_null_block_is_reserved_only_in_the_memory_check() -> None:
    case = load_case("c8_gemma_autofit", "vllm-0.33")
    plan = Planner("vllm-0.33").plan(case.workers, case.memory, case.config)
    assert plan.max_model_len == 17_312
    assert any(d.rule == "null-block" for d in plan.decisions)
    assert plan.workers[0].allocated_bytes == case.memory[0]
    off = EngineConfig(**{**case.config.to_dict(), "reserve_null_block": False})
    assert Planner("vllm-0.33").plan(case.workers, case.memory, off).max_model_len == 17_328
    on = EngineConfig(**{**case.config.to_dict(), "reserve_null_block": True})
    assert Planner("vllm-0.28").plan(case.workers, case.memory, on).max_model_len == 17_312


def test_non_mla_pages_are_padded_unconditionally() -> None:
    case = load_case("c4_nondivisible_without_block_stride", "vllm-0.33")
    with pytest.raises(KVRulesError):
        Planner("vllm-0.28").plan(case.workers, case.memory, case.config)
    plan = Planner("vllm-0.33").plan(case.workers, case.memory, case.config)
    assert {kv_triple(s)[2] for s in plan.specs.values()} == {32_768, None}


# -- the presets and the alias -------------------------------------------------------------------
def test_vllm_is_an_alias_of_vllm_028() -> None:
    assert PRESET_ALIASES["vllm"] == "vllm-0.28"
    assert BUILTIN_PRESETS["vllm"] == BUILTIN_PRESETS["vllm-0.28"]
    case = load_case("c2_gemma_5to1_x2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        by_alias = Planner("vllm").plan(case.workers, case.memory, case.config)
    plan = Planner("vllm-0.28").plan(case.workers, case.memory, case.config)
    assert by_alias.strategy_set == plan.strategy_set == "vllm-0.28"
    assert by_alias.to_dict() == plan.to_dict()
    assert Planner(["vllm", "vllm-group-size"]).strategies.name == "vllm-0.28+vllm-group-size"
    note = Planner("vllm").strategies.alias_note
    assert note is not None and "'vllm' is an alias of 'vllm-0.28'" in note and "deprecated" in note
    assert Planner("vllm-0.28").strategies.alias_note is None


def test_plan_shorthand_accepts_both_lines() -> None:
    case = load_case("c1_full_x4", "vllm-0.33")
    for name in ("vllm", "vllm-0.28", "vllm-0.33"):
        plan = kvrules.plan(case.workers[0], case.memory[0], case.config, strategies=name)
        assert plan.num_blocks == case.answer["scheduler_num_blocks"]


def test_the_033_rules_stay_out_of_the_default_set() -> None:
    names = set(Planner().strategies.names())
    assert not names & {"attention-pad", "layout-packing", "backing-layer-outer", "backing-block-outer"}


@pytest.mark.parametrize(
    "rule", ["attention-pad", "layout-packing", "backing-layer-outer", "backing-block-outer"]
)
def test_the_033_rules_pass_the_conformance_kit(rule: str, kvrules_pm: KVRulesPluginManager) -> None:
    from kvrules.testing.checks import check_rule

    registry = kvrules_pm.registries.rules
    report = check_rule(registry.rules[rule])
    assert report.rule == rule


def test_a_layer_outermost_layout_refuses_mixed_pages_in_several_groups(
    kvrules_pm: KVRulesPluginManager,
) -> None:
    """vLLM 0.33's validate_kv_cache_layout: c10e under LBNHC does not plan (its MLA pages
    cannot be padded either), and the layout says why when asked directly."""
    case = load_case("quantized/c10e_dsv4_like_fp8_ds_mla", "vllm-0.33")
    layer_outer = EngineConfig(**{**case.config.to_dict(), "kv_cache_layout": "LBNHC"})
    with pytest.raises(KVRulesError):
        Planner("vllm-0.33").plan(case.workers, case.memory, layer_outer)
    packed = Planner("vllm-0.33").plan(case.workers, case.memory, case.config)
    layout = kvrules_pm.registries.rules.rules["backing-layer-outer"]
    assert isinstance(layout, Layout)
    ctx, _ = Planner("vllm-0.33").context(layer_outer)
    check = layout.check(packed.groups, ctx)
    assert not check.applies and "validate_kv_cache_layout" in check.reason


@pytest.mark.parametrize("value", [0, 1, "true", 1.0])
def test_reserve_null_block_is_a_bool_or_null(value: object) -> None:
    with pytest.raises(kvrules.ConfigError, match=r"EngineConfig\.reserve_null_block=.*true or false"):
        EngineConfig(max_model_len=16, reserve_null_block=value)  # type: ignore[arg-type]


def test_the_new_settings_come_from_an_engine_section() -> None:
    config = EngineConfig.from_dict(
        {"max_model_len": 16, "kv_cache_layout": "BLNHC", "reserve_null_block": True}
    )
    assert (config.kv_cache_layout, config.block_outermost, config.reserve_null_block) == (
        "BLNHC",
        True,
        True,
    )
    assert EngineConfig.from_dict(config.to_dict()) == config
    assert config.layout_for([]) == ("BLNHC", "EngineConfig.kv_cache_layout")


def test_a_document_written_with_the_alias_reads_back_with_the_preset_name() -> None:
    case = load_case("c1_full_x4")
    data = Planner("vllm").plan(case.workers, case.memory, case.config).to_dict()
    assert data["strategy_set"] == "vllm-0.28"
    data["strategy_set"] = "vllm+min-padding"  # as kvrules 0.1 wrote it
    assert kvrules.Plan.from_dict(data).strategy_set == "vllm-0.28+min-padding"


# -- the configs-only Hugging Face cache scripts/vllm-parity lays out for vLLM's tests ------------
def test_the_hf_cache_files_lay_out_as_an_offline_hub_cache(tmp_path: Path) -> None:
    loader = importlib.util.spec_from_file_location("vllm_parity", REPO / "scripts" / "vllm_parity.py")
    assert loader is not None and loader.loader is not None
    parity = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(parity)
    source = REPO / "tests" / "data" / "hf-cache"
    repos = parity.write_hf_cache(tmp_path, source)
    assert sorted(repos) == ["Qwen/Qwen1.5-7B", "Qwen/Qwen3-0.6B", "facebook/opt-125m"]
    for repo in repos:
        config = json.loads((source / repo / "config.json").read_text())
        assert config["architectures"] and config["model_type"] and config["num_hidden_layers"] > 0, repo
        base = tmp_path / "hub" / ("models--" + repo.replace("/", "--"))
        revision = (base / "refs" / "main").read_text()
        laid = base / "snapshots" / revision / "config.json"
        assert laid.read_bytes() == (source / repo / "config.json").read_bytes()
    (tmp_path / "bad" / "a" / "b").mkdir(parents=True)
    (tmp_path / "bad" / "a" / "b" / "config.json").write_text("{}")
    with pytest.raises(SystemExit, match=r"a/b/config.json is not a model config"):
        parity.write_hf_cache(tmp_path / "home", tmp_path / "bad")


def _buckets_by_asking(specs: dict[str, kvrules.KVCacheSpec]) -> list[dict[str, kvrules.KVCacheSpec]]:
    """vLLM 0.33's greedy bucketing, asked literally: each layer tries every bucket in order."""
    buckets: list[dict[str, kvrules.KVCacheSpec]] = []
    for name, spec in specs.items():
        home = next(
            (b for b in buckets if kvrules.UniformTypeKVCacheSpecs.is_uniform_type({**b, name: spec})), None
        )
        if home is None:
            buckets.append({name: spec})
        else:
            home[name] = spec
    return buckets


_BUCKET_SPECS = [
    kvrules.MLAAttentionSpec(64, num_kv_heads=1, head_size=576, dtype="bfloat16"),
    kvrules.MLAAttentionSpec(128, num_kv_heads=1, head_size=576, dtype="bfloat16"),
    kvrules.SlidingWindowMLASpec(64, num_kv_heads=1, head_size=512, dtype="bfloat16", sliding_window=128),
    kvrules.FullAttentionSpec(64, num_kv_heads=2, head_size=64, dtype="bfloat16"),
    kvrules.MambaSpec(64, [[3, 768]], ["bfloat16"]),
]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(range(len(_BUCKET_SPECS))), min_size=1, max_size=30))
def test_greedy_buckets_are_vllm_s_bucketing(kinds: list[int]) -> None:
    from kvrules_plugins.routers import greedy_buckets

    specs = {f"l.{i}": _BUCKET_SPECS[k] for i, k in enumerate(kinds)}
    assert greedy_buckets(specs) == _buckets_by_asking(specs)
