"""Allocation compares the plan with the device's free memory before the first buffer (issue R4).

Every test replaces the probe (``kvrules_plugins.torch_allocator.free_memory`` or
``host_memory``), or points the host probe at a fake ``/proc`` and cgroup tree: nothing here
depends on this machine's size, and nothing allocates more than a few KiB.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import alloc_models as models
import pytest
import torch
from cli_helpers import run_cli

import kvrules
from kvrules import AllocationError, PluginError, get_plugin_manager, hookimpl
from kvrules.allocation import AllocationRequest, Allocator
from kvrules.plugin.registry import AllocatorRegistry
from kvrules.plugin.rules import Check, applies, declines
from kvrules_plugins import torch_allocator
from kvrules_plugins.torch_allocator import TorchAllocator, cgroup_memory, host_memory

GIB = 1 << 30


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes of the buffers the torch allocator makes (a test that expects none fails loudly
    instead of allocating what the probe pretends is not there)."""
    sizes: list[int] = []
    real = TorchAllocator.buffer

    def buffer(self: TorchAllocator, nbytes: int, device: str) -> Any:
        sizes.append(nbytes)
        return real(self, nbytes, device)

    monkeypatch.setattr(TorchAllocator, "buffer", buffer)
    return sizes


def fake_probe(monkeypatch: pytest.MonkeyPatch, free: int, total: int | None = None) -> list[str]:
    """Replace the probe by one reporting ``free`` bytes free (of ``total``); returns the devices asked."""
    asked: list[str] = []

    def probe(device: str) -> tuple[int, int]:
        asked.append(device)
        return free, total if total is not None else 2 * free

    monkeypatch.setattr(torch_allocator, "free_memory", probe)
    return asked


# -- the check -----------------------------------------------------------------------------------


def test_a_plan_larger_than_free_memory_is_refused_before_the_first_buffer(
    monkeypatch: pytest.MonkeyPatch, made: list[int]
) -> None:
    plan = models.dense(layers=4, blocks=6)  # 4 buffers of 1536 bytes
    needed = sum(t.size for t in plan.workers[0].tensors)
    assert needed == 6144
    asked = fake_probe(monkeypatch, needed - 1, 8 * 1024)
    with pytest.raises(AllocationError) as info:
        kvrules.allocate(plan, "cpu")
    assert made == []
    assert asked == ["cpu"]
    assert str(info.value) == (
        "worker 0's plan needs 6.00 KiB (6144 bytes) on 'cpu', but the device has 6.00 KiB (6143 bytes) "
        "free of 8.00 KiB (8192 bytes), as the torch allocator reports; nothing was allocated. Plan "
        "with at most the free memory: `kvrules allocate --memory 0.9` (a fraction of it) or "
        "available_memory of at most 6143 bytes, or free memory on the device first."
    )


def test_a_plan_that_fits_exactly_is_allocated(monkeypatch: pytest.MonkeyPatch, made: list[int]) -> None:
    plan = models.dense(layers=4, blocks=6)
    fake_probe(monkeypatch, 6144)
    allocation = kvrules.allocate(plan, "cpu")
    allocation.verify()
    assert made == [1536] * 4 and allocation.nbytes == 6144


def test_the_check_counts_a_packed_layout_once(monkeypatch: pytest.MonkeyPatch, made: list[int]) -> None:
    plan = models.packed()
    tensors = plan.workers[0].tensors
    assert len(tensors) > 1 and len({t.size for t in tensors}) == 1  # one backing, several views
    fake_probe(monkeypatch, tensors[0].size)
    assert kvrules.allocate(plan, "cpu").nbytes == tensors[0].size
    assert made == [tensors[0].size]


def test_meta_is_never_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch_allocator, "host_memory", lambda: (0, 0))
    assert torch_allocator.free_memory("meta") is None
    assert torch_allocator.free_memory("cpu") == (0, 0)
    plan = models.plan_of({f"l{i}": models.attention() for i in range(4)}, 64 * GIB)
    allocation = kvrules.allocate(plan, "meta")
    assert allocation.nbytes > 60 * GIB


def test_cpu_allocation_asks_the_host_probe(monkeypatch: pytest.MonkeyPatch, made: list[int]) -> None:
    monkeypatch.setattr(torch_allocator, "host_memory", lambda: (1024, 4096))
    with pytest.raises(
        AllocationError, match=r"has 1\.00 KiB \(1024 bytes\) free of 4\.00 KiB \(4096 bytes\)"
    ):
        kvrules.allocate(models.dense(), "cpu")
    assert made == []


