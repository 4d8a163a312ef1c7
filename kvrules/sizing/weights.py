"""The records a checkpoint's tensors are described by: :class:`Weight` and :class:`WeightTable`.

One :class:`Weight` is one tensor of the checkpoint (routed experts stacked into one record with
:attr:`Weight.experts` copies), named as the Hugging Face checkpoint names it, with what vLLM does
with it under tensor and pipeline parallelism:

* :attr:`Weight.split` says how tensor parallelism divides it (:class:`Split`), following vLLM's
  parallel layers (``vllm/model_executor/layers/linear.py``: ``ColumnParallelLinear`` divides the
  output features, ``RowParallelLinear`` the input features and keeps its bias whole on every
  rank, ``ReplicatedLinear`` and the norms stay whole; ``QKVParallelLinear`` gives each rank
  ``num_kv_heads // tp`` KV heads, or one replicated head when ``tp`` exceeds them;
  ``vocab_parallel_embedding.py`` pads the vocabulary to a multiple of 64 and divides it);
* :attr:`Weight.stage` says where pipeline parallelism puts it (the embedding on the first rank,
  the final norm and ``lm_head`` on the last, a decoder layer's tensors with their layer);
* :attr:`Weight.linear` marks a ``[out, in]`` matrix that a quantisation scheme may store packed;
* :attr:`Weight.role` separates the checkpoint's multi-token-prediction (MTP) layers and its
  vision tower from the language model, so a caller can count what the engine loads.

The records are plain data; :mod:`kvrules.sizing.params` builds them from a config,
:mod:`kvrules.sizing.shard` divides them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

#: vLLM pads the vocabulary of ``VocabParallelEmbedding`` / ``ParallelLMHead`` to a multiple of
#: this before dividing it over the TP ranks (``DEFAULT_VOCAB_PADDING_SIZE = 64`` in
#: ``vllm/model_executor/layers/vocab_parallel_embedding.py``, with ``pad_vocab_size``).
VOCAB_PADDING = 64


class Split(StrEnum):
    """How tensor parallelism divides a tensor's leading dimensions (vLLM's parallel layers)."""

    #: whole on every rank: norms, routers, ``ReplicatedLinear``, a row-parallel layer's bias
    REPLICATED = "replicated"
    #: dim 0 (output features) divided by ``tp``: ``ColumnParallelLinear`` and its bias
    COLUMN = "column"
    #: dim 1 (input features) divided by ``tp``: ``RowParallelLinear``
    ROW = "row"
    #: dim 0 padded to a multiple of :data:`VOCAB_PADDING`, then divided: the embedding, ``lm_head``
    VOCAB = "vocab"
    #: dim 0 holds :attr:`Weight.heads` heads (or groups): divided when ``heads % tp == 0``, one
    #: head per rank (a replica) when ``tp % heads == 0`` (vLLM's ``QKVParallelLinear`` KV heads,
    #: Mamba2's ``n_groups`` extended to ``tp``); any other pair cannot be served
    HEADS = "heads"


class Stage(StrEnum):
    """Where pipeline parallelism places a tensor (vLLM's ``PPMissingLayer`` placement)."""

    #: the first PP rank (``embed_tokens``; also the last rank when the embedding is tied)
    FIRST = "first"
    #: the last PP rank (the final norm, ``lm_head``)
    LAST = "last"
    #: with its decoder layer (:attr:`Weight.layer`), wherever ``get_pp_indices`` puts it
    LAYER = "layer"
    #: every PP rank (a vision tower: built outside ``make_layers``)
    EVERY = "every"


class Role(StrEnum):
    """Which part of the checkpoint a tensor belongs to."""

    #: the language model the engine always loads
    MODEL = "model"
    #: multi-token-prediction / draft layers stored in the checkpoint (DeepSeek's
    #: ``num_nextn_predict_layers``, Qwen3-Next's ``mtp.*``): the target model skips them; vLLM
    #: loads them only as the drafter of ``--speculative-config '{"method": "mtp"}'``
    MTP = "mtp"
    #: the vision tower and its projector of a multimodal checkpoint
    VISION = "vision"


@dataclass(frozen=True)
class Segment:
    """A piece of a tensor's dim 0 with its own TP rule (Mamba's fused ``in_proj`` holds z, x, B,
    C and dt; B and C are divided by groups, the others by channels)."""

    rows: int
    split: Split
    heads: int = 0


@dataclass(frozen=True)
class Weight:
    """One tensor of the checkpoint.

    :ivar name: the checkpoint's name (``model.layers.3.self_attn.q_proj.weight``); stacked
        experts are named ``...experts.*.gate_proj.weight``.
    :ivar shape: the shape of one copy (one expert's, for stacked experts).
    :ivar component: what it is part of, for reports (``embedding``, ``attention``, ``mlp``,
        ``experts``, ``shared_experts``, ``router``, ``norm``, ``mamba``, ``lm_head``, ...).
    :ivar split: how TP divides it.
    :ivar stage: where PP puts it.
    :ivar layer: its decoder layer's index (``None`` for model-level tensors).
    :ivar linear: a ``[out, in]`` matrix a quantisation scheme may store packed.
    :ivar experts: the number of stacked routed-expert copies (0: an ordinary tensor); under
        expert parallelism the copies are divided, under TP each copy is split by :attr:`split`.
    :ivar heads: the number of heads (or groups) dim 0 holds, for :attr:`Split.HEADS`.
    :ivar segments: dim-0 pieces with rules of their own (then :attr:`split` is ignored).
    :ivar role: the model, its MTP layers, or its vision tower.
    """

    name: str
    shape: tuple[int, ...]
    component: str
    split: Split = Split.REPLICATED
    stage: Stage = Stage.LAYER
    layer: int | None = None
    linear: bool = False
    experts: int = 0
    heads: int = 0
    segments: tuple[Segment, ...] = ()
    role: Role = Role.MODEL

    @property
    def copies(self) -> int:
        """How many copies of :attr:`shape` the checkpoint holds (the experts, else 1)."""
        return self.experts if self.experts else 1

    @property
    def numel(self) -> int:
        """The parameters it holds (all copies)."""
        return math.prod(self.shape) * self.copies

    @property
    def module(self) -> str:
        """The module's name (the tensor's name without ``.weight`` / ``.bias``), which
        quantisation configs name in their ignore lists."""
        head, _, tail = self.name.rpartition(".")
        return head if tail in ("weight", "bias") else self.name


@dataclass(frozen=True)
class WeightTable:
    """Every tensor of one checkpoint, and what the sharding needs to know about the model.

    :ivar weights: the tensors, in checkpoint order.
    :ivar model_type: the config's (text) ``model_type``.
    :ivar num_layers: the decoder layers PP divides (``num_hidden_layers``; MTP layers apart).
    :ivar vocab_size: the vocabulary (unpadded).
    :ivar hidden_size: the residual width.
    :ivar tied: ``lm_head`` shares the embedding's storage (``tie_word_embeddings``).
    :ivar notes: sentences on what was assumed (fields not from the file, conventions).
    """

    weights: tuple[Weight, ...]
    model_type: str
    num_layers: int
    vocab_size: int
    hidden_size: int
    tied: bool
    notes: tuple[str, ...] = field(default=())

    def by_component(
        self, roles: tuple[Role, ...] = (Role.MODEL, Role.MTP, Role.VISION)
    ) -> Mapping[str, int]:
        """Parameters per component, in first-seen order, for the given roles."""
        out: dict[str, int] = {}
        for w in self.weights:
            if w.role in roles:
                out[w.component] = out.get(w.component, 0) + w.numel
        return out
