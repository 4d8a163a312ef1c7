"""Telling vLLM's three planning lines apart by their seam, and refusing one kvrules does not
know: stand-in modules with each line's function signatures and classes (no vLLM needed)."""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
import vllm_standins as vs

import kvrules
from kvrules.integrations import vllm as kv_vllm
from kvrules.integrations import vllm_lines
from kvrules.integrations.vllm_lines import UnknownVllmSeamError
from kvrules.integrations.vllm_specs import VllmNotInstalledError


def fake(monkeypatch: pytest.MonkeyPatch, line: str) -> dict[str, Any]:
    modules, _ = vs.fake_vllm_modules(line)
    monkeypatch.setitem(sys.modules, vllm_lines.BUILDER_MODULE, None)
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return modules


@pytest.fixture(autouse=True)
def nothing_installed() -> Iterator[None]:
    kv_vllm.uninstall()
    yield
    kv_vllm.uninstall()


@pytest.mark.parametrize(
    ("line", "releases", "preset"),
    [("0.28", "0.27-0.28", "vllm-0.28"), ("0.32", "0.29-0.32", "vllm-0.33"), ("0.33", "0.33+", "vllm-0.33")],
)
def test_each_line_is_told_by_its_seam(
    monkeypatch: pytest.MonkeyPatch, line: str, releases: str, preset: str
) -> None:
    fake(monkeypatch, line)
    found = vllm_lines.detect()
    assert (found.name, found.releases, found.preset) == (line, releases, preset)


def test_the_028_line_is_not_taken_for_032_by_its_shared_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """0.28 also has get_kv_cache_config_from_groups(vllm_config, kv_cache_groups, available_memory):
    what tells the lines apart is _pool_bytes_per_block and the KVCacheTensor fields."""
    modules = fake(monkeypatch, "0.28")
    utils = modules[vllm_lines.UTILS_MODULE]
    utils._pool_bytes_per_block = vs.seam_function(
        "_pool_bytes_per_block", ("vllm_config", "kv_cache_groups"), []
    )
    assert vllm_lines.detect().name == "0.28"  # 0.28's KVCacheTensor(size, shared_by) decides


def test_a_seam_kvrules_does_not_know_is_refused_naming_what_was_looked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    modules = fake(monkeypatch, "0.32")
    utils = modules[vllm_lines.UTILS_MODULE]
    # a later release renames the placement function's memory argument
    utils.get_kv_cache_config_from_groups = vs.seam_function(
        "get_kv_cache_config_from_groups", ("vllm_config", "kv_cache_groups", "num_blocks"), []
    )
    with pytest.raises(UnknownVllmSeamError) as info:
        vllm_lines.detect()
    text = str(info.value)
    assert "get_kv_cache_config_from_groups(vllm_config, kv_cache_groups, available_memory)" in text
    assert "as 0.32: get_kv_cache_config_from_groups(vllm_config, kv_cache_groups, num_blocks)" in text
    assert "vLLM's own planner" in text
    assert isinstance(info.value, kvrules.KVRulesError)


def test_install_raises_on_an_unknown_seam_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    modules = fake(monkeypatch, "0.32")
    utils = modules[vllm_lines.UTILS_MODULE]
    del utils._pool_bytes_per_block
    before = dict(vars(utils))
    with pytest.raises(UnknownVllmSeamError, match="no _pool_bytes_per_block"):
        kv_vllm.install()
    assert dict(vars(utils)) == before and kv_vllm.installed_strategies() is None


def test_general_plugin_logs_one_error_on_an_unknown_seam_and_leaves_vllm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    modules = fake(monkeypatch, "0.32")
    utils = modules[vllm_lines.UTILS_MODULE]
    del utils._pool_bytes_per_block
    before = dict(vars(utils))
    monkeypatch.setenv(kv_vllm.STRATEGIES_ENV, "auto")
    with structlog.testing.capture_logs() as logs:
        kv_vllm.vllm_general_plugin()
    assert [(e["event"], e["log_level"]) for e in logs] == [("kvrules.vllm.not_installed", "error")]
    assert "Looked for" in logs[0]["reason"] and logs[0]["error"] == "UnknownVllmSeamError"
    assert dict(vars(utils)) == before
    monkeypatch.setenv("KVRULES_VLLM_STRICT", "yes")
    with pytest.raises(UnknownVllmSeamError):
        kv_vllm.vllm_general_plugin()


def test_without_vllm_detection_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, vllm_lines.UTILS_MODULE, None)
    with pytest.raises(VllmNotInstalledError, match=r"kvrules\[vllm\]"):
        vllm_lines.detect()


def test_unset_strategies_change_nothing_on_any_line(monkeypatch: pytest.MonkeyPatch) -> None:
    for line in ("0.28", "0.32"):
        modules = fake(monkeypatch, line)
        utils = modules[vllm_lines.UTILS_MODULE]
        before = dict(vars(utils))
        monkeypatch.delenv(kv_vllm.STRATEGIES_ENV, raising=False)
        kv_vllm.vllm_general_plugin()
        assert dict(vars(utils)) == before


def test_install_with_no_set_selects_the_lines_preset(monkeypatch: pytest.MonkeyPatch) -> None:
    fake(monkeypatch, "0.32")
    kv_vllm.install()
    assert kv_vllm.installed_strategies() == "vllm-0.33"
    kv_vllm.install("auto,min-padding")
    assert kv_vllm.installed_strategies() == "vllm-0.33+min-padding"
    kv_vllm.uninstall()
    fake(monkeypatch, "0.28")
    kv_vllm.install()
    assert kv_vllm.installed_strategies() == "vllm-0.28"


def test_the_lines_table_documents_every_seam() -> None:
    text = vllm_lines.looked_for()
    for expect in (*vllm_lines.SEAM_028, *vllm_lines.SEAM_032, *vllm_lines.SEAM_033):
        assert str(expect) in text
    assert set(vllm_lines.LINES) == {"0.28", "0.32", "0.33"}


def test_a_signature_that_cannot_be_read_is_a_mismatch_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    modules = fake(monkeypatch, "0.32")
    utils = modules[vllm_lines.UTILS_MODULE]
    utils.get_kv_cache_groups = types.SimpleNamespace()  # not callable
    with pytest.raises(UnknownVllmSeamError, match="no get_kv_cache_groups"):
        vllm_lines.detect()
    assert inspect.signature(modules[vllm_lines.UTILS_MODULE]._pool_bytes_per_block)
