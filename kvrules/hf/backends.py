"""Attention backends: the kernel block sizes that constrain the cache block size (formulas §3.1).

A backend either accepts any multiple of a base (FlashAttention: ``MultipleOf(16)``) or a fixed
list (FlashMLA: ``[64]``). The cache block size must be a multiple of a supported kernel block
(a manager block of ``N`` tokens is read as ``N / kernel`` kernel blocks); the hybrid alignment
rounds to the smallest supported kernel block.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvrules.errors import ConfigError

DEFAULT_BLOCK_SIZE = 16
"""vLLM's ``CacheConfig.DEFAULT_BLOCK_SIZE``."""


@dataclass(frozen=True)
class AttentionBackend:
    """What kvrules needs to know about one attention backend.

    :ivar name: the ``--attention-backend`` value.
    :ivar kernel_block_sizes: the fixed kernel block sizes, or ``()`` with ``multiple_of``.
    :ivar multiple_of: any multiple of this is a kernel block size (``0`` when a fixed list).
    :ivar mla: True for backends that serve multi-head latent attention.
    :ivar indexes_kv_by_block_stride: the backend reads KV pages by block stride, so a page can
        be padded (vLLM 0.24+, FlashAttention and FlashInfer; formulas §6.3).
    """

    name: str
    kernel_block_sizes: tuple[int, ...] = ()
    multiple_of: int = 0
    mla: bool = False
    indexes_kv_by_block_stride: bool = False
    description: str = ""

    @property
    def min_kernel_block(self) -> int:
        """The smallest kernel block size (``MultipleOf(b)`` counts as ``b``)."""
        return self.multiple_of if self.multiple_of else min(self.kernel_block_sizes)

    def supports(self, block_size: int) -> bool:
        """True when a cache block of ``block_size`` tokens splits into whole kernel blocks."""
        if self.multiple_of:
            return block_size % self.multiple_of == 0
        return any(block_size % size == 0 for size in self.kernel_block_sizes)

    def preferred_block_size(self, default: int = DEFAULT_BLOCK_SIZE) -> int:
        """``default`` when supported, else the smallest kernel block (vLLM's phase 1)."""
        return default if self.supports(default) else self.min_kernel_block

    def kernel_sizes_text(self) -> str:
        """``multiple of 16`` or ``[32, 64]``."""
        if self.multiple_of:
            return f"multiple of {self.multiple_of}"
        return "[" + ", ".join(map(str, self.kernel_block_sizes)) + "]"


BACKENDS: dict[str, AttentionBackend] = {
    b.name: b
    for b in (
        AttentionBackend(
            "flash-attn",
            multiple_of=16,
            indexes_kv_by_block_stride=True,
            description="FlashAttention (vLLM's default on NVIDIA GPUs)",
        ),
        AttentionBackend(
            "flashinfer", (16, 32, 64), indexes_kv_by_block_stride=True, description="FlashInfer"
        ),
        AttentionBackend("triton", multiple_of=16, description="Triton attention"),
        AttentionBackend("flex", multiple_of=16, description="FlexAttention"),
        AttentionBackend(
            "flashmla", (64,), mla=True, description="FlashMLA (vLLM's default for MLA on Hopper)"
        ),
        AttentionBackend("flashmla-sparse", (64,), mla=True, description="FlashMLA sparse (DeepSeek-V3.2)"),
        AttentionBackend("cutlass-mla", (128,), mla=True, description="CUTLASS MLA (Blackwell)"),
        AttentionBackend("flashinfer-mla", (32, 64), mla=True, description="FlashInfer MLA"),
        AttentionBackend("triton-mla", multiple_of=16, mla=True, description="Triton MLA"),
    )
}
"""Built-in backends by name; kernel block sizes from vLLM's backends (formulas §3.1)."""

AUTO = "auto"


def resolve_backend(name: str, *, mla: bool) -> AttentionBackend:
    """The backend called ``name`` (``auto``: ``flashmla`` for MLA models, else ``flash-attn``).

    :raises ConfigError: an unknown name, or an MLA backend for a non-MLA model (and vice versa).
    """
    if name == AUTO:
        return BACKENDS["flashmla" if mla else "flash-attn"]
    backend = BACKENDS.get(name)
    if backend is None:
        raise ConfigError(f"attention_backend {name!r} is unknown; use auto or one of {', '.join(BACKENDS)}")
    if backend.mla != mla:
        kind = "an MLA" if backend.mla else "a non-MLA"
        model = "uses multi-head latent attention" if mla else "does not use multi-head latent attention"
        choices = ", ".join(n for n, b in BACKENDS.items() if b.mla == mla)
        raise ConfigError(
            f"attention_backend {name!r} is {kind} backend but the model {model}; use one of {choices}"
        )
    return backend
