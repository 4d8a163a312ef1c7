"""Hugging Face models go through ``pickle`` and ``multiprocessing`` (issue 25, R10).

Before, every model's config was a copy whose class ``TrackedHFConfig`` was made at run time
(``kvrules/hf/select.py``), so ``build_hf_model()``, its target, ``to_model_file()`` and
``load_example("hf-*")`` all failed to pickle. Now a tracked config is an ``HFConfig`` (of the
caller's class) whose ``reads`` is a set, and the accessors that record are the class's own.
"""

from __future__ import annotations

import copy
import multiprocessing
import operator
import pickle
from typing import Any

import pytest

from kvrules import EngineConfig, Planner
from kvrules.examples import example_names, load_example
from kvrules.hf import HFConfig, HFModel, build_hf_model
from kvrules.hf.select import reads, tracked

HF_EXAMPLES = [name for name in example_names() if name.startswith("hf-")]
QWEN = "kvrules/examples/hf/qwen3-coder-next/"
DRAFT = "kvrules/examples/hf/qwen3-coder-next/draft.json"
LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "hidden_size": 512,
    "max_position_embeddings": 4096,
}


def round_trip(obj: Any) -> Any:
    return pickle.loads(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def same_model(a: HFModel, b: HFModel) -> None:
    assert b.to_dict() == a.to_dict()
    assert b.specs == a.specs and b.decisions == a.decisions
    assert b.target.config.data == a.target.config.data
    assert b.target.config.reading == a.target.config.reading


def test_hf_examples_exist() -> None:
    assert len(HF_EXAMPLES) >= 6


@pytest.mark.parametrize("reader", ["builtin", "auto"])
def test_a_built_model_and_its_parts_pickle(reader: str) -> None:
    config = HFConfig.load(QWEN, reader=reader)
    model = build_hf_model(config, DRAFT)
    same_model(model, round_trip(model))
    target = round_trip(model.target)
    assert target.title == model.target.title and target.layers == model.target.layers
    assert type(target.config) is HFConfig
    assert round_trip(model.draft).layers == model.draft.layers  # type: ignore[union-attr]
    assert type(model.target.config) is HFConfig  # the tracked copy keeps the caller's class
    file = model.to_model_file([1 << 34])
    back = round_trip(file)
    assert back.specs == file.specs and back.engine == file.engine
    assert back.available_memory == [1 << 34] and back.hf is not None
    same_model(model, back.hf)


@pytest.mark.parametrize("name", HF_EXAMPLES)
def test_every_hf_example_pickles(name: str) -> None:
    example = load_example(name)
    back = round_trip(example)
    assert back.specs == example.specs and back.engine == example.engine
    assert back.description == example.description


def test_an_unpickled_model_file_plans_the_same() -> None:
    example = load_example("hf-qwen3-coder-next")
    config = EngineConfig(max_model_len=32768)
    back = round_trip(example)
    assert back.specs.alignment == example.specs.alignment  # type: ignore[attr-defined]
    assert example.specs.alignment.strategy_set == "default"  # type: ignore[attr-defined]
    plans = [Planner().plan(f.specs, available_memory=1 << 34, config=config) for f in (example, back)]
    assert plans[0].to_json() == plans[1].to_json()


def test_a_tracked_config_still_records_after_pickling() -> None:
    config = HFConfig(dict(LLAMA), "<test>")
    copy_ = tracked(config)
    copy_.integer("num_hidden_layers")
    back = round_trip(copy_)
    assert type(back) is HFConfig and reads(back) == {"num_hidden_layers"}
    back.has("sliding_window")
    assert reads(back) == {"num_hidden_layers", "sliding_window"}
    assert reads(copy_) == {"num_hidden_layers"} and reads(config) == set()


class _Renamed(HFConfig):
    """A caller's own config class (module level, so it pickles) overriding one accessor."""

    def opt_int(self, key: str, *, minimum: int = 1, maximum: int | None = None) -> int | None:
        return super().opt_int(key, minimum=minimum, maximum=maximum)

    def flag(self, key: str, default: bool) -> bool:  # does not call the base class
        value = self.data.get(key)
        return default if value is None else bool(value)


def test_a_subclass_is_tracked_as_itself_and_its_own_accessors_record() -> None:
    copy_ = tracked(_Renamed(dict(LLAMA), "<test>"))
    assert type(copy_) is _Renamed
    copy_.opt_int("sliding_window")
    copy_.flag("use_sliding_window", False)
    assert reads(copy_) == {"sliding_window", "use_sliding_window"}
    back = round_trip(copy_)
    assert type(back) is _Renamed and reads(back) == reads(copy_)
    model = build_hf_model(_Renamed(dict(LLAMA), "<test>"))
    assert type(round_trip(model).target.config) is _Renamed


def test_hf_models_cross_a_spawned_process() -> None:
    model = build_hf_model(QWEN, DRAFT)
    example = load_example("hf-deepseek-v3")
    objects = [model, model.target, model.to_model_file(), example]
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        back: list[Any] = pool.map(copy.copy, objects)  # each one pickled there and back
        described = pool.apply(operator.methodcaller("to_dict"), (model,))  # used there
    same_model(model, back[0])
    assert back[1].layers == model.target.layers
    assert back[2].specs == model.specs and back[2].hf is not None
    assert back[3].specs == example.specs
    assert described == model.to_dict()
