"""kvrules inside vLLM 0.29-0.32: the three module functions of ``kv_cache_utils``.

On this line vLLM's Core (``get_kv_cache_configs``) keeps merging the workers' specs, the
sliding-window ``extra_retained_tokens``, projecting groups onto workers, the
``num_gpu_blocks_override``, the null block, auto-fit, the memory check, convergence on the
smallest block count and ``kv_tp_replicas``. Its whole planning seam is three module functions,
which :func:`kvrules.integrations.vllm.install` replaces with the ones here:

* :func:`get_kv_cache_groups` ``(vllm_config, kv_cache_spec)``: kvrules' groups (the same stage
  functions as vLLM 0.33's builder, :func:`kvrules.integrations.vllm033.answer_groups`), then
  vLLM's own EAGLE annotation (``_annotate_eagle_groups``) on the route where vLLM annotates
  (``unified-page``), as kvrules has no annotation of its own for this line;
* :func:`_pool_bytes_per_block` ``(vllm_config, kv_cache_groups)``: the bytes one block costs in
  the backing (groups held in host memory left out, as vLLM does);
* :func:`get_kv_cache_config_from_groups` ``(vllm_config, kv_cache_groups, available_memory)``:
  ``available_memory // bytes per block`` blocks, replaced by ``num_gpu_blocks_override`` when it
  is set (both as vLLM does), placed by kvrules' layout stage on one backing of the 0.33 form,
  with ``prefix_cache_retention_interval`` copied from the cache config.

Each answers through :func:`kvrules.integrations.vllm_fallback.answer`: where kvrules cannot plan,
vLLM's own function (the one replaced) answers for those layers. The strategy set is the one
``install()`` selected (``auto``: ``vllm-0.33``, which reproduces this line). Importing this
module never imports vLLM.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kvrules.integrations import vllm033
from kvrules.integrations import vllm_fallback as fallback
from kvrules.integrations.vllm_config import config_value
from kvrules.integrations.vllm_lines import UTILS_MODULE
from kvrules.integrations.vllm_patches import Patches

#: the line this module answers
LINE = "0.32"
#: the route on which vLLM 0.32 annotates EAGLE groups (its shortcuts and packed path return first)
ANNOTATED_ROUTE = "unified-page"

T = TypeVar("T")
_patches: Patches | None = None


def bind(patches: Patches | None) -> None:
    """The replacements that hold vLLM's own functions (``None``: not installed)."""
    global _patches
    _patches = patches


def _vllm(name: str) -> Callable[..., Any]:
    """vLLM's own function ``name`` (the one :func:`kvrules.integrations.vllm.install` replaced,
    else the module's attribute as it is)."""
    if _patches is not None:
        try:
            return _patches.original(name)
        except KeyError:
            pass
    fn: Callable[..., Any] = getattr(importlib.import_module(UTILS_MODULE), name)
    return fn


# -- the answers -----------------------------------------------------------------------------
def annotate_eagle(vllm_config: Any, kv_cache_spec: dict[str, Any], groups: list[Any]) -> None:
    """vLLM 0.32's own EAGLE annotation of ``groups`` (in place), and its warning, where this vLLM
    has them (``_annotate_eagle_groups``, ``_uses_trailing_mtp_layers``,
    ``_warn_if_unannotated_eagle_mamba``)."""
    utils = importlib.import_module(UTILS_MODULE)
    annotate = getattr(utils, "_annotate_eagle_groups", None)
    trailing = getattr(utils, "_uses_trailing_mtp_layers", None)
    if annotate is None or trailing is None:
        return
    annotate(vllm_config, kv_cache_spec, groups, use_trailing_layer_fallback=trailing(vllm_config))
    warn = getattr(utils, "_warn_if_unannotated_eagle_mamba", None)
    if warn is not None:
        warn(vllm_config, groups)


def kvrules_groups(vllm_config: Any, kv_cache_spec: dict[str, Any]) -> list[Any]:
    """kvrules' answer to ``get_kv_cache_groups`` (the module docstring)."""
    answer = vllm033.answer_groups(vllm033.state(), vllm_config, kv_cache_spec)
    kv_cache_spec.update(answer.replaced)
    groups = answer.groups
    if answer.route == ANNOTATED_ROUTE and not any(g.is_eagle_group for g in groups):
        annotate_eagle(vllm_config, kv_cache_spec, groups)
    return groups


