"""A spec's answers checked where built-in code uses them (kvrules.plugin.blocks_of, memory_of,
evolved): a wrong answer is a SpecAnswerError naming the spec type, which the core reports with
the spec type's plugin."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

import kvrules
from kvrules import EngineConfig, FullAttentionSpec, SpecAnswerError
from kvrules.plugin import blocks_of, evolved, memory_of

CFG = EngineConfig(max_model_len=4096)
SPEC = FullAttentionSpec(16, num_kv_heads=2, head_size=64, dtype="bfloat16")


class Liar(FullAttentionSpec):
    """Answers as told by the class attributes below (only on the calls under test)."""

    blocks: Any = None
    memory: Any = None
    evolves_to: Any = None

    def blocks_per_request(self, config: EngineConfig) -> int:
        return self.blocks if self.blocks is not None else super().blocks_per_request(config)  # type: ignore[no-any-return]

    def max_memory_usage_bytes(self, config: EngineConfig) -> int:
        return self.memory if self.memory is not None else super().max_memory_usage_bytes(config)  # type: ignore[no-any-return]

    def evolve(self, **changes: Any) -> Any:
        return self.evolves_to if self.evolves_to is not None else super().evolve(**changes)


def liar(**answers: Any) -> Liar:
    made = Liar(16, num_kv_heads=2, head_size=64, dtype="bfloat16")
    for name, value in answers.items():
        object.__setattr__(made, name, value)  # instance attributes shadow the class defaults
    return made


def test_sane_answers_pass_through() -> None:
    assert blocks_of(SPEC, CFG) == SPEC.blocks_per_request(CFG) == 256
    assert memory_of(SPEC, CFG) == SPEC.max_memory_usage_bytes(CFG)
    assert evolved(SPEC, block_size=32) == SPEC.evolve(block_size=32)
    assert evolved(SPEC, page_size_padded=None).page_size_padded is None


@pytest.mark.parametrize(
    ("spec", "ask", "problem"),
    [
        (
            liar(blocks="3"),
            lambda s: blocks_of(s, CFG),
            "answers blocks_per_request = '3'; it must be an int >= 0",
        ),
        (
            liar(blocks=True),
            lambda s: blocks_of(s, CFG),
            "answers blocks_per_request = True; it must be an int >= 0",
        ),
        (
            liar(memory=-1),
            lambda s: memory_of(s, CFG),
            "answers max_memory_usage_bytes = -1; it must be an int >= 0",
        ),
        (liar(evolves_to=2.5), lambda s: evolved(s, block_size=32), "returned 2.5 from evolve(), not a Liar"),
        (liar(evolves_to=SPEC), lambda s: evolved(s, block_size=32), "returned FullAttentionSpec("),
    ],
)
def test_a_wrong_answer_names_the_spec_type(spec: Liar, ask: Any, problem: str) -> None:
    with pytest.raises(SpecAnswerError) as raised:
        ask(spec)
    assert raised.value.spec is spec and raised.value.problem.startswith(problem)
    assert str(raised.value).startswith("spec type 'full_attention' " + problem)
    assert isinstance(raised.value, kvrules.PluginError)


def test_an_evolve_that_keeps_the_old_block_size_is_refused() -> None:
    same = liar()
    object.__setattr__(same, "evolves_to", same)
    with pytest.raises(
        SpecAnswerError, match=r"returned a spec of block_size 16 from evolve\(block_size=32\)"
    ):
        evolved(same, block_size=32)


def test_the_error_pickles_with_its_spec() -> None:
    with pytest.raises(SpecAnswerError) as raised:
        blocks_of(liar(blocks="x"), CFG)
    again = pickle.loads(pickle.dumps(raised.value))
    assert type(again) is SpecAnswerError and str(again) == str(raised.value)
    assert again.problem == raised.value.problem and again.spec == raised.value.spec
