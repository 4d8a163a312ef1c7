"""``kvrules allocate``: memory as a fraction or a size, devices, layouts, JSON, errors."""

from __future__ import annotations

import json

import pytest
import torch
from cli_helpers import run_cli

from kvrules.cli.allocate import layout_choice
from kvrules.errors import ConfigError
from kvrules_plugins.torch_allocator import host_memory


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, "allocate", *argv)


def test_allocate_reports_what_was_allocated(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "--example", "issue-43626", "--device", "meta", "--memory", "1GiB", "--max-model-len", "auto"
    )
    assert code == 0, out
    lines = out.splitlines()
    assert lines[:3] == [
        "kvrules allocate: example 'issue-43626' on meta",
        "memory: as given = 1.00 GiB per worker",
        "plan: route unified-page, groups 7, layers 84, num_blocks 38, max concurrency 1.056 at max_model_len 5680",
    ]
    assert lines[3].startswith(
        "allocated worker 0 on meta with the torch allocator: 12 buffers (12 allocation(s)), 1011.75 MiB "
        "(1,060,896,768 bytes) in "
    )
    assert lines[6:] == [
        "  mamba-states    36      model.layers.0.linear_attn     bfloat16 (38, 7, 8192) + bfloat16 (38, 32, 128, 128)",
        "  flash-attn-nhd  48      model.layers.3.self_attn.attn  uint8 (2, 38, 2272, 2, 256)",
        "verify: ok, every view covers exactly its planned pages",
    ]


def test_allocate_on_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "--example", "llama3-8b", "--device", "cpu", "--memory", "64MiB", "--max-model-len", "auto"
    )
    assert code == 0, out
    assert "32 buffers (32 allocation(s)), 64.00 MiB (67,108,864 bytes)" in out
    assert (
        "  flash-attn-nhd  32      model.layers.0.self_attn.attn  bfloat16 (2, 32, 16, 8, 128)"
        in out.splitlines()
    )


def test_a_fraction_of_free_memory(capsys: pytest.CaptureFixture[str]) -> None:
    memory = host_memory()
    if memory is None:
        pytest.skip("this platform does not report free host memory")
    code, out, _ = run(
        capsys,
        "--example",
        "llama3-8b",
        "--device",
        "cpu",
        "--memory",
        "0.005",
        "--max-model-len",
        "auto",
        "--json",
    )
    assert code == 0
    report = json.loads(out)
    free = memory[0]
    assert 0.8 * 0.005 * free <= report["memory"][0] <= 1.2 * 0.005 * free  # free memory moves a little
    assert report["allocation"]["allocated_bytes"] <= report["memory"][0]
    assert report["allocation"]["view_layouts"] == {"flash-attn-nhd": 32}
    assert report["verified"] is True


def test_meta_uses_the_model_files_memory_and_layout_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "--example", "gemma3-27b", "--device", "meta", "--layout", "flashinfer-hnd", "--json"
    )
    assert code == 0
    report = json.loads(out)
    assert report["memory"] == [20 * (1 << 30)]
    assert report["allocation"]["device"] == "meta"
    assert report["allocation"]["view_layouts"] == {"flashinfer-hnd": 62}


def test_errors_exit_2_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--example", "llama3-8b", "--device", "meta", "--memory", "0.9")
    assert code == 2
    assert "--memory 0.9 is a fraction of free memory, but device 'meta' reports none" in err
    code, _, err = run(capsys, "--example", "llama3-8b", "--device", "cpu", "--memory", "1.5")
    assert code == 2 and "--memory '1.5': a fraction of free memory must be in (0, 1]" in err
    code, _, err = run(capsys, "--example", "llama3-8b", "--device", "meta", "--layout", "x")
    assert code == 2 and "unknown view layout 'x'" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_by_default_and_a_clear_error_without_it(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--example", "llama3-8b")
    assert code == 2 and out == ""
    assert err.startswith(
        "kvrules: error: no allocator can allocate on device 'cuda'; asked: torch: CUDA is not"
    )


def test_layout_flag_values() -> None:
    assert layout_choice([]) is None
    assert layout_choice(["flashinfer-nhd"]) == "flashinfer-nhd"
    assert layout_choice(["mamba=mamba-states", "layers.3.attn = flash-attn-hnd"]) == {
        "mamba": "mamba-states",
        "layers.3.attn": "flash-attn-hnd",
    }
    with pytest.raises(ConfigError, match="cannot be combined"):
        layout_choice(["flashinfer-nhd", "mamba=mamba-states"])
