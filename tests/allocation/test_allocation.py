"""``kvrules.allocate``: dispatch, buffers, view-layout choice, decisions, errors, plugins."""

from __future__ import annotations

import dataclasses
import gc
import re
import subprocess
import sys
import types
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import alloc_models as models
import pytest
import torch

import kvrules
from kvrules import (
    Allocation,
    AllocationError,
    KVRulesPluginManager,
    PluginError,
    get_plugin_manager,
    hookimpl,
)
from kvrules.allocation import AllocationRequest, Allocator, Placement, ViewLayout
from kvrules.plugin.registry import AllocatorRegistry
from kvrules.plugin.rules import Check, applies, declines
from kvrules_plugins import torch_allocator
from kvrules_plugins.torch_allocator import TorchAllocator, host_memory

DOCS = Path(__file__).resolve().parents[2] / "docs" / "allocation.md"


# -- buffers and views ---------------------------------------------------------------------------


def test_one_zeroed_int8_buffer_per_tensor_shared_by_its_layers() -> None:
    plan = models.hybrid(blocks=5)
    allocation = kvrules.allocate(plan, "cpu")
    tensors = plan.workers[0].tensors
    assert len(allocation.buffers) == len(tensors) == 2
    for buf, tensor in zip(allocation.buffers, tensors, strict=True):
        assert buf.dtype == torch.int8 and buf.numel() == tensor.size and int(buf.count_nonzero()) == 0
    assert set(allocation.views) == {n for t in tensors for n in t.shared_by}
    assert list(allocation.views) == list(plan.specs)
    assert allocation.nbytes == sum(t.size for t in tensors)
    assert allocation.num_blocks == plan.num_blocks == 5


def test_packed_layout_is_one_allocation_made_once() -> None:
    plan = models.packed(blocks=4)
    allocation = kvrules.allocate(plan, "cpu")
    assert len(allocation.buffers) == len(plan.workers[0].tensors) > 1
    assert all(b is allocation.buffers[0] for b in allocation.buffers)
    assert allocation.nbytes == plan.workers[0].tensors[0].size
    assert allocation.summary()["allocations"] == 1


def test_views_have_the_spec_dtype() -> None:
    allocation = kvrules.allocate(models.hybrid(), "cpu")
    assert allocation.views["layers.1.attn"].dtype == torch.bfloat16
    assert [v.dtype for v in allocation.views["layers.0.mamba"]] == [torch.bfloat16, torch.float32]


def test_meta_allocates_a_plan_larger_than_this_machine() -> None:
    memory = host_memory()
    total = memory[1] if memory else 1 << 40
    spec = models.attention(block_size=16, num_kv_heads=8, head_size=128)
    plan = models.plan_of({f"l{i}": spec for i in range(32)}, 4 * total)
    allocation = kvrules.allocate(plan, "meta")
    allocation.verify()
    assert allocation.nbytes > total
    assert all(b.device.type == "meta" for b in allocation.buffers)
    assert allocation.views["l0"].shape[1] == plan.num_blocks


def test_pipeline_worker_gets_only_its_layers() -> None:
    plan = models.pipeline()
    allocation = kvrules.allocate(plan, "cpu", worker=1)
    assert set(allocation.views) == {"layers.2.attn", "layers.3.attn"}
    with pytest.raises(
        AllocationError, match=r"worker=2 is not a worker of this plan; it has workers 0\.\.1"
    ):
        kvrules.allocate(plan, "cpu", worker=2)


def test_a_torch_device_object_is_accepted() -> None:
    allocation = kvrules.allocate(models.dense(), torch.device("cpu"))
    assert allocation.device == "cpu"


def test_a_plan_read_back_from_json_allocates_the_same_views() -> None:
    plan = models.hybrid()
    again = kvrules.Plan.from_dict(plan.to_dict())
    a, b = kvrules.allocate(plan, "meta"), kvrules.allocate(again, "meta")
    assert {
        n: [tuple(v.shape) for v in (x if isinstance(x, tuple) else (x,))] for n, x in a.views.items()
    } == {n: [tuple(v.shape) for v in (x if isinstance(x, tuple) else (x,))] for n, x in b.views.items()}


# -- view-layout choice and decisions ------------------------------------------------------------