def _device_groups(kv_cache_groups: Sequence[Any]) -> list[Any]:
    return [g for g in kv_cache_groups if not getattr(g, "host_resident", False)]


def kvrules_bytes_per_block(vllm_config: Any, kv_cache_groups: list[Any]) -> int:
    """kvrules' answer to ``_pool_bytes_per_block`` (0 for groups without layers, as vLLM's
    layer-outer sum gives)."""
    found = vllm033.pool_bytes_per_block(vllm033.state(), vllm_config, _device_groups(kv_cache_groups))
    return 0 if found is None else found


def blocks_for(vllm_config: Any, available_memory: int, bytes_per_block: int) -> int:
    """vLLM's block count for ``available_memory``: ``available_memory // bytes_per_block``,
    replaced by ``cache_config.num_gpu_blocks_override`` when that is set."""
    override = config_value(vllm_config, "cache_config.num_gpu_blocks_override")
    if override is not None:
        return int(override)
    return int(available_memory) // bytes_per_block if bytes_per_block else 0


def kvrules_config(vllm_config: Any, kv_cache_groups: list[Any], available_memory: int) -> Any:
    """kvrules' answer to ``get_kv_cache_config_from_groups`` (the module docstring)."""
    st = vllm033.state()
    vllm033.refuse_unplanned(vllm_config)
    if not kv_cache_groups:
        return vllm033.get_kv_cache_config_from_groups(st, vllm_config, kv_cache_groups, 1)
    num_blocks = blocks_for(
        vllm_config, available_memory, kvrules_bytes_per_block(vllm_config, kv_cache_groups)
    )
    return vllm033.get_kv_cache_config_from_groups(st, vllm_config, kv_cache_groups, num_blocks)


# -- the drop-ins (vLLM 0.32's signatures) -----------------------------------------------------
def _answer(kind: fallback.Kind, name: str, ours: Callable[..., T], vllm_config: Any, *args: Any) -> T:
    """``ours(vllm_config, *args)`` through the fallback, vLLM's own function ``name`` answering
    where kvrules cannot; the layers are those of ``args[0]`` (the specs, or the groups placed)."""
    layers = args[0] if kind == fallback.GROUPING else vllm033.group_layers(args[0])
    found: T = fallback.answer(
        kind, name, LINE, layers, lambda: ours(vllm_config, *args), lambda: _vllm(name)(vllm_config, *args)
    )
    return found


def get_kv_cache_groups(vllm_config: Any, kv_cache_spec: dict[str, Any]) -> list[Any]:
    """Drop-in for vLLM 0.29-0.32's ``kv_cache_utils.get_kv_cache_groups``."""
    return _answer(fallback.GROUPING, "get_kv_cache_groups", kvrules_groups, vllm_config, kv_cache_spec)


def _pool_bytes_per_block(vllm_config: Any, kv_cache_groups: list[Any]) -> int:
    """Drop-in for vLLM 0.29-0.32's ``kv_cache_utils._pool_bytes_per_block``."""
    return _answer(
        fallback.PLACEMENT, "_pool_bytes_per_block", kvrules_bytes_per_block, vllm_config, kv_cache_groups
    )


def get_kv_cache_config_from_groups(
    vllm_config: Any, kv_cache_groups: list[Any], available_memory: int
) -> Any:
    """Drop-in for vLLM 0.29-0.32's ``kv_cache_utils.get_kv_cache_config_from_groups``."""
    return _answer(
        fallback.PLACEMENT,
        "get_kv_cache_config_from_groups",
        kvrules_config,
        vllm_config,
        kv_cache_groups,
        available_memory,
    )


#: the functions ``install()`` puts in place of vLLM's on this line, by name
DROP_INS: dict[str, Callable[..., Any]] = {
    "get_kv_cache_groups": get_kv_cache_groups,
    "_pool_bytes_per_block": _pool_bytes_per_block,
    "get_kv_cache_config_from_groups": get_kv_cache_config_from_groups,
}

__all__ = [
    "ANNOTATED_ROUTE",
    "DROP_INS",
    "LINE",
    "annotate_eagle",
    "bind",
    "blocks_for",
    "get_kv_cache_config_from_groups",
    "get_kv_cache_groups",
    "kvrules_bytes_per_block",
    "kvrules_config",
    "kvrules_groups",
]
