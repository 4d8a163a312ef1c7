"""The architecture contract: what a plugin registers through ``kvrules_register_architectures``.

An architecture is a frozen dataclass deriving from :class:`Architecture` with a unique ``name``
(lower case, dashes) and an integer ``priority``. The core asks every registered architecture
in ``(-priority, name)`` order whether it :meth:`~Architecture.recognises` a config; the first
that does builds the per-layer specs with :meth:`~Architecture.build`. Every answer is recorded
as a decision at stage ``arch``.

Minimal plugin::

    from dataclasses import dataclass
    import kvrules
    from kvrules.hf import Architecture, HFConfig, BuildSettings, layers

    @dataclass(frozen=True)
    class MyModel(Architecture):
        name: str = "my-model"
        model_types: tuple[str, ...] = ("my_model",)

        def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, kvrules.KVCacheSpec]:
            heads = layers.kv_heads_per_rank(config, settings.tp)
            spec = layers.full_attention(settings, heads, layers.head_size(config))
            n = config.integer("num_hidden_layers")
            return {f"model.layers.{i}.self_attn.attn": spec for i in range(n)}

    @kvrules.hookimpl
    def kvrules_register_architectures(registry):
        registry.add(MyModel())
"""

from __future__ import annotations

from kvrules.plugin.architecture import Architecture

__all__ = ["Architecture"]
