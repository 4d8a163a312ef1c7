"""The "beyond vLLM" grouping rules: the public cases, the cost model, and never losing to vLLM."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from fractions import Fraction
from types import MappingProxyType
from typing import Any

import pytest
from case_loader import load_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvrules import (
    EngineConfig,
    FullAttentionSpec,
    KVCacheGroup,
    KVCacheSpec,
    KVRulesPluginManager,
    MambaSpec,
    Plan,
    Planner,
    PluginError,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
    get_plugin_manager,
    hookimpl,
)
from kvrules.errors import CapacityError
from kvrules.examples import load_example
from kvrules.grouping import (
    Candidate,
    GroupingCost,
    Pool,
    acceptable,
    bucket_lengths,
    buckets_by_spec,
    buckets_where,
    grouping_cost,
    search,
    split_buckets,
    split_cost,
    vllm_grouping,
    vllm_grouping_cost,
)
from kvrules.pipeline.capacity import total_blocks_per_request
from kvrules.plugin.presets import BUILTIN_PRESETS
from kvrules.plugin.registry import RuleRegistry
from kvrules.testing.checks import check_rule
from kvrules_plugins.beyond_vllm import MinPadding, SpeculatorGroup
from kvrules_plugins.draft_align import DraftAwareAlign

VLLM = Planner("vllm")
DEFAULT = Planner()
GiB = 1 << 30


def plan_example(planner: Planner, name: str) -> Plan:
    model = load_example(name)
    return planner.plan(model.worker_specs(), model.available_memory or [GiB], EngineConfig(**model.engine))


def group_decision(plan: Plan, rule: str) -> Any:
    found = [d for d in plan.decisions if d.rule == rule and d.outcome == "applied" and d.details is not None]
    assert len(found) == 1, [d.reason for d in plan.decisions if d.rule == rule]
    return found[0]


def group_sizes(plan: Plan) -> list[int]:
    return [len(g.layer_names) for g in plan.groups]


def is_draft(name: str) -> bool:
    return name.startswith("draft.")


# -- registration -----------------------------------------------------------------------------
def test_rules_are_default_but_not_in_the_vllm_preset() -> None:
    rules = VLLM.registries.rules.rules
    assert rules["min-padding"].kind == "grouper" and rules["min-padding"].default
    assert rules["speculator-group"].kind == "partition" and rules["speculator-group"].default
    assert "min-padding" not in BUILTIN_PRESETS["vllm"] and "speculator-group" not in BUILTIN_PRESETS["vllm"]
    assert "min-padding" not in VLLM.strategies.names()
    groupers = [r.name for r in DEFAULT.strategies.rules("grouper")]
    assert groupers.index("min-padding") < groupers.index("vllm-group-size")
    assert [r.name for r in DEFAULT.strategies.rules("partition")] == ["speculator-group"]


@pytest.mark.parametrize("rule", [MinPadding(), SpeculatorGroup(), DraftAwareAlign()], ids=lambda r: r.name)
@pytest.mark.kvrules_pm(autoload=False)
def test_rules_keep_the_rule_contract(rule: Any, kvrules_pm: KVRulesPluginManager) -> None:
    # aligners run when specs are built from a config, not while planning: static checks only
    asked = rule.kind != "align"
    check_rule(rule, plugin_manager=kvrules_pm, require_asked=asked)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: MinPadding(max_groups=0), "max_groups=0"),
        (lambda: SpeculatorGroup(max_groups=True), "max_groups=True"),
        (lambda: SpeculatorGroup(max_capacity_loss=1.0), "max_capacity_loss=1.0"),
        (lambda: SpeculatorGroup(max_capacity_loss=-0.1), "max_capacity_loss=-0.1"),
    ],
)
def test_invalid_limits_are_plugin_errors_naming_the_field(make: Any, match: str) -> None:
    with pytest.raises(PluginError, match=match):
        make()


# -- the public cases ----------------------------------------------------------------------------
def test_gpt_oss_120b_eagle3_vllm_is_already_optimal_and_default_keeps_it() -> None:
    """#29303: 18 sliding + 18 full + 1 EAGLE layer. The old min rule gave 17 padding slots (89.47%)."""
    vllm = plan_example(VLLM, "gpt-oss-120b-eagle3")
    assert group_sizes(vllm) == [18, 19]  # group size 19: the sliding group has one padding slot
    assert vllm.waste is not None and vllm.waste.padding_slots == 1  # "1 layer, 5.56%" = 1/18
    model = load_example("gpt-oss-120b-eagle3")
    old = split_buckets(buckets_by_spec(model.specs), 18)  # the pre-#29303 rule: the smallest bucket
    old_cost = grouping_cost(old, EngineConfig(**model.engine))
    assert old_cost.padding_slots == 17 and round(17 / 19 * 100, 2) == 89.47
    default = plan_example(DEFAULT, "gpt-oss-120b-eagle3")
    assert default.groups == vllm.groups and default.max_concurrency == vllm.max_concurrency
    decision = group_decision(default, "min-padding")
    chosen = decision.details["chosen"]
    assert all(a["padded_bytes"] > chosen["padded_bytes"] for a in decision.details["alternatives"])
    assert old_cost.request_bytes > chosen["request_bytes"]
    declined = [d for d in default.decisions if d.rule == "speculator-group" and d.outcome == "declined"]
    assert declined and "not better than vLLM's" in declined[0].reason


