"""The packaged GPU catalog: every entry sourced, names found, the figure used stated."""

from __future__ import annotations

import pytest

from kvrules.errors import ConfigError
from kvrules.sizing.gpus import catalog, find_gpu


def test_every_entry_has_a_source_for_each_figure_it_gives() -> None:
    assert len(catalog()) >= 10
    for gpu in catalog():
        assert gpu.nominal_source.startswith("https://"), gpu.name
        assert (gpu.driver_bytes is None) == (gpu.driver_source is None), gpu.name
        assert gpu.arch.startswith(("sm", "gfx")) and gpu.arch_source.startswith("https://"), gpu.name


def test_driver_figure_used_when_known() -> None:
    h100 = find_gpu("h100")
    # nvidia-smi's 81559 MiB, as quoted in the catalog's source
    assert h100.memory_bytes == 81559 * 1024 * 1024
    assert h100.memory_kind == "driver"
    # the driver's total differs from the nominal 80 GB by several percent
    assert h100.memory_bytes / h100.nominal_bytes == pytest.approx(1.069, abs=0.001)


def test_nominal_figure_used_otherwise() -> None:
    mi300x = find_gpu("MI300X")
    assert mi300x.memory_kind == "nominal"
    assert mi300x.memory_bytes == 192 * 10**9


def test_unknown_name_names_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"'H900'.*--gpu-memory"):
        find_gpu("H900")