def test_defaults_per_spec_type_and_decisions() -> None:
    allocation = kvrules.allocate(models.hybrid(), "cpu")
    assert allocation.layouts == {
        "layers.0.mamba": "mamba-states",
        "layers.1.attn": "flash-attn-nhd",
        "layers.2.mamba": "mamba-states",
        "layers.3.attn": "flash-attn-nhd",
    }
    decisions = allocation.decisions
    assert all(d.stage == "allocate" for d in decisions)
    applied = [(d.rule, d.layer) for d in decisions if d.outcome == "applied"]
    assert ("mamba-states", "layers.0.mamba") in applied and ("flash-attn-nhd", "layers.1.attn") in applied
    assert ("torch", None) in applied
    declined = [d for d in decisions if d.outcome == "declined"]
    assert declined and {d.layer for d in declined} == {"layers.0.mamba"}
    assert decisions[-1].rule == "torch" and "2 buffers" in decisions[-1].reason


def test_decisions_are_logged_when_structlog_is_configured() -> None:
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        allocation = kvrules.allocate(models.dense(), "cpu")
    events = [e for e in logs if e["event"] == "kvrules.decision" and e["stage"] == "allocate"]
    assert len(events) == len(allocation.decisions)
    assert events[0] == {
        "event": "kvrules.decision",
        "log_level": "debug",
        **allocation.decisions[0].to_dict(),
    }


def test_a_layout_name_applies_to_every_layer_it_supports() -> None:
    allocation = kvrules.allocate(models.hybrid(), "cpu", layout="flashinfer-hnd")
    assert allocation.layouts["layers.1.attn"] == "flashinfer-hnd"
    assert allocation.layouts["layers.0.mamba"] == "mamba-states"
    assert tuple(allocation.views["layers.1.attn"].shape) == (5, 2, 16, 1, 8)


def test_a_layout_mapping_by_layer_or_spec_type() -> None:
    allocation = kvrules.allocate(
        models.dense(), "cpu", layout={"layers.0.attn": "flashinfer-nhd", "full_attention": "flash-attn-hnd"}
    )
    assert allocation.layouts == {"layers.0.attn": "flashinfer-nhd", "layers.1.attn": "flash-attn-hnd"}


def test_layout_errors_name_the_problem() -> None:
    plan = models.hybrid()
    with pytest.raises(AllocationError, match=r"unknown view layout 'nope'; available: flash-attn-hnd, "):
        kvrules.allocate(plan, "cpu", layout="nope")
    with pytest.raises(
        AllocationError,
        match=r"'mla' supports none of this worker's layers \(spec types full_attention, mamba\)",
    ):
        kvrules.allocate(plan, "cpu", layout="mla")
    with pytest.raises(
        AllocationError, match=r"layer 'layers.0.mamba' \(mamba\): view layout 'mla' was asked"
    ):
        kvrules.allocate(plan, "cpu", layout={"mamba": "mla"})
    with pytest.raises(AllocationError, match=r"key 'layers.9' is neither a layer of this worker nor"):
        kvrules.allocate(plan, "cpu", layout={"layers.9": "mla"})
    with pytest.raises(AllocationError, match=r"K and V head sizes differ \(8 vs 4\); use 'split-kv'"):
        kvrules.allocate(models.split_kv(), "cpu", layout={"full_attention": "flash-attn-nhd"})


# -- devices -------------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_without_a_gpu_is_a_clear_error() -> None:
    with pytest.raises(AllocationError) as info:
        kvrules.allocate(models.dense(), "cuda")
    assert str(info.value).startswith(
        "no allocator can allocate on device 'cuda'; asked: torch: CUDA is not available"
    )
    assert "use device='cpu', or 'meta' for a dry run" in str(info.value)


def test_unknown_device_and_unknown_allocator() -> None:
    with pytest.raises(AllocationError, match=r"device 'tpu' is not one of cuda, cuda:N, cpu, meta"):
        kvrules.allocate(models.dense(), "tpu")
    with pytest.raises(AllocationError, match=r"unknown allocator 'npu'; available: torch"):
        kvrules.allocate(models.dense(), "cpu", allocator="npu")