def test_swa30_full20_min_padding_removes_every_padding_slot() -> None:
    """#54106: 20 full + 30 sliding. vLLM: size 20, 10 padding slots; a divisor (10) exists."""
    vllm = plan_example(VLLM, "swa30-full20")
    default = plan_example(DEFAULT, "swa30-full20")
    assert sorted(group_sizes(vllm)) == [15, 15, 20]
    assert vllm.waste is not None and vllm.waste.padding_slots == 10
    assert group_sizes(default) == [10] * 5
    assert default.waste is not None and default.waste.padding_slots == 0
    assert default.waste.efficiency > vllm.waste.efficiency
    assert default.max_concurrency > vllm.max_concurrency * 1.04
    assert default.capacity_tokens > vllm.capacity_tokens
    decision = group_decision(default, "min-padding")
    vllm_cost, chosen = decision.details["vllm"], decision.details["chosen"]
    assert vllm_cost["group_size"] == 20 and vllm_cost["padding_slots"] == 10
    assert chosen["group_size"] == 10 and chosen["padding_slots"] == 0
    assert "x1.04" in decision.reason


def test_mimo_no_global_layer_padding_fewer_groups_more_capacity() -> None:
    """#58175: 9 global + 39 sliding + 5 draft. vLLM's width 5 pads the 9 global layers to 10."""
    vllm = plan_example(VLLM, "mimo-v2-flash-mtp")
    default = plan_example(DEFAULT, "mimo-v2-flash-mtp")
    assert max(group_sizes(vllm)) == 5 and len(vllm.groups) == 11
    assert vllm.waste is not None and vllm.waste.padding_slots == 2
    full = [g for g in vllm.groups if g.spec.type_name == "full_attention"]
    assert sorted(len(g.layer_names) for g in full) == [4, 5]  # 9 global layers in 10 slots
    assert len(default.groups) == 7 and len(default.groups) < len(vllm.groups)
    width = max(group_sizes(default))
    assert all(len(g.layer_names) == width for g in default.groups if g.spec.type_name == "full_attention")
    assert default.max_concurrency > vllm.max_concurrency * 1.04
    assert default.capacity_tokens > vllm.capacity_tokens
    assert default.waste is not None and default.waste.efficiency > vllm.waste.efficiency


def test_dflash_singleton_default_never_trades_capacity_for_groups() -> None:
    """#51742: [30 mamba, 10 full] + DFlash [5 sliding, 1 full]: vLLM makes 46 one-layer groups.

    Every grouping with fewer groups pads the lone draft layer, so ``default`` keeps vLLM's
    capacity (and its 46 groups); a rule configured to give up capacity gets #51742's 10 groups.
    """
    vllm = plan_example(VLLM, "qwen3.6-35b-a3b-dflash")
    default = plan_example(DEFAULT, "qwen3.6-35b-a3b-dflash")
    assert len(vllm.groups) == 46 and max(group_sizes(vllm)) == 1
    assert default.max_concurrency == vllm.max_concurrency and len(default.groups) == 46
    reasons = {d.rule: d.reason for d in default.decisions if d.outcome == "declined"}
    assert (
        "size 1: 46 groups" in reasons["speculator-group"] and "size 1: 46 groups" in reasons["min-padding"]
    )

    class Fast:
        name = "test-fast-speculator"

        @staticmethod
        @hookimpl
        def kvrules_register_rules(registry: RuleRegistry) -> None:
            registry.add(SpeculatorGroup(name="speculator-group-fast", max_groups=10, max_capacity_loss=0.25))

    pm = get_plugin_manager(autoload=False, plugins=[Fast])
    model = load_example("qwen3.6-35b-a3b-dflash")
    fast = Planner(["speculator-group-fast"], plugin_manager=pm).plan(
        model.worker_specs(), model.available_memory or [GiB], EngineConfig(**model.engine)
    )
    assert len(fast.groups) == 10 and max(group_sizes(fast)) == 5
    assert 0.75 <= fast.max_concurrency / vllm.max_concurrency < 1
    for group in fast.groups:
        assert len({is_draft(n) for n in group.layer_names}) == 1


