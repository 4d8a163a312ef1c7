"""The architecture contract: what a plugin registers through ``kvrules_register_architectures``.

An architecture is a frozen dataclass deriving from :class:`Architecture` with a unique ``name``
(lower case, dashes) and an integer ``priority``. The core asks every registered architecture
in ``(-priority, name)`` order whether it :meth:`~Architecture.recognises` a config; the first
that does builds the per-layer specs with :meth:`~Architecture.build`. Every answer is recorded
as a decision at stage ``arch``.

Minimal plugin::

    from dataclasses import dataclass
    import kvrules
    from kvrules.hf import BuildSettings, HFConfig, layers
    from kvrules.plugin import Architecture

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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvrules.plugin.rules import Check, NamedPlugin, applies, declines

if TYPE_CHECKING:
    from kvrules.hf.config import HFConfig
    from kvrules.hf.settings import BuildSettings
    from kvrules.specs.base import KVCacheSpec


#: spec types (model-file names) the default :meth:`Architecture.mtp_specs` copies for MTP layers
MTP_COPYABLE = ("full_attention", "mla")


@dataclass(frozen=True)
class Architecture(NamedPlugin):
    """Base of every architecture (see the module docstring).

    :ivar model_types: ``model_type`` values recognised by the default :meth:`recognises`
        (top level or ``text_config``).
    :ivar class_names: ``architectures`` entries recognised by the default :meth:`recognises`.
    """

    model_types: tuple[str, ...] = ()
    class_names: tuple[str, ...] = ()

    # -- required ---------------------------------------------------------------------------
    def recognises(self, config: HFConfig) -> Check:
        """Whether this architecture builds ``config``, and why (a :class:`~kvrules.plugin.Check`).

        The default matches :attr:`model_types` and :attr:`class_names`.
        """
        for model_type in dict.fromkeys((config.model_type, config.text_model_type)):
            if model_type and model_type in self.model_types:
                return applies(f"model_type {model_type!r} is {self.name}.")
        for cls in config.architectures:
            if cls in self.class_names:
                return applies(f"architecture {cls!r} is {self.name}.")
        seen = config.model_type or "(none)"
        return declines(f"model_type {seen!r} is not one of {', '.join(self.model_types) or '-'}.")

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        """Per-layer specs in layer order, named as the engine names the layers.

        :raises ModelFileError: a missing or invalid config field (naming the file and field).
        """
        raise NotImplementedError

    # -- optional ---------------------------------------------------------------------------
    def uses_mla(self, config: HFConfig) -> bool:
        """True when the attention is multi-head latent attention (chooses an MLA backend)."""
        return False

    def mamba_ssm_dtype_default(self, config: HFConfig) -> str:
        """The SSM-state dtype when ``mamba_ssm_cache_dtype`` is ``auto`` (``auto``: the conv dtype)."""
        return "auto"

    def mamba_chunk_size(self, config: HFConfig) -> int | None:
        """The Mamba chunk size used by ``mamba_cache_mode='all'`` (``None`` when unknown)."""
        for key in ("mamba_chunk_size", "chunk_size"):
            if config.has(key):
                return config.integer(key)
        return None

    def mtp_layer_count(self, config: HFConfig) -> int:
        """Multi-token-prediction layers the checkpoint carries (``num_nextn_predict_layers``)."""
        for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
            if config.has(key):
                return config.integer(key, minimum=0)
        return 0

    def mtp_layer_name(self, config: HFConfig, index: int) -> str:
        """The engine's name of MTP layer ``index`` (after the decoder layers)."""
        return f"model.layers.{config.integer('num_hidden_layers') + index}.self_attn.attn"

    def mtp_specs(self, config: HFConfig, settings: BuildSettings, count: int) -> dict[str, KVCacheSpec]:
        """Specs of ``count`` MTP layers: by default each is a copy of the model's full-attention spec."""
        built = self.build(config, settings)
        spec = next(
            (s for s in built.values() if s.type_name in MTP_COPYABLE),
            None,
        )
        if spec is None:
            raise config.error(
                "num_nextn_predict_layers",
                f"asks for MTP layers, but {self.name} has no full-attention layer to copy; "
                "give the draft as its own config instead",
            )
        return {self.mtp_layer_name(config, i): spec for i in range(count)}

    def engine_settings(self, config: HFConfig, settings: BuildSettings) -> tuple[dict[str, Any], str]:
        """Engine settings the engine applies by default for this model, and why (``({}, "")``)."""
        return {}, ""


__all__ = ["MTP_COPYABLE", "Architecture"]
