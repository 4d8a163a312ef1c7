"""The report package: the plan table, the summary and the picture agree about every group.

The plans here are built by hand (groups, specs and tensors written out), so the numbers in the
assertions are worked out below from the layer shapes, not taken from kvrules' formulas; one
test plans the same model with the planner to check the reports agree on a planned plan too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvrules import (
    EngineConfig,
    FullAttentionSpec,
    KVCacheGroup,
    KVCacheSpec,
    KVCacheTensor,
    KVQuantMode,
    MambaSpec,
    MLAAttentionSpec,
    Plan,
    Planner,
    SlidingWindowMLASpec,
    UniformTypeKVCacheSpecs,
    WorkerPlan,
)
from kvrules.plan import project_group
from kvrules.report.groups import GroupFacts, first_names, group_facts, role_of
from kvrules.report.summary import render_summary
from kvrules.report.tables import render_plan

CONFIG = EngineConfig(max_model_len=4096, max_num_batched_tokens=256)

# INT8 per-token-head full attention, 16 tokens x 8 KV heads x head 128, one byte a value:
#   K and V values: 16 * 8 * (128 + 128) * 1 = 32,768 bytes
#   scales (one fp32 each for K and V, per token and head): 2 * 16 * 8 * 4 = 1,024 bytes
#   page: 33,792 bytes, all of it real state (no padding)
INT8_VALUES = 16 * 8 * (128 + 128) * 1
INT8_SCALES = 2 * 16 * 8 * 4
INT8_PAGE = INT8_VALUES + INT8_SCALES
# bf16 Mamba state: (1024 x 4) + (8 x 32 x 32) elements of two bytes = 8,192 + 16,384 = 24,576
# bytes, padded up to the attention page: 33,792 - 24,576 = 9,216 bytes of padding
MAMBA_STATE = (1024 * 4 + 8 * 32 * 32) * 2
MAMBA_PADDING = INT8_PAGE - MAMBA_STATE


def int8_attention() -> FullAttentionSpec:
    return FullAttentionSpec(
        block_size=16,
        num_kv_heads=8,
        head_size=128,
        dtype="int8",
        kv_quant_mode=KVQuantMode.INT8_PER_TOKEN_HEAD,
    )


def bf16_mamba(padded: int | None = None) -> MambaSpec:
    return MambaSpec(
        block_size=16,
        shapes=((1024, 4), (8, 32, 32)),
        dtypes=("bfloat16", "bfloat16"),
        page_size_padded=padded,
    )


def hand_plan(groups: list[KVCacheGroup], workers: list[set[str]] | None = None) -> Plan:
    """A plan holding ``groups``: one tensor per layer, 100 blocks, on one worker or ``workers``."""
    specs: dict[str, KVCacheSpec] = {}
    for group in groups:
        specs.update(group.spec.members(group.layer_names))
    shares = workers or [set(specs)]
    plans = []
    for share in shares:
        names = [n for n in specs if n in share]
        tensors = tuple(KVCacheTensor(specs[n].page_size_bytes * 100, (n,)) for n in names)
        plans.append(
            WorkerPlan(
                num_blocks=100,
                tensors=tensors,
                groups=tuple(project_group(g, share) for g in groups),
                layout="per-layer",
                available_memory=sum(t.size for t in tensors),
                own_num_blocks=100,
            )
        )
    return Plan(
        groups=tuple(groups),
        workers=tuple(plans),
        num_blocks=100,
        specs=specs,
        decisions=(),
        max_concurrency=1.0,
        capacity_tokens=4096,
        max_model_len=4096,
        config=CONFIG,
    )


def int8_beside_mamba() -> Plan:
    """Group 0: two bf16 Mamba layers padded to the attention page; group 1: two INT8 layers."""
    mamba, attention = bf16_mamba(INT8_PAGE), int8_attention()
    return hand_plan(
        [
            KVCacheGroup(("model.layers.0.linear_attn", "model.layers.2.linear_attn"), mamba),
            KVCacheGroup(("model.layers.1.self_attn", "model.layers.3.self_attn"), attention),
        ]
    )


# A uniform-type group of an MLA layer and a sliding-window MLA layer, 64 tokens a block, bf16:
#   MLA: 64 * 1 * 576 * 2 = 73,728 bytes, no padding
#   sliding-window MLA: 64 * 1 * 512 * 2 = 65,536 bytes, aligned up to 2 * 40,960 = 81,920 bytes
#   one block of the group: 73,728 + 81,920 = 155,648 bytes, of which 16,384 padding
MLA_PAGE = 64 * 1 * 576 * 2
SWA_REAL = 64 * 1 * 512 * 2
SWA_PAGE = 2 * 40960
UNIFORM_PAGE = MLA_PAGE + SWA_PAGE
UNIFORM_PADDING = SWA_PAGE - SWA_REAL


def mla_pair() -> UniformTypeKVCacheSpecs:
    mla = MLAAttentionSpec(block_size=64, num_kv_heads=1, head_size=576, dtype="bfloat16")
    swa = SlidingWindowMLASpec(
        block_size=64, num_kv_heads=1, head_size=512, dtype="bfloat16", sliding_window=128, alignment=40960
    )
    return UniformTypeKVCacheSpecs(64, {"model.layers.0.attn": mla, "model.layers.1.attn": swa})


def uniform_and_draft() -> Plan:
    """Group 0: the uniform-type MLA pair; group 1: two bf16 draft layers; group 2: mixed."""
    bf16 = FullAttentionSpec(block_size=16, num_kv_heads=4, head_size=64, dtype="bfloat16")
    return hand_plan(
        [
            KVCacheGroup(("model.layers.0.attn", "model.layers.1.attn"), mla_pair()),
            KVCacheGroup(("draft.layers.0.attn", "draft.layers.1.attn"), bf16),
            KVCacheGroup(("model.layers.2.attn", "draft.layers.2.attn"), bf16),
        ]
    )


def rows_of(text: str, header: str) -> list[str]:
    """The body rows of the table whose header line starts (after the indent) with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(header))
    body = []
    for line in lines[start + 2 :]:
        if not line.startswith("  ") or not line.strip() or line.strip().startswith("num_blocks "):
            break  # the table ends at a blank line, or at the summary's capacity line
        body.append(line)
    return body