def test_the_cli_reports_the_refusal_in_one_line(
    monkeypatch: pytest.MonkeyPatch, made: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's reproducer: 40 GiB asked for on a machine with 24 GiB."""
    fake_probe(monkeypatch, 22 * GIB, 24 * GIB)
    code, out, err = run_cli(
        capsys, "allocate", "--example", "llama3-8b", "--device", "cpu", "--memory", "40GiB"
    )
    assert code == 2 and made == []
    assert "allocated worker" not in out
    assert err.count("\n") == 1 and "Traceback" not in err
    assert re.fullmatch(
        r"kvrules: error: worker 0's plan needs 40\.00 GiB \(42949672960 bytes\) on 'cpu', but the device "
        r"has 22\.00 GiB \(23622320128 bytes\) free of 24\.00 GiB \(25769803776 bytes\), as the torch "
        r"allocator reports; nothing was allocated\. Plan with at most the free memory: `kvrules allocate "
        r"--memory 0\.9` \(a fraction of it\) or available_memory of at most 23622320128 bytes, or free "
        r"memory on the device first\.\n",
        err,
    ), err


def test_the_cli_fraction_uses_the_same_probe(
    monkeypatch: pytest.MonkeyPatch, made: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    fake_probe(monkeypatch, 64 << 20, 128 << 20)
    code, out, _ = run_cli(
        capsys,
        "allocate",
        "--example",
        "llama3-8b",
        "--device",
        "cpu",
        "--memory",
        "0.5",
        "--max-model-len",
        "auto",
    )
    assert code == 0, out
    assert "memory: 0.5 x 64.00 MiB free (of 128.00 MiB) = 32.00 MiB per worker" in out
    assert sum(made) <= 32 << 20


# -- allocators of other plugins -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ReportingAllocator(Allocator):
    """A vendor allocator on device ``vendor`` that reports ``memory`` and takes over ``allocate``."""

    name: str = "test-reporting"
    memory: Any = None
    calls: list[str] = dataclasses.field(default_factory=list)

    def supports(self, device: str) -> Check:
        return applies("vendor device") if device == "vendor" else declines("vendor only")

    def device_memory(self, device: str) -> Any:
        return self.memory

    def allocate(self, request: AllocationRequest) -> tuple[tuple[Any, ...], dict[str, Any]]:
        self.calls.append("allocate")
        raw = [torch.zeros(n, dtype=torch.int8) for n in request.sizes]
        buffers = tuple(raw[i] for i in request.backing)
        return buffers, self.build_views(request, buffers)


class ReportingPlugin:
    name = "test-reporting-plugin"

    def __init__(self, allocator: Allocator) -> None:
        self.allocator = allocator

    @hookimpl
    def kvrules_register_allocators(self, registry: AllocatorRegistry) -> None:
        registry.add(self.allocator)


def allocate_with(allocator: ReportingAllocator) -> kvrules.Allocation:
    pm = get_plugin_manager(autoload=False, plugins=[ReportingPlugin(allocator)])
    return kvrules.allocate(models.dense(), "vendor", plugin_manager=pm)


def test_an_allocator_that_takes_over_allocate_is_checked_too() -> None:
    allocator = ReportingAllocator(memory=(100, 1000))
    with pytest.raises(
        AllocationError, match=r"has 100 B \(100 bytes\) free .* as the test-reporting allocator"
    ):
        allocate_with(allocator)
    assert allocator.calls == []


def test_an_allocator_that_cannot_tell_is_not_checked() -> None:
    allocator = ReportingAllocator(memory=None)
    assert allocate_with(allocator).nbytes == sum(t.size for t in models.dense().workers[0].tensors)
    assert allocator.calls == ["allocate"]


@pytest.mark.parametrize("answer", ["lots", (-1, 0), (1.5, 2), (True, 2), (1, 2, 3), [1 << 40, 1 << 40]])
def test_a_malformed_memory_answer_is_the_allocators_fault(answer: Any) -> None:
    allocator = ReportingAllocator(memory=answer)
    with pytest.raises(
        PluginError, match=r"allocator 'test-reporting' .*answered device_memory\('vendor'\) with"
    ):
        allocate_with(allocator)
    assert allocator.calls == []


# -- the host probe: /proc/meminfo and the cgroup --------------------------------------------------


def fake_host(
    tmp_path: Path,
    *,
    available_kib: int = 20 << 20,
    total_kib: int = 24 << 20,
    cgroup: str = "0::/\n",
    files: dict[str, str] | None = None,
) -> tuple[str, str]:
    """A fake ``/proc`` (meminfo, self/cgroup) and cgroup root holding ``files``."""
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    root.mkdir()
    (proc / "meminfo").write_text(
        f"MemTotal:       {total_kib} kB\nMemFree:         1024 kB\nMemAvailable:   {available_kib} kB\n"
    )
    (proc / "self" / "cgroup").write_text(cgroup)
    for name, text in (files or {}).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(proc), str(root)


def test_host_memory_is_mem_available_without_a_cgroup_limit(tmp_path: Path) -> None:
    proc, root = fake_host(tmp_path, files={"memory.max": "max\n", "memory.current": "123456\n"})
    assert cgroup_memory(proc, root) is None
    assert host_memory(proc, root) == (20 * GIB, 24 * GIB)


def test_host_memory_is_the_cgroup_v2_limit_minus_its_usage_where_lower(tmp_path: Path) -> None:
    proc, root = fake_host(
        tmp_path,
        files={
            "memory.max": f"{8 * GIB}\n",
            "memory.current": f"{3 * GIB}\n",
            "memory.stat": f"anon {2 * GIB}\nfile {GIB}\ninactive_file {GIB // 2}\n",
        },
    )
    # usage less the reclaimable inactive page cache: 3 - 0.5 GiB in use of 8 GiB
    assert cgroup_memory(proc, root) == (8 * GIB - (3 * GIB - GIB // 2), 8 * GIB)
    assert host_memory(proc, root) == (8 * GIB - (3 * GIB - GIB // 2), 8 * GIB)


def test_a_limit_on_a_parent_cgroup_counts(tmp_path: Path) -> None:
    proc, root = fake_host(
        tmp_path,
        cgroup="0::/pod/job\n",
        files={
            "pod/job/memory.max": "max\n",
            "pod/job/memory.current": f"{GIB}\n",
            "pod/memory.max": f"{4 * GIB}\n",
            "pod/memory.current": f"{3 * GIB}\n",
        },
    )
    assert host_memory(proc, root) == (GIB, 4 * GIB)


def test_cgroup_v1_limit_and_usage(tmp_path: Path) -> None:
    proc, root = fake_host(
        tmp_path,
        cgroup="4:memory:/process_api/abc\n3:cpuset:/\n0::/\n",
        files={
            "memory/memory.limit_in_bytes": "9223372036854771712\n",  # v1's "no limit"
            "memory/memory.usage_in_bytes": f"{5 * GIB}\n",
            "memory/process_api/abc/memory.limit_in_bytes": f"{6 * GIB}\n",
            "memory/process_api/abc/memory.usage_in_bytes": f"{2 * GIB}\n",
            "memory/process_api/abc/memory.stat": f"cache {GIB}\ntotal_inactive_file {GIB}\n",
        },
    )
    assert host_memory(proc, root) == (5 * GIB, 6 * GIB)


def test_mem_available_wins_when_lower_than_the_cgroup_headroom(tmp_path: Path) -> None:
    proc, root = fake_host(
        tmp_path, available_kib=1 << 20, files={"memory.max": f"{8 * GIB}\n", "memory.current": "0\n"}
    )
    assert host_memory(proc, root) == (GIB, 8 * GIB)


def test_a_cgroup_over_its_limit_has_nothing_free(tmp_path: Path) -> None:
    proc, root = fake_host(tmp_path, files={"memory.max": f"{GIB}\n", "memory.current": f"{2 * GIB}\n"})
    assert host_memory(proc, root) == (0, GIB)


def test_unreadable_cgroup_files_mean_no_limit(tmp_path: Path) -> None:
    proc, root = fake_host(
        tmp_path, cgroup="garbage\n", files={"memory.max": "lots\n", "memory.current": "\n"}
    )
    assert cgroup_memory(proc, root) is None
    assert host_memory(proc, root) == (20 * GIB, 24 * GIB)


# -- CUDA ----------------------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_plan_larger_than_the_driver_reports_is_refused_before_allocating() -> None:
    free, total = torch.cuda.mem_get_info()
    probed = torch_allocator.free_memory("cuda")
    assert probed is not None and probed[1] == total and probed[0] >= free // 2
    plan = models.plan_of({f"l{i}": models.attention() for i in range(4)}, 2 * probed[0])
    before = torch.cuda.memory_allocated()
    with pytest.raises(
        AllocationError, match=r"on 'cuda', but the device has .* free of .*nothing was allocated"
    ):
        kvrules.allocate(plan, "cuda")
    assert torch.cuda.memory_allocated() == before
