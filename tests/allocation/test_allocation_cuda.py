"""The ``torch`` allocator on a GPU: allocation, views, out-of-memory without a leak."""

from __future__ import annotations

import gc

import alloc_models as models
import pytest
import torch

import kvrules
from kvrules import AllocationError
from kvrules_plugins import torch_allocator

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_allocates_on_cuda_with_exact_views() -> None:
    for plan in (models.hybrid(), models.packed(), models.padded_attention()):
        allocation = kvrules.allocate(plan, "cuda")
        allocation.verify()
        assert all(b.is_cuda and b.dtype == torch.int8 for b in allocation.buffers)
        assert all(int(b.count_nonzero()) == 0 for b in allocation.buffers)
        layer, place = next(iter(allocation.placements.items()))
        views = allocation.views[layer]
        first = views[0] if isinstance(views, tuple) else views
        first.fill_(1)
        buffer = allocation.buffers[place.tensor]
        assert (
            int(buffer[place.page_start(0) : place.page_start(0) + place.content_bytes].count_nonzero()) > 0
        )


def test_cuda_index_out_of_range_is_declined() -> None:
    index = torch.cuda.device_count()
    with pytest.raises(AllocationError, match=rf"cuda:{index} does not exist"):
        kvrules.allocate(models.dense(), f"cuda:{index}")


def test_out_of_memory_frees_what_was_allocated(monkeypatch: pytest.MonkeyPatch) -> None:
    free, _ = torch.cuda.mem_get_info()
    # a probe that over-reports lets the plan reach torch (the free-memory check would refuse it first)
    monkeypatch.setattr(torch_allocator, "free_memory", lambda device: (1 << 50, 1 << 50))
    spec = models.attention(block_size=16, num_kv_heads=8, head_size=128)
    per_layer = free // 3
    plan = models.plan_of({f"l{i}": spec for i in range(4)}, 4 * per_layer)
    gc.collect()
    before = torch.cuda.memory_allocated()
    with pytest.raises(
        AllocationError, match=r"out of memory on 'cuda' \(torch allocator\) making buffer [34] of 4"
    ) as info:
        kvrules.allocate(plan, "cuda")
    assert torch.cuda.memory_allocated() == before  # while the error is still alive
    assert "free of" in str(info.value)
    del info
    gc.collect()
    torch.cuda.empty_cache()
    assert torch.cuda.memory_allocated() == before


def test_meta_and_cuda_views_agree() -> None:
    plan = models.hybrid()
    on_meta, on_cuda = kvrules.allocate(plan, "meta"), kvrules.allocate(plan, "cuda")
    for layer, view in on_meta.views.items():
        meta_views = view if isinstance(view, tuple) else (view,)
        cuda_view = on_cuda.views[layer]
        cuda_views = cuda_view if isinstance(cuda_view, tuple) else (cuda_view,)
        assert [(v.shape, v.stride(), v.storage_offset(), v.dtype) for v in meta_views] == [
            (v.shape, v.stride(), v.storage_offset(), v.dtype) for v in cuda_views
        ]