def test_the_hand_computed_pages_are_the_specs_pages() -> None:
    attention = int8_attention()
    assert (attention.page_size_bytes, attention.padding_bytes) == (33_792, 0)
    assert bf16_mamba(INT8_PAGE).padding_bytes == MAMBA_PADDING == 9_216
    pair = mla_pair()
    assert (pair.page_size_bytes, pair.padding_bytes) == (155_648, 16_384)


def test_int8_per_token_head_padding_agrees_between_plan_table_and_summary() -> None:
    plan = int8_beside_mamba()
    groups = rows_of(render_plan(plan, "int8"), "#  layers  type")
    assert groups == [
        "  0  2       mamba           16     33,792  9,216      1           "
        "model.layers.0.linear_attn, model.layers.2.linear_attn",
        # the scales (1,024 bytes) are real state: no padding, as in the summary below
        "  1  2       full_attention  16     33,792  -          256         "
        "model.layers.1.self_attn, model.layers.3.self_attn",
    ]
    summary = rows_of(render_summary(plan), "groups  layers/group")
    assert summary == [
        "  1       2             mamba           target  16     33,792  9,216 (27.3%)",
        "  1       2             full_attention  target  16     33,792  -",
    ]


def test_uniform_type_kind_and_padding_agree_between_plan_table_and_summary() -> None:
    plan = uniform_and_draft()
    groups = rows_of(render_plan(plan, "mla"), "#  layers  type")
    summary = rows_of(render_summary(plan), "groups  layers/group")
    assert groups[0] == (
        "  0  2       uniform_type[mla,sliding_window_mla]  64     155,648  16,384     64          "
        "model.layers.0.attn, model.layers.1.attn"
    )
    assert summary[0] == (
        "  1       2             uniform_type[mla,sliding_window_mla]  target  64     155,648  16,384 (10.5%)"
    )
    assert [r.split()[3] for r in summary[1:]] == ["draft", "mixed"]