def test_drafter_scattered_by_vllm_gets_its_own_groups() -> None:
    """#35062: 12 sliding + 12 full + 8 draft layers of the target's full geometry."""
    vllm = plan_example(VLLM, "gpt-oss-20b-draft8")
    mixed = [g for g in vllm.groups if len({is_draft(n) for n in g.layer_names}) == 2]
    assert len(mixed) == 2  # vLLM interleaves the draft layers over both full-attention groups
    assert vllm.waste is not None and vllm.waste.padding_slots == 4
    default = plan_example(DEFAULT, "gpt-oss-20b-draft8")
    for group in default.groups:
        assert len({is_draft(n) for n in group.layer_names}) == 1
    drafts = [g for g in default.groups if is_draft(g.layer_names[0])]
    assert sum(len(g.layer_names) for g in drafts) == 8
    assert default.waste is not None and default.waste.padding_slots == 0
    assert default.max_concurrency > vllm.max_concurrency * 1.19
    decision = group_decision(default, "speculator-group")
    assert decision.details["vllm"]["padding_slots"] == 4 and decision.details["chosen"]["padding_slots"] == 0


def test_issue_43626_groups_keep_the_draft_apart_at_equal_capacity() -> None:
    vllm = plan_example(VLLM, "issue-43626")
    default = plan_example(DEFAULT, "issue-43626")
    assert len(vllm.groups) == len(default.groups) == 7
    assert default.max_concurrency >= vllm.max_concurrency
    for group in default.groups:
        assert len({is_draft(n) for n in group.layer_names}) == 1


# -- cost model and search ------------------------------------------------------------------------
FULL = FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16")
SWA = SlidingWindowSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16", sliding_window=128)
CFG = EngineConfig(max_model_len=4096, max_num_batched_tokens=512)  # full: 256 blocks, sliding: 41


def layers(prefix: str, spec: KVCacheSpec, n: int) -> dict[str, KVCacheSpec]:
    return {f"{prefix}.{i}": spec for i in range(n)}


def test_grouping_cost_counts_padding_slots_times_blocks() -> None:
    groups = split_buckets(buckets_by_spec({**layers("f", FULL, 3), **layers("s", SWA, 4)}), 4)
    cost = grouping_cost(groups, CFG)
    page = FULL.page_size_bytes
    assert (cost.group_size, cost.groups, cost.padding_slots) == (4, 2, 1)
    assert cost.blocks_per_request == 256 + 41
    assert cost.padded_bytes == 1 * 256 * page
    assert cost.request_bytes == 4 * page * (256 + 41)


def test_grouping_cost_binds_on_the_worker_with_the_least_room() -> None:
    f = layers("f", FULL, 2)
    groups = [
        KVCacheGroup(tuple(f), FULL),
        KVCacheGroup(("s.0", "s.1", "s.2"), SWA),
        KVCacheGroup(("s.3", "s.4"), SWA),
    ]
    stage0, stage1 = frozenset(["f.0", "f.1", "s.0", "s.1"]), frozenset(["s.2", "s.3", "s.4"])
    page, blocks = FULL.page_size_bytes, 256 + 41 + 41
    equal = grouping_cost(groups, CFG, Pool((stage0, stage1), (GiB, GiB)))
    assert (equal.group_size, equal.request_bytes) == (3, 2 * page * blocks)  # both stages 2 slots wide
    assert equal.capacity == Fraction(GiB, 2 * page * blocks)
    assert equal.padded_bytes == page * (0 * 256 + 0 * 41 + 2 * 41)  # stage 0 holds no layer of group 2
    small = grouping_cost(groups, CFG, Pool((stage0, stage1), (2 * GiB, GiB)))
    assert small.worker == 1 and small.capacity == Fraction(GiB, 2 * page * blocks)
    fixed = grouping_cost(groups, CFG, Pool((stage0, stage1), (GiB, GiB), num_blocks=1000))
    assert fixed.capacity == Fraction(1000, blocks)  # the override fixes num_blocks


def test_pipeline_stages_are_costed_per_worker() -> None:
    specs = {**layers("model.full", FULL, 2), **layers("model.swa", SWA, 5)}
    workers, memory = stages(specs, 2), [GiB, GiB]
    vllm = VLLM.plan(workers, memory, CFG)
    default = DEFAULT.plan(workers, memory, CFG)
    assert unrounded_capacity(default, memory) >= unrounded_capacity(vllm, memory)
    decision = group_decision(default, "min-padding")
    assert " on worker " in decision.reason


