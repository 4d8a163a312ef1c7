"""Sample specs and planning scenarios for conformance checks.

:data:`SAMPLE_SPEC_NAMES` names small, valid specs of every built-in type; :func:`sample_spec`
builds one, :func:`make_specs` strings them into a model, and :func:`sample_scenarios` returns
models that, together, make the planner ask every built-in rule at least once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvrules.config import EngineConfig
from kvrules.errors import SpecError
from kvrules.specs import (
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    EncoderOnlyAttentionSpec,
    FullAttentionSpec,
    HiddenStateCacheSpec,
    KVCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
    SinkFullAttentionSpec,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
)

GiB = 1 << 30


def _samples() -> dict[str, KVCacheSpec]:
    bf16 = "bfloat16"
    full = FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype=bf16)
    full_small = FullAttentionSpec(16, num_kv_heads=4, head_size=128, dtype=bf16)
    return {
        "full": full,  # page 65536
        "full-small": full_small,  # page 32768
        "full-b64": FullAttentionSpec(64, num_kv_heads=8, head_size=128, dtype=bf16),  # 262144
        "full-padded": FullAttentionSpec(
            16, num_kv_heads=3, head_size=128, dtype=bf16, page_size_padded=32768
        ),
        "sliding": SlidingWindowSpec(16, num_kv_heads=4, head_size=128, dtype=bf16, sliding_window=1024),
        "sliding-stride": SlidingWindowSpec(
            16,
            num_kv_heads=3,
            head_size=128,
            dtype=bf16,
            sliding_window=512,
            indexes_kv_by_block_stride=True,
        ),
        "sliding-odd": SlidingWindowSpec(16, num_kv_heads=3, head_size=128, dtype=bf16, sliding_window=512),
        "chunked": ChunkedLocalAttentionSpec(
            16, num_kv_heads=4, head_size=128, dtype=bf16, attention_chunk_size=8192
        ),
        "mla": MLAAttentionSpec(64, num_kv_heads=1, head_size=576, dtype=bf16),  # page 73728
        "sliding-mla": SlidingWindowMLASpec(
            64, num_kv_heads=1, head_size=512, dtype=bf16, sliding_window=128
        ),  # page 65536
        "sliding-mla-c4": SlidingWindowMLASpec(
            64, num_kv_heads=1, head_size=512, dtype=bf16, sliding_window=128, compress_ratio=4
        ),  # page 16384
        "mamba": MambaSpec(64, shapes=((3, 1024), (8, 64, 64)), dtypes=(bf16, bf16)),  # page 71680
        "cross": CrossAttentionSpec(16, num_kv_heads=8, head_size=128, dtype=bf16),
        "encoder": EncoderOnlyAttentionSpec(16, num_kv_heads=8, head_size=128, dtype=bf16),
        "sink": SinkFullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype=bf16, sink_len=4),
        "hidden-state": HiddenStateCacheSpec(16, num_kv_heads=2, head_size=1024, dtype=bf16),  # 65536
        "uniform-type": UniformTypeKVCacheSpecs(16, {"a": full, "b": full_small}),
    }


_SAMPLES = _samples()

#: names accepted by :func:`sample_spec` and :func:`make_specs`
SAMPLE_SPEC_NAMES: tuple[str, ...] = tuple(_SAMPLES)


def sample_spec(name: str) -> KVCacheSpec:
    """The sample spec called ``name`` (see :data:`SAMPLE_SPEC_NAMES`).

    :raises SpecError: an unknown name (the message lists the known ones).
    """
    spec = _SAMPLES.get(name)
    if spec is None:
        raise SpecError(f"unknown sample spec {name!r}; use one of {', '.join(SAMPLE_SPEC_NAMES)}")
    return spec


def samples_of(cls: type[KVCacheSpec]) -> list[KVCacheSpec]:
    """Every sample spec whose type is exactly ``cls`` (empty for third-party types)."""
    return [spec for name in SAMPLE_SPEC_NAMES if type(spec := sample_spec(name)) is cls]


def make_specs(
    *items: str | KVCacheSpec, repeat: int = 1, prefix: str = "model.layers"
) -> dict[str, KVCacheSpec]:
    """A model: ``items`` (sample names or spec objects) repeated ``repeat`` times, in layer order.

    Layer ``i`` is named ``f"{prefix}.{i}.{type_name}"``:
    ``make_specs("full", "sliding", repeat=2)`` gives four layers, alternating.

    :raises SpecError: an unknown sample name, no items, or ``repeat < 1``.
    """
    if not items or repeat < 1:
        raise SpecError(f"make_specs needs at least one item and repeat >= 1 (got {len(items)}, {repeat})")
    specs = [item if isinstance(item, KVCacheSpec) else sample_spec(item) for item in items]
    return {f"{prefix}.{index}.{spec.type_name}": spec for index, spec in enumerate(specs * repeat)}


@dataclass(frozen=True)
class Scenario:
    """One planning input: per-worker specs, per-worker memory, engine settings.

    :ivar name: a short name used in failure messages.
    :ivar workers: one spec mapping per worker (pipeline stage).
    :ivar memory: bytes of KV-cache memory per worker.
    :ivar config: the engine settings.
    """

    name: str
    workers: tuple[Mapping[str, KVCacheSpec], ...]
    memory: tuple[int, ...]
    config: EngineConfig

    @classmethod
    def single(
        cls, name: str, specs: Mapping[str, KVCacheSpec], memory: int = 8 * GiB, **engine: object
    ) -> Scenario:
        """A one-worker scenario; ``engine`` holds :class:`~kvrules.EngineConfig` fields."""
        values = {"max_model_len": 8192, **engine}
        return cls(name, (specs,), (memory,), EngineConfig.from_dict(values))

    def split(self, memory: tuple[int, ...]) -> Scenario:
        """The same model cut into ``len(memory)`` contiguous pipeline stages with that memory."""
        names = [n for worker in self.workers for n in worker]
        specs = {n: s for worker in self.workers for n, s in worker.items()}
        count = len(memory)
        size, extra = divmod(len(names), count)
        bounds = [i * size + min(i, extra) for i in range(count + 1)]
        workers = tuple({n: specs[n] for n in names[bounds[i] : bounds[i + 1]]} for i in range(count))
        return Scenario(f"{self.name}-pp{count}", workers, memory, self.config)


def sample_scenarios() -> list[Scenario]:
    """Models that make the planner ask every built-in rule (some scenarios fail on purpose)."""
    single = Scenario.single
    gemma = make_specs("full", "sliding", "sliding", "sliding", repeat=2)
    return [
        single("attention-free", {}),
        single("llama", make_specs("full", repeat=4)),
        single("gemma", gemma),
        single("gemma-hybrid-disabled", gemma, disable_hybrid_kv_cache_manager=True),
        single("uniform-type", make_specs("full", "full-small", repeat=2)),
        single("mamba-hybrid", make_specs("full-b64", "full-b64", "full-b64", "mamba", repeat=2)),
        single("stride-pad", make_specs("full", "sliding-stride", repeat=2)),
        single("not-unifiable", make_specs("full", "sliding-odd", repeat=2)),
        single("mla-sliding-fallback", make_specs("mla", "sliding", repeat=2)),
        single("deepseek-v4-like", make_specs("mla", "sliding-mla", "sliding-mla-c4", repeat=2)),
        single("llama4-chunked", make_specs("full", "chunked", "chunked", "chunked")),
        single("encoder-decoder", make_specs("full", "cross", repeat=2)),
        single("gemma", gemma).split((8 * GiB, 6 * GiB)),
    ]