def test_group_facts_of_int8_beside_mamba() -> None:
    mamba, attention = group_facts(int8_beside_mamba())
    assert mamba == GroupFacts(
        index=0,
        layer_names=("model.layers.0.linear_attn", "model.layers.2.linear_attn"),
        kind="mamba",
        role="target",
        block_size=16,
        page_bytes=INT8_PAGE,
        padding_bytes=MAMBA_PADDING,
        blocks_per_request=1,  # a Mamba layer holds one state per request
        layers=mamba.layers,
    )
    assert attention.kind == "full_attention"
    assert (attention.page_bytes, attention.padding_bytes) == (33_792, 0)
    assert attention.blocks_per_request == 4096 // 16
    assert attention.layer_count == 2
    assert [(x.name, x.kind, x.draft, x.real_bytes) for x in attention.layers] == [
        ("model.layers.1.self_attn", "full_attention", False, 33_792),
        ("model.layers.3.self_attn", "full_attention", False, 33_792),
    ]
    assert [(x.real_bytes, x.padding_bytes) for x in mamba.layers] == [(24_576, 9_216)] * 2


def test_group_facts_of_a_uniform_type_group_and_of_draft_layers() -> None:
    pair, draft, mixed = group_facts(uniform_and_draft())
    assert (pair.kind, pair.role, pair.block_size) == ("uniform_type[mla,sliding_window_mla]", "target", 64)
    assert (pair.page_bytes, pair.padding_bytes) == (UNIFORM_PAGE, UNIFORM_PADDING)
    # the MLA member keeps every token: 4096 / 64 = 64 blocks; the window needs fewer
    assert pair.blocks_per_request == 64
    assert [(x.name, x.kind, x.page_bytes, x.padding_bytes) for x in pair.layers] == [
        ("model.layers.0.attn", "mla", 73_728, 0),
        ("model.layers.1.attn", "sliding_window_mla", 81_920, 16_384),
    ]
    # bf16 draft attention: 16 * 4 * (64 + 64) * 2 = 16,384 bytes a page, 4096 / 16 blocks
    assert (draft.kind, draft.role, draft.page_bytes, draft.blocks_per_request) == (
        "full_attention",
        "draft",
        16_384,
        256,
    )
    assert [x.draft for x in draft.layers] == [True, True]
    assert (mixed.role, [x.draft for x in mixed.layers]) == ("mixed", [False, True])
    assert [f.index for f in (pair, draft, mixed)] == [0, 1, 2]


def test_group_facts_of_one_workers_share() -> None:
    plan = hand_plan(
        [KVCacheGroup(("model.layers.0.attn", "model.layers.1.attn"), mla_pair())],
        workers=[{"model.layers.0.attn"}, {"model.layers.1.attn"}],
    )
    (whole,) = group_facts(plan)
    (first,) = group_facts(plan, 0)
    (second,) = group_facts(plan, 1)
    assert whole.page_bytes == UNIFORM_PAGE
    assert (first.kind, first.layer_names, first.page_bytes, first.padding_bytes) == (
        "uniform_type[mla]",
        ("model.layers.0.attn",),
        73_728,
        0,
    )
    assert (second.kind, second.page_bytes, second.padding_bytes) == (
        "uniform_type[sliding_window_mla]",
        81_920,
        16_384,
    )
    assert first.index == second.index == 0


def test_a_group_without_layers_is_a_target_group() -> None:
    assert role_of([]) == "target"
    assert role_of([True]) == "draft"
    assert role_of([False, True]) == "mixed"


def test_first_names() -> None:
    assert first_names(("a", "b"), 2) == "a, b"
    assert first_names(("a", "b", "c", "d"), 2) == "a, b, ... (+2)"
    assert first_names((), 3) == ""


def test_a_planned_int8_model_reports_the_same_padding_everywhere(tmp_path: Path) -> None:
    specs: dict[str, KVCacheSpec] = {}
    for i in range(4):
        if i % 2:
            specs[f"model.layers.{i}.self_attn"] = int8_attention()
        else:
            specs[f"model.layers.{i}.linear_attn"] = bf16_mamba()
    plan = Planner("vllm").plan(specs, 1 << 30, CONFIG)
    table = {r.split()[2]: r.split()[5] for r in rows_of(render_plan(plan, "t"), "#  layers  type")}
    summary = {r.split()[2]: r.split()[6] for r in rows_of(render_summary(plan), "groups  layers/group")}
    assert table == summary == {"mamba": "9,216", "full_attention": "-"}
    pytest.importorskip("matplotlib")
    from kvrules.report.picture import draw_layout

    svg = draw_layout(plan, tmp_path / "int8.svg").read_text()
    assert "padding" in svg and "full_attention" in svg and "mamba" in svg
