"""Byte-exact aliasing: what a layer writes through its view of block b lands in the plan's page."""

from __future__ import annotations

from collections.abc import Callable

import alloc_models as models
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvrules
from kvrules import Allocation, FullAttentionSpec, MambaSpec, Plan
from kvrules.dtypes import to_torch

ATTENTION_LAYOUTS = ("flash-attn-nhd", "flash-attn-hnd", "flashinfer-nhd", "flashinfer-hnd")


def cpu(plan: Plan, layout: kvrules.allocation.LayoutChoice = None) -> Allocation:
    allocation = kvrules.allocate(plan, "cpu", layout=layout)
    allocation.verify()
    return allocation


def page(allocation: Allocation, layer: str, block: int) -> torch.Tensor:
    """The raw int8 bytes the plan assigns to (layer, block), padding included."""
    place = allocation.placements[layer]
    start = place.page_start(block)
    raw: torch.Tensor = allocation.buffers[place.tensor][start : start + place.spec.page_size_bytes]
    return raw


def pattern(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 1) -> torch.Tensor:
    """Distinct small integers, exact in every dtype used here."""
    count = 1
    for n in shape:
        count *= n
    values = (torch.arange(count) * 7 + seed) % 101 + 1
    return values.reshape(shape).to(dtype)


def as_dtype(raw: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return raw.clone().view(dtype)


def marker(dtype: torch.dtype) -> float:
    """A value whose every byte is non-zero in ``dtype``."""
    for value in (-1.1, -1.125, -1, 255):
        try:
            probe = torch.tensor([value]).to(dtype)
        except (RuntimeError, OverflowError):
            continue
        if bool((probe.view(torch.uint8) != 0).all()):
            return float(probe[0]) if probe.dtype.is_floating_point else int(probe[0])
    raise AssertionError(f"no marker for {dtype}")


def views_of(allocation: Allocation, layer: str) -> tuple[torch.Tensor, ...]:
    value = allocation.views[layer]
    return value if isinstance(value, tuple) else (value,)


def assert_pages_exact(allocation: Allocation) -> None:
    """For every layer alone: filling its views marks exactly its pages' unpadded bytes."""
    for layer, place in allocation.placements.items():
        for buf in allocation.buffers:
            buf.zero_()
        for view in views_of(allocation, layer):
            view.fill_(marker(view.dtype))
        expected = torch.zeros_like(allocation.buffers[place.tensor], dtype=torch.bool)
        for block in range(place.num_blocks):
            start = place.page_start(block)
            expected[start : start + place.content_bytes] = True
        got = allocation.buffers[place.tensor] != 0
        assert torch.equal(got, expected), layer
        others = [b for i, b in enumerate(allocation.buffers) if b is not allocation.buffers[place.tensor]]
        assert all(int(b.count_nonzero()) == 0 for b in others), layer


# -- attention layouts ---------------------------------------------------------------------------


def write_kv(view: torch.Tensor, layout: str, block: int, k: torch.Tensor, v: torch.Tensor) -> None:
    if layout.startswith("flash-attn"):
        view[0, block] = k
        view[1, block] = v
    else:
        view[block, 0] = k
        view[block, 1] = v


def read_half(
    raw: torch.Tensor, layout: str, shape: tuple[int, int, int], dtype: torch.dtype
) -> torch.Tensor:
    """K or V of one page from raw bytes, in (block_size, heads, head_size) order."""
    bs, heads, dim = shape
    data = as_dtype(raw, dtype)
    if layout.endswith("hnd"):
        return data.reshape(heads, bs, dim).permute(1, 0, 2)
    return data.reshape(bs, heads, dim)


@pytest.mark.parametrize("layout", ATTENTION_LAYOUTS)
def test_attention_layout_bytes(layout: str) -> None:
    allocation = cpu(models.dense(blocks=6), layout)
    layer = "layers.1.attn"
    view = allocation.views[layer]
    shape = (4, 2, 8)
    expected = (2, 6, *shape) if layout.startswith("flash-attn") else (6, 2, *shape)
    assert tuple(view.shape) == expected and view.dtype == torch.bfloat16
    k, v = pattern(shape, torch.bfloat16, 1), pattern(shape, torch.bfloat16, 50)
    write_kv(view, layout, 3, k, v)
    raw = page(allocation, layer, 3)
    half = 4 * 2 * 8 * 2
    assert torch.equal(read_half(raw[:half], layout, shape, torch.bfloat16), k)
    assert torch.equal(read_half(raw[half:], layout, shape, torch.bfloat16), v)
    buffer = allocation.buffers[allocation.placements[layer].tensor]
    assert int(buffer.count_nonzero()) == int(raw.count_nonzero())


@pytest.mark.parametrize("layout", ATTENTION_LAYOUTS)
def test_padded_attention_pages_skip_the_padding_tail(layout: str) -> None:
    allocation = cpu(models.padded_attention(blocks=5), layout)
    layer = "layers.0.full"
    spec = allocation.placements[layer].spec
    assert (spec.page_size_bytes, spec.unpadded_page_size_bytes) == (512, 384)
    view = allocation.views[layer]
    shape = (4, 3, 8)
    k, v = pattern(shape, torch.bfloat16, 3), pattern(shape, torch.bfloat16, 60)
    write_kv(view, layout, 4, k, v)
    raw = page(allocation, layer, 4)
    assert torch.equal(read_half(raw[:192], layout, shape, torch.bfloat16), k)
    assert torch.equal(read_half(raw[192:384], layout, shape, torch.bfloat16), v)
    view.fill_(-1.1)
    pages = allocation.buffers[allocation.placements[layer].tensor].reshape(5, 512)
    assert bool((pages[:, :384] != 0).all())
    assert int(pages[:, 384:].count_nonzero()) == 0


def test_split_kv_bytes() -> None:
    allocation = cpu(models.split_kv())
    layer = "layers.0.attn"
    assert allocation.layouts[layer] == "split-kv"
    k_view, v_view = allocation.views[layer]
    assert tuple(k_view.shape) == (4, 4, 2, 8) and tuple(v_view.shape) == (4, 4, 2, 4)
    k, v = pattern((4, 2, 8), torch.bfloat16, 2), pattern((4, 2, 4), torch.bfloat16, 9)
    k_view[2], v_view[2] = k, v
    raw = page(allocation, layer, 2)
    assert torch.equal(as_dtype(raw[:128], torch.bfloat16).reshape(4, 2, 8), k)
    assert torch.equal(as_dtype(raw[128:192], torch.bfloat16).reshape(4, 2, 4), v)


def test_per_token_head_scales_follow_kv_in_the_page() -> None:
    allocation = cpu(models.per_token_head())
    layer = "layers.1.attn"
    kv, scales = allocation.views[layer]
    assert kv.dtype == torch.int8 and scales.dtype == torch.float32
    assert tuple(scales.shape) == (2, 4, 4, 2)
    k = pattern((4, 2, 8), torch.int8, 5)
    kv[0, 1] = k
    scale_k, scale_v = pattern((4, 2), torch.float32, 11), pattern((4, 2), torch.float32, 30)
    scales[0, 1], scales[1, 1] = scale_k, scale_v
    raw = page(allocation, layer, 1)
    real = 4 * 2 * 16
    assert torch.equal(as_dtype(raw[:64], torch.int8).reshape(4, 2, 8), k)
    assert torch.equal(as_dtype(raw[real : real + 32], torch.float32).reshape(4, 2), scale_k)
    assert torch.equal(as_dtype(raw[real + 32 : real + 64], torch.float32).reshape(4, 2), scale_v)


def test_nvfp4_goes_to_flashinfer_with_packed_head_dim() -> None:
    allocation = cpu(models.nvfp4())
    layer = "layers.0.attn"
    assert allocation.layouts[layer] == "flashinfer-nhd"
    view = allocation.views[layer]
    assert tuple(view.shape) == (4, 2, 4, 2, 18) and view.dtype == torch.uint8
    k = pattern((4, 2, 18), torch.uint8, 4)
    view[3, 0] = k
    assert torch.equal(page(allocation, layer, 3)[:144].view(torch.uint8).reshape(4, 2, 18), k)


# -- Mamba, hybrid sharing, MLA, packed ---------------------------------------------------------


def test_mamba_states_lie_at_running_offsets_inside_a_padded_page() -> None:
    allocation = cpu(models.hybrid(blocks=5))
    layer = "layers.0.mamba"
    conv, ssm = allocation.views[layer]
    assert (tuple(conv.shape), conv.dtype) == ((5, 3, 16), torch.bfloat16)
    assert (tuple(ssm.shape), ssm.dtype) == ((5, 2, 4, 8), torch.float32)
    assert conv.stride()[0] == 512 // 2 and ssm.stride()[0] == 512 // 4
    conv_data, ssm_data = pattern((3, 16), torch.bfloat16, 7), pattern((2, 4, 8), torch.float32, 13)
    conv[2], ssm[2] = conv_data, ssm_data
    raw = page(allocation, layer, 2)
    assert torch.equal(as_dtype(raw[:96], torch.bfloat16).reshape(3, 16), conv_data)
    assert torch.equal(as_dtype(raw[96:352], torch.float32).reshape(2, 4, 8), ssm_data)
    assert int(raw[352:].count_nonzero()) == 0
    conv.fill_(-1.1)
    ssm.fill_(-1.1)
    pages = allocation.buffers[0].reshape(5, 512)
    assert bool((pages[:, :352] != 0).all()) and int(pages[:, 352:].count_nonzero()) == 0


def test_layers_of_different_groups_share_one_buffer_page_by_page() -> None:
    allocation = cpu(models.hybrid(blocks=5))
    plan = allocation.plan
    mamba, attn = "layers.0.mamba", "layers.1.attn"
    groups = [g for g in plan.groups if mamba in g.layer_names or attn in g.layer_names]
    assert len(groups) == 2
    assert allocation.placements[mamba].tensor == allocation.placements[attn].tensor == 0
    kv = allocation.views[attn]
    assert kv.stride()[:2] == (16 * 8, 2 * 16 * 8)
    conv, ssm = allocation.views[mamba]
    conv[1] = pattern((3, 16), torch.bfloat16, 3)
    ssm[1] = pattern((2, 4, 8), torch.float32, 8)
    seen = torch.cat(
        [kv[0, 1].contiguous().view(torch.int8).flatten(), kv[1, 1].contiguous().view(torch.int8).flatten()]
    )
    assert torch.equal(seen, page(allocation, attn, 1))
    assert torch.equal(seen, page(allocation, mamba, 1))
    kv[0, 4] = pattern((16, 1, 8), torch.bfloat16, 21)
    assert torch.equal(conv[4].contiguous().view(torch.int8).flatten(), page(allocation, attn, 4)[:96])


def test_mla_layout_bytes() -> None:
    allocation = cpu(models.mla())
    layer = "layers.1.mla"
    view = allocation.views[layer]
    assert (tuple(view.shape), view.dtype) == ((5, 16, 32), torch.bfloat16)
    data = pattern((16, 32), torch.bfloat16, 17)
    view[4] = data
    assert torch.equal(as_dtype(page(allocation, layer, 4), torch.bfloat16).reshape(16, 32), data)


def test_packed_layout_pages_at_offset_plus_block_times_stride() -> None:
    allocation = cpu(models.packed(blocks=4))
    tensors = allocation.plan.workers[0].tensors
    stride = tensors[0].block_stride
    assert len({id(b) for b in allocation.buffers}) == 1
    assert allocation.nbytes == tensors[0].size == 4 * stride
    for index, layer in enumerate(allocation.views):
        place = allocation.placements[layer]
        assert place.block_stride == stride and place.offset == tensors[place.tensor].offset
        view = allocation.views[layer]
        data = pattern(tuple(view.shape[1:]), view.dtype, index + 1)
        view[3] = data
        start = place.offset + 3 * stride
        raw = allocation.buffers[0][start : start + place.content_bytes]
        assert torch.equal(as_dtype(raw, view.dtype).reshape(data.shape), data), layer
    ds = allocation.views["layers.0.ds"]
    assert (tuple(ds.shape), ds.dtype) == ((4, 4, 584), torch.uint8)
    place = allocation.placements["layers.0.ds"]
    tail = allocation.buffers[0][place.offset + 2336 : place.offset + 2880]
    assert int(tail.count_nonzero()) == 0


# -- every layout, byte-exact for every layer and block ------------------------------------------

PLANS: dict[str, Callable[[], Plan]] = {
    "dense": models.dense,
    "padded": models.padded_attention,
    "hybrid": models.hybrid,
    "mla": models.mla,
    "packed": models.packed,
    "split-kv": models.split_kv,
    "per-token-head": models.per_token_head,
    "nvfp4": models.nvfp4,
}


@pytest.mark.parametrize("layout", [None, *ATTENTION_LAYOUTS])
@pytest.mark.parametrize("name", sorted(PLANS))
def test_every_layer_covers_exactly_its_pages(name: str, layout: str | None) -> None:
    plan = PLANS[name]()
    try:
        allocation = kvrules.allocate(plan, "cpu", layout=layout)
    except kvrules.AllocationError as error:
        assert "supports none" in str(error)
        return
    allocation.verify()
    assert_pages_exact(allocation)


# -- property: random geometries -----------------------------------------------------------------

DTYPES = ("bfloat16", "float16", "float32", "int8")


@st.composite
def hybrid_specs(draw: st.DrawFn) -> dict[str, kvrules.KVCacheSpec]:
    block = draw(st.sampled_from([1, 2, 4, 8]))
    heads = draw(st.integers(1, 3))
    head = draw(st.sampled_from([2, 4, 6, 8]))
    dtype = draw(st.sampled_from(DTYPES))
    att = FullAttentionSpec(block_size=block, num_kv_heads=heads, head_size=head, dtype=dtype)
    specs: dict[str, kvrules.KVCacheSpec] = {"l0.attn": att, "l1.attn": att}
    if draw(st.booleans()):
        states = draw(st.integers(1, 3))
        shapes = tuple(
            tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))) for _ in range(states)
        )
        dtypes = tuple(
            sorted(
                (draw(st.sampled_from(DTYPES)) for _ in range(states)), key=lambda d: -to_torch(d).itemsize
            )
        )
        mamba = MambaSpec(block_size=block, shapes=shapes, dtypes=dtypes)
        if mamba.page_size_bytes <= att.page_size_bytes:
            specs["l2.mamba"] = mamba
            specs["l3.mamba"] = mamba
    return specs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=hybrid_specs(), layout=st.sampled_from([None, *ATTENTION_LAYOUTS]), blocks=st.integers(1, 4))
def test_random_geometries_alias_exactly(
    specs: dict[str, kvrules.KVCacheSpec], layout: str | None, blocks: int
) -> None:
    page_bytes = max(s.page_size_bytes for s in specs.values())
    plan = models.plan_of(specs, blocks * len(specs) * page_bytes)
    allocation = kvrules.allocate(plan, "cpu", layout=layout)
    allocation.verify()
    assert_pages_exact(allocation)