def test_importing_the_plugin_and_allocating_on_cpu_never_touches_cuda() -> None:
    code = (
        "import sys, kvrules, kvrules_plugins.torch_allocator\n"
        "kvrules.get_plugin_manager().registries\n"
        "print('torch imported:', 'torch' in sys.modules)\n"
        "s = {'a': kvrules.FullAttentionSpec(16, num_kv_heads=2, head_size=8, dtype='bfloat16')}\n"
        "p = kvrules.plan(s, 1 << 20, kvrules.EngineConfig(max_model_len=64))\n"
        "kvrules.allocate(p, 'cpu').verify()\n"
        "import torch\n"
        "print('cuda initialised:', torch.cuda.is_initialized())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = [
        line for line in out.stdout.splitlines() if line.startswith(("torch imported", "cuda initialised"))
    ]
    assert lines == ["torch imported: False", "cuda initialised: False"]


# -- failures free what was allocated ------------------------------------------------------------


@dataclass(frozen=True)
class FailingAllocator(TorchAllocator):
    """The torch allocator, but allocation number ``fail_at`` (1-based) raises ``error``."""

    name: str = "test-failing"
    fail_at: int = 2
    error: str = "oom"
    made: list[Any] = dataclasses.field(default_factory=list)

    def supports(self, device: str) -> Check:
        return applies("test device") if device == "cpu" else declines("cpu only")

    def buffer(self, nbytes: int, device: str) -> Any:
        if len(self.made) + 1 == self.fail_at:
            if self.error == "oom":
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            raise ValueError("driver exploded")
        buf = super().buffer(nbytes, device)
        self.made.append(weakref.ref(buf))
        return buf


class FailingPlugin:
    name = "test-failing-plugin"

    def __init__(self, allocator: Allocator) -> None:
        self.allocator = allocator

    @hookimpl
    def kvrules_register_allocators(self, registry: AllocatorRegistry) -> None:
        registry.add(self.allocator)


def _alive(refs: list[Any]) -> int:
    gc.collect()
    return sum(ref() is not None for ref in refs)


@pytest.mark.parametrize("fail_at", [1, 2, 4])
def test_out_of_memory_on_the_nth_buffer_frees_the_others(fail_at: int) -> None:
    plan = models.dense(layers=4, blocks=6)
    allocator = FailingAllocator(fail_at=fail_at)
    pm = get_plugin_manager(autoload=False, plugins=[FailingPlugin(allocator)])
    with pytest.raises(AllocationError) as info:
        kvrules.allocate(plan, "cpu", allocator="test-failing", plugin_manager=pm)
    assert len(allocator.made) == fail_at - 1
    assert _alive(allocator.made) == 0  # freed while the error (and its traceback) is still alive
    message = str(info.value)
    assert re.search(
        rf"out of memory on 'cpu' \(test-failing allocator\) making buffer {fail_at} of 4 \(1536 bytes, for "
        r"layers\.\d\.attn\): worker 0's plan requests 6\.00 KiB \(6144 bytes\) in 4 buffers; the device had "
        rf".* free of .* when allocation started\. The {(fail_at - 1) * 1536} bytes already allocated were freed\.",
        message,
    ), message
    assert isinstance(info.value.__cause__, torch.OutOfMemoryError)


def test_any_other_failure_frees_too_and_names_the_allocator() -> None:
    allocator = FailingAllocator(fail_at=3, error="other")
    pm = get_plugin_manager(autoload=False, plugins=[FailingPlugin(allocator)])
    with pytest.raises(
        PluginError,
        match=r"allocator 'test-failing' \(plugin 'test-failing-plugin' \(registered in-process\)\) raised ValueError",
    ):
        kvrules.allocate(models.dense(layers=4), "cpu", allocator="test-failing", plugin_manager=pm)
    assert _alive(allocator.made) == 0


def test_a_real_cpu_out_of_memory_is_an_allocation_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # a probe that cannot tell lets the plan reach torch (the free-memory check would refuse it first)
    monkeypatch.setattr(torch_allocator, "free_memory", lambda device: None)
    spec = models.attention(block_size=16, num_kv_heads=8, head_size=128)
    plan = models.plan_of({"a": spec}, 1 << 60)
    with pytest.raises(
        AllocationError, match=r"out of memory on 'cpu' \(torch allocator\) making buffer 1 of 1"
    ):
        kvrules.allocate(plan, "cpu")


# -- plugins: a vendor allocator and view layout -------------------------------------------------