def test_search_prefers_fewer_padded_bytes_then_fewer_groups_within_the_cap() -> None:
    buckets = buckets_by_spec({**layers("f", FULL, 4), **layers("s", SWA, 6)})
    best, considered, over_cap = search(buckets, CFG, max_groups=8)
    assert best is not None
    assert best.cost.padded_bytes == 0 and best.cost.group_size == 2  # 2 + 3 groups, no padding
    assert [c.requested_size for c in considered] == [2, 3, 4, 6]  # 5 splits as 4 does
    assert over_cap == 1  # group size 1: 10 groups
    capped, _, _ = search(buckets, CFG, max_groups=3)
    assert capped is not None and capped.cost.groups <= 3
    assert search(buckets, CFG, max_groups=1)[0] is None


@settings(max_examples=60, deadline=None)
@given(
    full=st.integers(min_value=0, max_value=30),
    swa=st.integers(min_value=0, max_value=30),
    size=st.integers(min_value=1, max_value=31),
    split=st.integers(min_value=0, max_value=60),
    override=st.one_of(st.none(), st.integers(min_value=1, max_value=5000)),
)
def test_split_cost_is_the_cost_of_the_split_groups(
    full: int, swa: int, size: int, split: int, override: int | None
) -> None:
    """A search costs each group size from the buckets' lengths alone: the same figures as
    costing the groups it would make, with one worker and with pipeline stages."""
    specs = {**layers("f", FULL, full), **layers("s", SWA, swa)}
    if not specs:
        return
    buckets = buckets_by_spec(specs)
    names = list(specs)
    cut = min(split, len(names))
    pools = [
        Pool(),
        Pool(num_blocks=override),
        Pool((frozenset(names[:cut]), frozenset(names[cut:])), (GiB, GiB), override),
    ]
    for pool in pools:
        assert split_cost(buckets, size, CFG, pool) == grouping_cost(split_buckets(buckets, size), CFG, pool)
        assert vllm_grouping_cost(specs, CFG, pool) == grouping_cost(vllm_grouping(specs), CFG, pool)


#: specs that bucket apart, one equal to another but a new object, one that merges with FULL, and
#: more distinct objects than the few counted by identity
PALETTE = [
    FULL,
    SWA,
    FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16"),
    FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16", sliding_window=128),
    *(FullAttentionSpec(16, num_kv_heads=h, head_size=128, dtype="bfloat16") for h in range(1, 8)),
]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(range(len(PALETTE))), min_size=1, max_size=40))
def test_bucket_lengths_are_the_lengths_of_the_buckets(picks: list[int]) -> None:
    specs = {f"layer.{i}": PALETTE[k] for i, k in enumerate(picks)}
    expected = [(spec, len(names)) for spec, names in buckets_by_spec(specs)]
    assert bucket_lengths(specs) == expected
    assert [type(spec) for spec, _ in bucket_lengths(specs)] == [type(spec) for spec, _ in expected]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(range(len(PALETTE))), st.booleans()), min_size=1, max_size=40))
def test_buckets_where_are_the_buckets_of_the_chosen_layers(picks: list[tuple[int, bool]]) -> None:
    specs = {f"layer.{i}": PALETTE[k] for i, (k, _) in enumerate(picks)}
    mask = [keep for _, keep in picks]
    chosen = {name: spec for (name, spec), keep in zip(specs.items(), mask, strict=True) if keep}
    assert buckets_where(specs, mask) == buckets_by_spec(chosen)


def test_candidates_make_their_groups_when_first_read() -> None:
    buckets = buckets_by_spec({**layers("f", FULL, 4), **layers("s", SWA, 6)})
    best, considered, _ = search(buckets, CFG, max_groups=8)
    assert best is not None
    assert all(c._groups is None for c in considered)  # costed, not split
    assert best.groups == split_buckets(buckets, best.requested_size)
    assert best._groups is not None and best.groups is best.groups  # made once
    given_groups = Candidate(best.requested_size, split_buckets(buckets, best.requested_size), best.cost)
    assert given_groups == best and hash(given_groups) == hash(best)
    with pytest.raises(AttributeError, match="read-only"):
        best.cost = considered[0].cost  # type: ignore[misc]
    with pytest.raises(TypeError, match="not both"):
        Candidate(2, best.groups, best.cost, split=buckets)
    with pytest.raises(TypeError, match="not both"):
        Candidate(2, None, best.cost)


def test_acceptable_orders_capacity_then_groups_then_slots() -> None:
    def cost(request: int, groups: int, slots: int) -> GroupingCost:
        return GroupingCost(4, groups, slots, 1, 1, 0, request, 0, Fraction(1, request))

    vllm = cost(100, 5, 2)
    assert acceptable(cost(99, 9, 9), vllm)
    assert acceptable(cost(100, 5, 2), vllm)
    assert not acceptable(cost(100, 6, 0), vllm)
    assert not acceptable(cost(101, 1, 0), vllm)
    assert acceptable(cost(110, 1, 0), vllm, Fraction(1, 10))  # 100/110 keeps 90.9%
    assert not acceptable(cost(110, 5, 0), vllm, Fraction(1, 10))  # a loss must buy fewer groups
    assert not acceptable(cost(125, 1, 0), vllm, Fraction(1, 10))


