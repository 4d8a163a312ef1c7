"""Mamba / linear-attention state shapes per tensor-parallel rank (formulas §2.1).

Conv states use vLLM's default "SD" orientation ``(state_len, dim)``; the byte totals are the
same in every orientation. Mamba2 and gated-delta-net conv states keep ``num_spec`` extra rows
for speculative decoding. Every function takes integers that the caller has validated (see
:func:`split`, which raises a :class:`~kvrules.ModelFileError` naming the config field).
"""

from __future__ import annotations

from kvrules.errors import SpecError
from kvrules.hf.config import HFConfig

Shape = tuple[int, ...]


def split(config: HFConfig, key: str, value: int, tp: int, *, what: str = "") -> int:
    """``value // tp`` for the config field ``key``; a field that ``tp`` does not divide is an error."""
    if value % tp:
        label = f" ({what})" if what else ""
        raise config.error(
            key,
            f"= {value}{label} cannot be split over tensor_parallel_size {tp}: {value} is not a "
            f"multiple of {tp}; choose a tensor-parallel size that divides {value}",
        )
    return value // tp


def _div(value: int, tp: int, what: str) -> int:
    if value % tp:
        raise SpecError(f"{what} = {value} is not divisible by tensor_parallel_size {tp}")
    return value // tp


def extra_groups_for_head_shards(n_groups: int, tp: int) -> int:
    """Groups to add so that every rank holds the groups its heads need (0 when ``tp`` divides)."""
    return 0 if n_groups % tp == 0 else tp - n_groups


def mamba1_state_shape(tp: int, intermediate: int, state_size: int, conv_kernel: int) -> tuple[Shape, Shape]:
    """Mamba1 (Jamba): conv ``(k - 1, intermediate / tp)``, temporal ``(intermediate / tp, state)``."""
    dim = _div(intermediate, tp, "mamba intermediate size")
    return (conv_kernel - 1, dim), (dim, state_size)


def mamba2_state_shape(
    tp: int,
    intermediate: int,
    n_groups: int,
    num_heads: int,
    head_dim: int,
    state_size: int,
    conv_kernel: int,
    num_spec: int = 0,
) -> tuple[Shape, Shape]:
    """Mamba2: conv ``(k - 1 + spec, conv_dim / tp)``, temporal ``(heads / tp, head_dim, state)``.

    ``conv_dim = intermediate + 2 * groups * state``, groups extended so every rank holds whole groups.
    """
    groups = n_groups + extra_groups_for_head_shards(n_groups, tp)
    conv_dim = intermediate + 2 * groups * state_size
    conv = (conv_kernel - 1 + num_spec, _div(conv_dim, tp, "mamba2 conv dim"))
    return conv, (_div(num_heads, tp, "mamba2 heads"), head_dim, state_size)


def gated_delta_net_state_shape(
    tp: int,
    num_k_heads: int,
    num_v_heads: int,
    head_k_dim: int,
    head_v_dim: int,
    conv_kernel: int,
    num_spec: int = 0,
) -> tuple[Shape, Shape]:
    """Gated delta net (Qwen3-Next, Qwen3.5): conv ``(k - 1 + spec, conv_dim / tp)``, temporal ``(nv / tp, dv, dk)``.

    ``conv_dim = dk * nk * 2 + dv * nv``.
    """
    conv_dim = head_k_dim * num_k_heads * 2 + head_v_dim * num_v_heads
    conv = (conv_kernel - 1 + num_spec, _div(conv_dim, tp, "gated delta net conv dim"))
    return conv, (_div(num_v_heads, tp, "gated delta net value heads"), head_v_dim, head_k_dim)


def short_conv_state_shape(tp: int, intermediate: int, conv_kernel: int) -> tuple[Shape]:
    """Short convolution (LFM2): conv ``(k - 1, intermediate / tp)``."""
    return ((conv_kernel - 1, _div(intermediate, tp, "short conv dim")),)


def linear_attention_state_shape(num_heads: int, tp: int, head_dim: int) -> tuple[Shape]:
    """Linear attention (MiniMax): ``(heads // tp, head_dim, head_dim)``."""
    return ((num_heads // tp, head_dim, head_dim),)