@dataclass(frozen=True)
class KFirstLayout(ViewLayout):
    """A test backend: K then V of each page as two (num_blocks, heads, block_size, head_size) views."""

    def supports(self, spec: kvrules.KVCacheSpec) -> Check:
        if isinstance(spec, kvrules.FullAttentionSpec) and spec.head_size_v == spec.head_size:
            return applies("full attention, K and V heads-first")
        return declines("only full attention")

    def build(self, raw: Any, place: Placement) -> Any:
        spec = place.spec
        assert isinstance(spec, kvrules.FullAttentionSpec)
        bs, heads, dim = spec.block_size, spec.num_kv_heads, spec.head_size
        typed = raw.view(torch.bfloat16)
        page = place.block_stride // 2
        shape, stride = (place.num_blocks, heads, bs, dim), (page, bs * dim, dim, 1)
        half = bs * heads * dim
        return tuple(torch.as_strided(typed, shape, stride, place.offset // 2 + i * half) for i in (0, 1))


@dataclass(frozen=True)
class CountingAllocator(TorchAllocator):
    """Allocates on the host for the device name ``counting``."""

    name: str = "counting"
    priority: int = 10

    def supports(self, device: str) -> Check:
        return applies("the counting device") if device == "counting" else declines("only 'counting'")

    def buffer(self, nbytes: int, device: str) -> Any:
        return super().buffer(nbytes, "cpu")


class VendorPlugin:
    name = "test-vendor"

    @hookimpl
    def kvrules_register_allocators(self, registry: AllocatorRegistry) -> None:
        registry.add(CountingAllocator())
        registry.add_view_layout(KFirstLayout(name="k-first", priority=500, default=False))


@pytest.mark.kvrules_pm(autoload=False, plugins=[VendorPlugin()])
def test_a_vendor_allocator_and_view_layout(kvrules_pm: KVRulesPluginManager) -> None:
    pm = kvrules_pm
    plan = models.dense()
    allocation = kvrules.allocate(plan, "counting", layout="k-first", plugin_manager=pm)
    allocation.verify()
    assert allocation.allocator == "counting" and allocation.layouts["layers.0.attn"] == "k-first"
    assert kvrules.allocate(plan, "cpu", plugin_manager=pm).layouts["layers.0.attn"] == "flash-attn-nhd"
    declined = [d for d in allocation.decisions if d.outcome == "declined"]
    assert [(d.rule, d.reason) for d in declined] == []
    on_cpu = kvrules.allocate(plan, "cpu", plugin_manager=pm)
    assert [(d.rule, d.outcome) for d in on_cpu.decisions if d.layer is None][:2] == [
        ("counting", "declined"),
        ("torch", "applied"),
    ]


def test_duplicate_view_layout_names_name_both_providers() -> None:
    class Clash:
        name = "test-clash"

        @hookimpl
        def kvrules_register_allocators(self, registry: AllocatorRegistry) -> None:
            registry.add_view_layout(KFirstLayout(name="flash-attn-nhd"))

    with pytest.raises(
        PluginError, match=r"view layout 'flash-attn-nhd' is registered twice: by plugin 'torch-allocator'"
    ):
        get_plugin_manager(autoload=False, plugins=[Clash()]).registries  # noqa: B018


def test_faulty_allocators_are_reported_by_name() -> None:
    @dataclass(frozen=True)
    class Short(TorchAllocator):
        name: str = "short"
        priority: int = 100

        def allocate(self, request: AllocationRequest) -> tuple[tuple[Any, ...], dict[str, Any]]:
            buffers, views = super().allocate(request)
            return buffers[:1], views

    class NotAnAllocator:
        name = "not-an-allocator"
        priority = 200

    class Plugin:
        name = "test-faulty"

        def __init__(self, obj: Any) -> None:
            self.obj = obj

        @hookimpl
        def kvrules_register_allocators(self, registry: AllocatorRegistry) -> None:
            registry.add(self.obj)

    plan = models.dense()
    pm = get_plugin_manager(autoload=False, plugins=[Plugin(Short())])
    with pytest.raises(
        PluginError,
        match=r"allocator 'short' \(plugin 'test-faulty' \(registered in-process\)\) returned 1 buffers for 2 tensors",
    ):
        kvrules.allocate(plan, "cpu", plugin_manager=pm)
    pm = get_plugin_manager(autoload=False, plugins=[Plugin(NotAnAllocator())])
    with pytest.raises(
        PluginError,
        match=r"plugin 'test-faulty' \(registered in-process\) registered 'not-an-allocator' \(NotAnAllocator\) "
        r"as an allocator, but it does not derive from kvrules.plugin.Allocator",
    ):
        kvrules.allocate(plan, "cpu", plugin_manager=pm)


# -- verify() catches broken views ---------------------------------------------------------------


def _with_view(allocation: Allocation, layer: str, view: Any) -> Allocation:
    return dataclasses.replace(allocation, views={**allocation.views, layer: view})


def test_verify_rejects_views_that_miss_or_overlap_their_pages() -> None:
    allocation = kvrules.allocate(models.hybrid(), "cpu")
    allocation.verify()
    conv, ssm = allocation.views["layers.0.mamba"]
    kv = allocation.views["layers.1.attn"]
    typed = allocation.buffers[0].view(torch.bfloat16)
    cases = {
        r"views cover byte 0 more than once": ("layers.0.mamba", (conv, conv, ssm)),
        r"leave bytes \[96, 352\) uncovered": ("layers.0.mamba", (conv,)),
        r"leave bytes \[256, 512\) uncovered": ("layers.1.attn", kv[:1]),
        r"has no dimension of 5 blocks stepping 512 bytes": ("layers.1.attn", kv[:, :4]),
        r"is not a view of buffer 0": ("layers.0.mamba", (conv.clone(), ssm)),
        r"views cover byte 128 more than once": (
            "layers.1.attn",
            torch.as_strided(typed, kv.shape, (64, *kv.stride()[1:])),
        ),
        r"leave bytes \[8, 16\) uncovered": ("layers.1.attn", kv[..., :4]),
    }
    for pattern, (layer, view) in cases.items():
        with pytest.raises(AllocationError, match=pattern):
            _with_view(allocation, layer, view).verify()


def test_verify_rejects_a_view_reaching_past_its_buffer() -> None:
    allocation = kvrules.allocate(models.dense(layers=2, blocks=6), "cpu")
    other = allocation.buffers[0]
    spec = allocation.placements["layers.1.attn"].spec
    bigger = dataclasses.replace(allocation, buffers=(other, other[: spec.page_size_bytes * 3]))
    with pytest.raises(AllocationError, match=r"spans bytes \[0, 1536\) outside buffer 1 of 768 bytes"):
        _with_view(bigger, "layers.1.attn", allocation.views["layers.0.attn"]).verify()


# -- the documented plugin example runs ----------------------------------------------------------


def test_the_plugin_example_in_the_docs_runs() -> None:
    text = DOCS.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    example = next(b for b in blocks if "kvrules_register_allocators" in b)
    module = types.ModuleType("docs_allocation_example")
    sys.modules[module.__name__] = module
    try:
        exec(compile(example, str(DOCS), "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    assert module.allocation.layouts == {"layer.0": "paired-hnd", "layer.1": "paired-hnd"}


def test_without_the_builtin_plugin_errors_say_what_is_missing() -> None:
    pm = get_plugin_manager(autoload=False, blocked=["torch-allocator"])
    with pytest.raises(
        AllocationError,
        match=r"no view layout supports layer 'layers.0.attn' \(spec type 'full_attention'\); asked: no default "
        r"view layout is registered\. Register one with registry.add_view_layout",
    ):
        kvrules.allocate(models.dense(), "cpu", plugin_manager=pm)
    pm = get_plugin_manager(autoload=False, blocked=["torch-allocator"], plugins=[VendorPlugin()])
    with pytest.raises(
        AllocationError, match=r"no allocator can allocate on device 'cpu'; asked: counting: only"
    ):
        kvrules.allocate(models.dense(), "cpu", layout="k-first", plugin_manager=pm)


def test_a_view_that_fails_verification_names_the_view_layout_that_built_it() -> None:
    allocation = kvrules.allocate(models.hybrid(), "cpu")
    kv = allocation.views["layers.1.attn"]
    layout = allocation.layouts["layers.1.attn"]
    with pytest.raises(
        AllocationError, match=rf"stepping 512 bytes.*\(views built by view layout '{layout}'\)"
    ):
        _with_view(allocation, "layers.1.attn", kv[:, :4]).verify()