def _ctx() -> Any:
    from kvrules.plugin.context import PlanContext

    return PlanContext(config=CFG, strategies=DEFAULT.strategies, registries=DEFAULT.registries)


def test_rules_decline_layers_a_shared_pool_cannot_hold() -> None:
    mixed = {"a": FULL, "b": FullAttentionSpec(16, num_kv_heads=4, head_size=128, dtype="bfloat16"), "c": SWA}
    check = MinPadding().check(mixed, _ctx())
    assert not check.applies and "one page size, these layers have 2" in check.reason
    uniform = {"draft.x": UniformTypeKVCacheSpecs(16, {"x": FULL}), "y": FULL}
    check = SpeculatorGroup().check(uniform, _ctx())
    assert not check.applies and "uniform-type" in check.reason
    with pytest.raises(PluginError, match="although it declines"):
        MinPadding().group(mixed, _ctx())


@pytest.mark.parametrize("rule", [MinPadding(), SpeculatorGroup()], ids=lambda r: r.name)
def test_the_guard_hands_its_search_to_the_action(rule: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard's search goes to the action in its answer (``ctx.check.work``), not through a
    cache that would keep every layer name alive for the rest of the plan; an action called
    without it searches again, to the same groups."""
    specs = MappingProxyType(
        {**layers("model.full", FULL, 6), **layers("model.swa", SWA, 10), **layers("draft.f", FULL, 2)}
    )
    ctx = _ctx()
    answer = rule.check(specs, ctx)
    assert answer.applies and answer.work is not None and not ctx.cache
    act = rule.partition if isinstance(rule, SpeculatorGroup) else rule.group
    again = act(specs, _ctx())
    monkeypatch.setattr(type(rule), "_search", lambda *_: pytest.fail("searched twice"))
    made = act(specs, dataclasses.replace(ctx, check=answer))
    groups = made[0] if isinstance(made, tuple) else made
    assert (again[0] if isinstance(again, tuple) else again) == groups


def test_draft_layers_are_recognised_by_name_only() -> None:
    specs = {
        **layers("model.layers", FULL, 12),
        **layers("model.swa", SWA, 12),
        **layers("mtp.layers", FULL, 8),
    }
    plain = DEFAULT.plan(specs, GiB, CFG)
    reasons = [d.reason for d in plain.decisions if d.rule == "speculator-group"]
    assert reasons == ["no layer name starts with a draft prefix (draft., drafter., draft_model.)."]
    named = DEFAULT.plan(
        specs,
        GiB,
        EngineConfig(max_model_len=4096, max_num_batched_tokens=512, draft_layer_prefixes=("mtp.",)),
    )
    for group in named.groups:
        assert len({n.startswith("mtp.") for n in group.layer_names}) == 1
    assert named.max_concurrency >= VLLM.plan(specs, GiB, CFG).max_concurrency


def test_all_draft_model_is_left_to_the_grouper() -> None:
    specs = {**layers("draft.f", FULL, 3), **layers("draft.s", SWA, 2)}
    plan = DEFAULT.plan(specs, GiB, CFG)
    reasons = [d.reason for d in plan.decisions if d.rule == "speculator-group"]
    assert reasons == ["all 5 layers are draft layers; there is no target to keep them from."]


# -- property: default never loses capacity against vllm -------------------------------------------
def _attention(kind: str, heads: int, window: int) -> KVCacheSpec:
    if kind == "full":
        return FullAttentionSpec(16, num_kv_heads=heads, head_size=128, dtype="bfloat16")
    return SlidingWindowSpec(16, num_kv_heads=heads, head_size=128, dtype="bfloat16", sliding_window=window)


@st.composite
def random_models(draw: st.DrawFn) -> tuple[dict[str, KVCacheSpec], EngineConfig]:
    heads = st.sampled_from([1, 2, 4, 8])
    window = draw(st.sampled_from([128, 1024, 4096]))
    specs: dict[str, KVCacheSpec] = {}
    full = _attention("full", draw(heads), window)
    swa = _attention("swa", draw(heads), window)
    specs |= layers("model.full", full, draw(st.integers(1, 20)))
    specs |= layers("model.swa", swa, draw(st.integers(0, 40)))
    mamba_layers = draw(st.integers(0, 30))
    if mamba_layers:
        rows = draw(st.integers(1, 4))  # page = rows x 64 KiB, a multiple of every attention page
        mamba = MambaSpec(
            16, [[rows, 32768]], ["bfloat16"], mamba_cache_mode=draw(st.sampled_from(["none", "align"]))
        )
        specs |= layers("model.mamba", mamba, mamba_layers)
    for index in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["same-full", "full", "swa"]))
        spec = full if kind == "same-full" else _attention(kind, draw(heads), window)
        specs |= layers(f"draft.{index}", spec, draw(st.integers(1, 9)))
    config = EngineConfig(
        max_model_len=draw(st.sampled_from([2048, 8192, 32768, 131072])),
        max_num_batched_tokens=draw(st.sampled_from([512, 2048, 8192])),
    )
    return specs, config


def plan_or_none(
    planner: Planner, workers: list[dict[str, KVCacheSpec]], memory: list[int], config: EngineConfig
) -> Plan | None:
    try:
        return planner.plan(workers, memory, config)
    except CapacityError:
        return None


def stages(specs: Mapping[str, KVCacheSpec], count: int) -> list[dict[str, KVCacheSpec]]:
    """``count`` contiguous pipeline stages (fewer when there are fewer layers)."""
    names = list(specs)
    count = min(count, len(names))
    bounds = [len(names) * i // count for i in range(count + 1)]
    return [{n: specs[n] for n in names[bounds[i] : bounds[i + 1]]} for i in range(count)]


def unrounded_capacity(plan: Plan, memory: list[int]) -> Fraction:
    """Max concurrency before blocks are rounded down: min over workers of memory / block bytes, over blocks per request."""
    assert plan.waste is not None
    blocks = total_blocks_per_request(plan.groups, plan.config)
    per_worker = [
        Fraction(m, w.block_bytes) for m, w in zip(memory, plan.waste.workers, strict=True) if w.block_bytes
    ]
    return min(per_worker) / blocks


def shared_pool_invariants(plan: Plan, specs: Mapping[str, KVCacheSpec], memory: list[int]) -> Iterator[str]:
    placed = [n for g in plan.groups for n in g.layer_names]
    if sorted(placed) != sorted(specs):
        yield "every layer in exactly one group"
    for worker, mem in zip(plan.workers, memory, strict=True):
        if worker.allocated_bytes > mem:
            yield "allocation fits the memory"
        if worker.layout != "shared-pool":  # e.g. one uniform-type group: a tensor per layer
            continue
        live = [g for g in worker.groups if g.layer_names]
        pages = {g.spec.page_size_bytes for g in live}
        if len(pages) != 1:
            yield f"one page size, got {pages}"
        width = max(len(g.layer_names) for g in live)
        if len(worker.tensors) != width:
            yield "one tensor per slot of the widest group"
        index = {n: i for i, g in enumerate(live) for n in g.layer_names}
        for tensor in worker.tensors:
            owners = [index[n] for n in tensor.shared_by]
            if len(owners) != len(set(owners)):
                yield "a tensor holds at most one layer per group"
            if tensor.size != worker.num_blocks * max(pages):
                yield "tensor size is num_blocks pages"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_models(), st.lists(st.sampled_from([1, 4, 16]), min_size=1, max_size=3))
def test_default_never_has_less_capacity_than_vllm(model: Any, gibs: list[int]) -> None:
    """Random models on 1-3 pipeline stages with their own memory: same memory, never less capacity."""
    specs, config = model
    workers = stages(specs, len(gibs))
    memory = [g * GiB for g in gibs[: len(workers)]]
    vllm = plan_or_none(VLLM, workers, memory, config)
    default = plan_or_none(DEFAULT, workers, memory, config)
    if vllm is None:
        return
    assert default is not None, "default failed the memory check where vllm passed"
    assert list(shared_pool_invariants(default, specs, memory)) == []
    mine, theirs = unrounded_capacity(default, memory), unrounded_capacity(vllm, memory)
    assert mine >= theirs  # num_blocks-equivalent capacity, exact
    # whole blocks only: default may lose at most one block to rounding
    assert (
        default.max_concurrency
        >= vllm.max_concurrency - 1 / total_blocks_per_request(default.groups, config) - 1e-9
    )
    if mine == theirs:
        assert (len(default.groups), default.waste.padding_slots) <= (
            len(vllm.groups),
            vllm.waste.padding_slots,
        )  # type: ignore[union-attr]


# -- draft-aware-align (vLLM #43626 after #45207) --------------------------------------------------
QWEN3_CODER_NEXT = {
    "model_type": "qwen3_next",
    "num_hidden_layers": 48,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "hidden_size": 2048,
    "full_attention_interval": 4,
    "linear_num_key_heads": 16,
    "linear_key_head_dim": 128,
    "linear_num_value_heads": 32,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "max_position_embeddings": 262144,
    "torch_dtype": "bfloat16",
}
QWEN3_4B = {
    "model_type": "qwen3",
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_size": 2560,
    "max_position_embeddings": 262144,
    "torch_dtype": "bfloat16",
}


def build_43626(strategies: str | None, length: int) -> Any:
    """fp8 KV, TP1, 4 speculative tokens: the specs built (and aligned) with one strategy set."""
    from kvrules.hf import HFOptions, build_hf_model

    options = HFOptions(kv_cache_dtype="fp8", num_speculative_tokens=4, max_model_len=length)
    return build_hf_model(QWEN3_CODER_NEXT, QWEN3_4B, options, strategies=strategies)


def issue_43626(strategies: str | None, length: int) -> Plan:
    """Built and planned with one strategy set, 40 GiB."""
    specs = build_43626(strategies, length).specs
    return Planner(strategies).plan(specs, 40 * GiB, EngineConfig(max_model_len=length))


def pages(plan: Plan) -> set[tuple[str, int, int, int | None]]:
    return {
        (s.type_name, s.block_size, s.page_size_bytes, getattr(s, "page_size_padded", None))
        for s in plan.specs.values()
    }


def test_vllm_pads_every_mamba_page_to_twice_its_size() -> None:
    """formulas §6.1: block 1136, Mamba page 1,163,264 padded to the draft page 2,326,528."""
    plan = issue_43626("vllm", 32768)
    assert pages(plan) == {
        ("mamba", 1136, 2_326_528, 2_326_528),
        ("full_attention", 2272, 2_326_528, None),  # target: block-scaled x2
        ("full_attention", 1136, 2_326_528, None),  # draft
    }
    assert plan.waste is not None and plan.waste.page_padding_bytes > 0


def test_draft_aware_align_covers_the_mamba_page_once() -> None:
    plan = issue_43626(None, 32768)
    page = 1_179_648  # lcm(16 x 1024, 16 x 2048) x cdiv(1,163,264, 32,768) = 32,768 x 36
    assert pages(plan) == {
        ("mamba", 1152, page, page),  # +16,384 bytes (1.41%) instead of +1,163,264 (100%)
        ("full_attention", 1152, page, None),  # target, 1024 B/token
        ("full_attention", 576, page, None),  # draft, 2048 B/token
    }
    decisions = build_43626(None, 32768).decisions
    applied = [d for d in decisions if d.rule == "draft-aware-align" and d.layer is None]
    assert (
        applied[0].outcome == "applied"
        and "1,179,648 B" in applied[0].reason
        and "x1.0856" in applied[0].reason
    )
    assert len(applied) == 1  # one decision: the sentence and the figures
    details = applied[0].details
    assert details["vllm"]["page_size_bytes"] == 2_326_528 and details["chosen"]["page_size_bytes"] == page
    assert [d.reason for d in decisions if d.rule == "hybrid-align"] == [
        "draft-aware-align already aligned the specs."
    ]


@pytest.mark.parametrize(("length", "at_least"), [(4096, 1.25), (32768, 1.08), (262144, 1.01)])
def test_draft_aware_align_raises_max_concurrency(length: int, at_least: float) -> None:
    vllm = issue_43626("vllm", length)
    default = issue_43626(None, length)
    assert default.max_concurrency >= at_least * vllm.max_concurrency
    assert default.capacity_tokens > vllm.capacity_tokens


def test_draft_aware_align_declines_a_common_page_larger_than_vllms() -> None:
    """A 3072 B/token target beside a 2048 B/token draft: lcm makes the page 2x hybrid-align's."""
    from kvrules.hf import build_hf_model

    target = QWEN3_CODER_NEXT | {
        "num_hidden_layers": 8,
        "num_key_value_heads": 3,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 2,
        "linear_key_head_dim": 32,
        "linear_value_head_dim": 32,
    }
    draft = QWEN3_4B | {"num_hidden_layers": 2, "num_key_value_heads": 2, "head_dim": 256}
    model = build_hf_model(target, draft)
    reasons = {d.rule: d for d in model.decisions if d.stage == "align" and d.layer is None}
    assert reasons["draft-aware-align"].outcome == "declined"
    assert "larger than hybrid-align's unified page (49152 bytes)" in reasons["draft-aware-align"].reason
    assert reasons["hybrid-align"].outcome == "applied"


def test_draft_aware_align_declines_without_a_second_geometry_or_in_all_mode() -> None:
    from kvrules.hf import HFOptions, build_hf_model

    alone = build_hf_model(QWEN3_CODER_NEXT, None, HFOptions(kv_cache_dtype="fp8"))
    reason = next(d.reason for d in alone.decisions if d.rule == "draft-aware-align")
    assert reason.startswith("one attention geometry")
    full = QWEN3_CODER_NEXT | {"mamba_chunk_size": 64}
    chunked = build_hf_model(full, QWEN3_4B, HFOptions(mamba_cache_mode="all"))
    reason = next(d.reason for d in chunked.decisions if d.rule == "draft-aware-align")
    assert "mamba_cache_mode 'all'" in reason


def test_draft_aware_align_is_default_only_and_asked_before_hybrid_align() -> None:
    rules = DEFAULT.registries.rules.rules
    assert rules["draft-aware-align"].kind == "align" and rules["draft-aware-align"].default
    assert "draft-aware-align" not in BUILTIN_PRESETS["vllm"]
    aligners = [r.name for r in DEFAULT.strategies.rules("align")]
    assert aligners.index("draft-aware-align") < aligners.index("hybrid-align")
    assert DraftAwareAlign().touches == frozenset({"block_size", "page_size_padded"})


@st.composite
def hybrid_configs(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    target = QWEN3_CODER_NEXT | {
        "num_hidden_layers": draw(st.sampled_from([8, 12, 16])),
        "num_key_value_heads": draw(st.sampled_from([1, 2, 4])),
        "head_dim": draw(st.sampled_from([128, 256])),
        "linear_num_key_heads": draw(st.sampled_from([4, 8, 16])),
        "linear_num_value_heads": draw(st.sampled_from([8, 16, 32])),
    }
    draft = QWEN3_4B | {
        "num_hidden_layers": draw(st.integers(1, 6)),
        "num_key_value_heads": draw(st.sampled_from([1, 2, 4, 8])),
        "head_dim": draw(st.sampled_from([64, 128, 256])),
    }
    options = {
        "kv_cache_dtype": draw(st.sampled_from(["auto", "fp8"])),
        "num_speculative_tokens": draw(st.integers(0, 5)),
        "max_model_len": draw(st.sampled_from([2048, 16384, 131072])),
        "attention_backend": draw(st.sampled_from(["auto", "flashinfer", "triton"])),
    }
    return target, draft, options


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hybrid_configs(), st.sampled_from([1, 2, 3]))
def test_default_alignment_and_grouping_never_lose_to_vllm(model: Any, shorter: int) -> None:
    """Built and planned with each set at the build length, and at a shorter planning length."""
    from kvrules.errors import KVRulesError
    from kvrules.hf import HFOptions, build_hf_model

    target, draft, options = model
    built = {
        s: build_hf_model(target, draft, HFOptions(**options), strategies=s).specs for s in ("vllm", None)
    }
    for length in {options["max_model_len"], options["max_model_len"] // (4**shorter)}:
        config = EngineConfig(max_model_len=max(length, 1))
        try:
            vllm = VLLM.plan(built["vllm"], 8 * GiB, config)
        except KVRulesError:
            continue
        default = DEFAULT.plan(built[None], 8 * GiB, config)
        assert vllm.waste is not None and default.waste is not None
        assert default.waste.allocated_bytes <= vllm.waste.allocated_bytes
        assert list(shared_pool_invariants(default, built[None], [8 * GiB])) == []


def test_the_python_examples_in_the_docs_run_and_print_what_they_say(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import re
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs" / "beyond-vllm.md"
    blocks = re.findall(r"```python\n(.*?)```", docs.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 2
    for block in blocks:
        exec(compile(block, str(docs), "exec"), {"__name__": "docs_example"})
        printed = capsys.readouterr().out.strip().splitlines()[-1]
        promised = re.findall(r"# (.+)\n", block)[-1]
        assert printed == promised


def test_an_override_never_buys_capacity_with_memory_it_does_not_have() -> None:
    """``num_gpu_blocks_override`` fixes the block count, not the bytes: a wider grouping makes
    each block larger. On c9 (12 layers, override 1,000 blocks) ``default`` groups 10 + 2 when
    the 655 MB that takes fits the memory; with 100 MB it keeps vLLM's grouping (and refuses
    as vLLM does) instead of planning 655 MB on a 100 MB worker."""
    case = load_case("c9_gemma_override")
    roomy = Planner("default").plan(case.workers, case.memory, case.config)
    assert sorted(len(g.layer_names) for g in roomy.groups) == [2, 10]
    assert roomy.workers[0].allocated_bytes <= case.memory[0]
    with pytest.raises(CapacityError, match=r"has 0\.12 GiB"):
        Planner("default").plan(case.workers, [100_000_000], case.config)
    with pytest.raises(CapacityError, match=r"has 0\.12 GiB"):
        Planner("vllm").plan(case.workers, [100_000_000], case.config)
