"""The Python API under fuzz: generated spec mixes, engine settings, workers and memory.

A *case* is plain data (a dict) so it can be printed, replayed and shrunk::

    {"profile": "normal" | "extreme",
     "layers": [[name, "ctor" | "dict", type_name, {field: value}], ...],
     "workers": None | [[layer index, ...], ...] | "<hostile form>",
     "memory": value | [value, ...],
     "engine": {EngineConfig field: value}, "config": "ctor" | "from_dict" | "none" | "dict",
     "strategies": "vllm" | "default" | <hostile>, "entry": "plan" | "Planner"}

:func:`run_api_case` builds it (a spec or config refused on construction counts as a
``KVRulesError``), plans it under a time limit and checks every invariant of the plan.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import kvrules
from fuzz.draw import Draw
from fuzz.hostile import NON_STRING_NAMES, ODD_NAMES, hostile, maybe, render
from fuzz.invariants import InvariantBroken, check_plan_invariants
from fuzz.outcome import BROKEN, OK, Outcome, from_exception, time_limit

Case = dict[str, Any]

SPEC_CLASSES: dict[str, type[kvrules.KVCacheSpec]] = {
    cls.type_name: cls
    for cls in (
        kvrules.FullAttentionSpec,
        kvrules.SlidingWindowSpec,
        kvrules.ChunkedLocalAttentionSpec,
        kvrules.MLAAttentionSpec,
        kvrules.SlidingWindowMLASpec,
        kvrules.MambaSpec,
        kvrules.HiddenStateCacheSpec,
        kvrules.CrossAttentionSpec,
        kvrules.EncoderOnlyAttentionSpec,
        kvrules.SinkFullAttentionSpec,
    )
}

BLOCKS = (16, 16, 32, 64, 128, 256, 1, 8, 528, 2048)
HEADS = (1, 2, 4, 8, 16, 3)
HEAD_SIZES = (128, 64, 128, 256, 80, 512)
DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn", "uint8", "int8", "bf16", "fp16")
QUANT = ("NONE", "fp8_per_tensor", "INT8_PER_TOKEN_HEAD", "nvfp4", "int4_per_token_head")
WINDOWS = (512, 64, 128, 1024, 4096, 32768)
CHUNKS = (512, 2048, 8192)


def _optional(draw: Draw, fields: dict[str, Any], name: str, values: Sequence[Any]) -> None:
    """Set ``fields[name]`` to one of ``values`` a third of the time."""
    if draw.chance(33):
        fields[name] = draw.choice(values)


def _attention_fields(draw: Draw) -> dict[str, Any]:
    fields = {
        "block_size": draw.choice(BLOCKS),
        "num_kv_heads": draw.choice(HEADS),
        "head_size": draw.choice(HEAD_SIZES),
        "dtype": draw.choice(DTYPES),
    }
    _optional(draw, fields, "head_size_v", (0, 64, 128, 512))
    _optional(draw, fields, "kv_quant_mode", QUANT)
    _optional(draw, fields, "indexes_kv_by_block_stride", (False, True))
    if draw.chance(8):
        fields["page_size_padded"] = draw.choice((1 << 20, 1 << 21, 65536))
    return fields


def _mla_fields(draw: Draw) -> dict[str, Any]:
    fields = {
        "block_size": draw.choice((64, 128, 256, 16)),
        "num_kv_heads": 1,
        "head_size": draw.choice((576, 512, 656)),
        "dtype": draw.choice(("bfloat16", "uint8", "float8_e4m3fn")),
    }
    _optional(draw, fields, "cache_dtype_str", ("fp8_ds_mla", "auto", None))
    _optional(draw, fields, "alignment", (576, 656, 64, None))
    _optional(draw, fields, "compress_ratio", (1, 4, 128))
    return fields


def _mamba_fields(draw: Draw) -> dict[str, Any]:
    dims = (1, 2, 3, 4, 32, 64, 128, 256, 768, 1024)
    shapes = [[draw.choice(dims) for _ in range(draw.integer(1, 3))] for _ in range(draw.integer(1, 3))]
    fields: dict[str, Any] = {
        "block_size": draw.choice((16, 64, 256, 528, 1024, 2048)),
        "shapes": shapes,
        "dtypes": [draw.choice(("bfloat16", "float32", "float16", "int8")) for _ in shapes],
    }
    _optional(draw, fields, "mamba_type", ("mamba2", "mamba1", "gdn_attention", "short_conv"))
    _optional(draw, fields, "mamba_cache_mode", ("none", "align", "all"))
    _optional(draw, fields, "num_speculative_blocks", (0, 1, 2, 4))
    _optional(draw, fields, "page_size_padded", (1 << 20, 1 << 22, 65536))
    return fields


def _local_fields(draw: Draw, type_name: str, fields: dict[str, Any]) -> None:
    """The window, chunk and sink fields of the local and sink types."""
    if type_name in ("sliding_window", "sliding_window_mla"):
        fields["sliding_window"] = draw.choice(WINDOWS)
        _optional(draw, fields, "extra_retained_tokens", (0, 1, 64))
    if type_name == "sliding_window_mla":
        _optional(draw, fields, "model_version", ("deepseek_v4", None))
    if type_name == "chunked_local":
        fields["attention_chunk_size"] = draw.choice(CHUNKS)
    if type_name == "sink_full_attention":
        _optional(draw, fields, "sink_len", (0, 4, 16))


def typed_fields(draw: Draw, type_name: str) -> dict[str, Any]:
    """Valid-looking fields of ``type_name``."""
    if type_name == "mamba":
        return _mamba_fields(draw)
    if type_name in ("mla", "sliding_window_mla"):
        fields = _mla_fields(draw)
    elif type_name == "hidden_state_cache":
        fields = {
            "block_size": draw.choice(BLOCKS),
            "num_kv_heads": draw.choice((1, 2, 3, 4)),
            "head_size": draw.choice((2048, 1024, 4096)),
            "dtype": "bfloat16",
        }
    else:
        fields = _attention_fields(draw)
    _local_fields(draw, type_name, fields)
    return fields


def _hostile_mamba(draw: Draw, fields: dict[str, Any], profile: str) -> None:
    """Hostile state shapes or dtypes (a dimension, a shape, the lists themselves)."""
    choice = draw.integer(0, 3)
    shapes = fields["shapes"]
    if choice == 0 and isinstance(shapes, list) and shapes and isinstance(shapes[0], list):
        shapes[0] = [hostile(draw, profile), *shapes[0][1:]]
    elif choice == 1:
        fields["shapes"] = draw.choice(([], [[]], "abc", [[[1]]], None, [3]))
    elif choice == 2:
        fields["dtypes"] = draw.choice(("int8", ["nope"], [None], [], None))
    else:
        fields["mamba_cache_mode"] = hostile(draw, profile)


TYPE_NAMES = tuple(sorted(SPEC_CLASSES))
ODD_TYPES = (["full_attention"], {}, None, 5, "FULL_ATTENTION", "uniform_type", "")


def spec_case(draw: Draw, profile: str, percent: int) -> list[Any]:
    """``[mode, type_name, fields]`` of one spec: valid-looking fields, ``percent`` % of them
    hostile; in ``dict`` mode (``spec_from_dict``) also unknown, missing and odd ``type`` keys."""
    type_name = draw.choice(TYPE_NAMES)
    fields = typed_fields(draw, type_name)
    for name in list(fields):
        fields[name] = maybe(draw, fields[name], profile, percent)
    if type_name == "mamba" and percent and draw.chance(10):
        _hostile_mamba(draw, fields, profile)
    mode = draw.choice(("ctor", "ctor", "dict"))
    if mode == "ctor" or not percent:
        return [mode, type_name, fields]  # a constructor's own signature is Python's to check
    extra = draw.integer(0, 29)
    if extra == 0:
        fields["bogus_field"] = 1
    elif extra == 1:
        fields.pop(draw.choice(sorted(fields)))
    elif extra == 2:
        type_name = draw.choice(ODD_TYPES)
    return [mode, type_name, fields]


def _layer_name(draw: Draw, index: int, profile: str, hostile_names: bool) -> Any:
    roll = draw.integer(0, 99)
    if hostile_names and profile == "extreme" and roll >= 70:
        return draw.choice((index, index + 1000, *NON_STRING_NAMES))
    if hostile_names and roll >= 96:
        return draw.choice((*ODD_NAMES, *NON_STRING_NAMES))
    if roll >= 86:
        return f"draft.layers.{index}.attn"
    return f"model.layers.{index}.attn"


WORKER_FORMS = ("empty-list", "non-mapping", "tuple", "empty-worker", "string")


def _workers(draw: Draw, count: int, odd: bool) -> Any:
    roll = draw.integer(0, 19)
    if roll < 10 or count < 2:
        return None
    if odd and roll == 19:
        return draw.choice(WORKER_FORMS)
    parts = draw.integer(2, min(4, count))
    cuts = sorted(draw.sample(range(1, count), parts - 1))
    bounds = [0, *cuts, count]
    workers = [list(range(bounds[i], bounds[i + 1])) for i in range(len(bounds) - 1)]
    if roll == 18:
        workers[-1].append(0)  # a layer on two workers (same spec: allowed)
    return workers


MEMORIES = (1 << 30, 40 << 30, 80 << 30, 0, 1, 1 << 20, 1 << 40, 123_456_789)
ODD_MEMORIES = ([], [1 << 30, 1 << 30, 1 << 30], (1 << 30,), "40GiB", range(3))


def _memory(draw: Draw, profile: str, workers: Any, percent: int) -> Any:
    def one() -> Any:
        value = draw.choice(MEMORIES) if draw.boolean() else draw.integer(0, 1 << 41)
        return maybe(draw, value, profile, percent)

    if isinstance(workers, list) and draw.boolean():
        return [one() for _ in workers]
    if percent and draw.chance(3):
        return draw.choice(ODD_MEMORIES)
    return one()


ENGINE_FIELDS: dict[str, tuple[Any, ...]] = {
    "max_num_batched_tokens": (2048, 0, 512, 8192, 16384),
    "max_num_encoder_input_tokens": (None, 0, 1024, 8192),
    "disable_hybrid_kv_cache_manager": (False, True),
    "num_gpu_blocks_override": (None, 1, 100, 4096, 1 << 20),
    "decode_context_parallel_size": (1, 1, 2, 4),
    "prefill_context_parallel_size": (1, 1, 2),
    "extra_retained_tokens": (0, 16, 1024),
    "draft_layer_prefixes": (("draft.",), ["draft.", "mtp."], []),
    "auto_fit_max_model_len": (False, True),
    "speculative_method": (None, "mtp", "eagle3", "ngram"),
}
ODD_ENGINE: dict[str, tuple[Any, ...]] = {
    "draft_layer_prefixes": ("draft.", 5, {"draft.": 1}, [""], [1], None),
    "speculative_method": ("", 5, " ", ["mtp"]),
}
ENGINE_NAMES = frozenset({"max_model_len", *ENGINE_FIELDS})
LENGTHS = (4096, 1, 16, 1000, 32768, 131072, 1 << 20)


def engine_case(draw: Draw, profile: str, percent: int) -> dict[str, Any]:
    """EngineConfig fields: ``max_model_len`` and some others, ``percent`` % of them hostile."""
    length = draw.choice(LENGTHS) if draw.boolean() else draw.integer(1, 1 << 21)
    engine: dict[str, Any] = {"max_model_len": maybe(draw, length, profile, percent)}
    for name in draw.sample(sorted(ENGINE_FIELDS), 4):
        value = draw.choice(ENGINE_FIELDS[name])
        if percent and name in ODD_ENGINE and draw.chance(20):
            value = draw.choice(ODD_ENGINE[name])
        engine[name] = maybe(draw, value, profile, percent)
    return engine


def _config_mode(draw: Draw, engine: dict[str, Any], odd: bool) -> str:
    if not odd:
        return draw.choice(("ctor", "from_dict"))
    mode = draw.choice(("ctor",) * 8 + ("from_dict", "from_dict", "none", "dict"))
    if mode in ("from_dict", "dict") and draw.chance(10):
        if draw.boolean():
            del engine["max_model_len"]
        else:
            engine["no_such_setting"] = 1
    return mode


ODD_STRATEGIES = (None, 5, [], ["vllm", "nope"], "nope", ["vllm", "vllm"], b"vllm")


def api_case(draw: Draw, profile: str = "normal") -> Case:
    """One whole API input (see the module docstring). A third of the cases hold no hostile
    value at all, so that many inputs reach a plan."""
    clean = draw.chance(35)
    percent = 0 if clean else (4 if profile == "normal" else 10)
    kinds = [spec_case(draw, profile, percent) for _ in range(draw.integer(1, 4))]
    count = draw.integer(1, 12)
    layers = []
    for index in range(count):
        mode, type_name, fields = copy.deepcopy(kinds[draw.integer(0, len(kinds) - 1)])
        layers.append([_layer_name(draw, index, profile, not clean), mode, type_name, fields])
    workers = _workers(draw, count, not clean)
    engine = engine_case(draw, profile, percent)
    strategies: Any = draw.choice(("vllm", "default"))
    if not clean and draw.chance(2):
        strategies = draw.choice(ODD_STRATEGIES)
    return {
        "profile": profile,
        "layers": layers,
        "workers": workers,
        "memory": _memory(draw, profile, workers, percent * 2),
        "engine": engine,
        "config": _config_mode(draw, engine, not clean),
        "strategies": strategies,
        "entry": draw.choice(("Planner", "plan")),
    }


# -- building and running ---------------------------------------------------------------------------


def build_spec(mode: str, type_name: Any, fields: dict[str, Any]) -> kvrules.KVCacheSpec:
    """A spec from its constructor or from ``kvrules.spec_from_dict``."""
    if mode == "dict":
        return kvrules.spec_from_dict({"type": type_name, **fields})
    cls = SPEC_CLASSES[type_name]
    return cls(**fields)


def build_specs(case: Case) -> Any:
    """The ``specs`` argument: one mapping, or one per worker (or a hostile form)."""
    built = [(name, build_spec(mode, t, dict(f))) for name, mode, t, f in case["layers"]]
    workers = case["workers"]
    if workers is None:
        return dict(built)
    if isinstance(workers, str):
        return {
            "empty-list": [],
            "non-mapping": [dict(built), 5],
            "tuple": (dict(built),),
            "empty-worker": [dict(built), {}],
            "string": "specs",
        }[workers]
    return [dict(built[i] for i in part) for part in workers]


def build_config(case: Case) -> Any:
    """The ``config`` argument."""
    engine = dict(case["engine"])
    mode = case["config"]
    if mode == "none":
        return None
    if mode == "dict":
        return engine
    if mode == "from_dict":
        return kvrules.EngineConfig.from_dict(engine)
    return kvrules.EngineConfig(**engine)


def call(case: Case, specs: Any, config: Any) -> kvrules.Plan:
    """Plan through the chosen entry point."""
    memory = case["memory"]
    if case["entry"] == "plan":
        return kvrules.plan(specs, memory, config, strategies=case["strategies"])
    return kvrules.Planner(case["strategies"]).plan(specs, memory, config)


def run_api_case(case: Case, *, seconds: float = 10) -> Outcome:
    """Build and plan ``case``; check the plan. Never raises (but ``KeyboardInterrupt``)."""
    case = copy.deepcopy(case)  # whatever kvrules does to its arguments, the case replays the same
    try:
        with time_limit(seconds):
            specs = build_specs(case)
            plan = call(case, specs, build_config(case))
            check_plan_invariants(plan, specs, case["memory"])
    except InvariantBroken as broken:
        return Outcome(BROKEN, str(broken)[:400], "InvariantBroken", broken.invariant)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        return from_exception(exc)
    return Outcome(OK)


# -- shrinking and rendering ----------------------------------------------------------------------


def _without_layer(case: Case, index: int) -> Case | None:
    if len(case["layers"]) <= 1:
        return None
    out = copy.deepcopy(case)
    del out["layers"][index]
    if isinstance(out["workers"], list):
        parts = [[i - (i > index) for i in part if i != index] for part in out["workers"]]
        out["workers"] = [p for p in parts if p] or None
        if isinstance(out["memory"], list) and out["workers"] and len(out["memory"]) != len(out["workers"]):
            return None
    return out


def _simpler(case: Case) -> Iterator[Case]:
    """Cases one step simpler than ``case`` (a layer, a worker split, a field, a setting fewer)."""
    for index in range(len(case["layers"])):
        smaller = _without_layer(case, index)
        if smaller is not None:
            yield smaller
    if case["workers"] is not None:
        yield {
            **case,
            "workers": None,
            "memory": case["memory"][0]
            if isinstance(case["memory"], list) and case["memory"]
            else case["memory"],
        }
    for name in list(case["engine"]):
        if name != "max_model_len" or case["config"] != "ctor":
            yield {**case, "engine": {k: v for k, v in case["engine"].items() if k != name}}
    for index, (_, _, _, fields) in enumerate(case["layers"]):
        for name in list(fields):
            out = copy.deepcopy(case)
            del out["layers"][index][3][name]
            yield out
    for index, layer in enumerate(case["layers"]):
        if layer[0] != f"l{index}":
            out = copy.deepcopy(case)
            out["layers"][index][0] = f"l{index}"
            yield out
    if case["entry"] != "Planner":
        yield {**case, "entry": "Planner"}
    if case["config"] != "ctor" and "max_model_len" in case["engine"]:
        yield {
            **case,
            "config": "ctor",
            "engine": {k: v for k, v in case["engine"].items() if k in ENGINE_NAMES},
        }


def shrink(case: Case, run: Callable[[Case], Outcome], seconds: float = 20) -> tuple[Case, Outcome]:
    """A simpler case failing for the same cause (greedy, within ``seconds``)."""
    import time

    target = run(case)
    deadline = time.monotonic() + seconds
    progress = True
    while progress and time.monotonic() < deadline:
        progress = False
        for candidate in _simpler(case):
            if time.monotonic() >= deadline:
                break
            outcome = run(candidate)
            if outcome.cause == target.cause:
                case, target, progress = candidate, outcome, True
                break
    return case, target


def _spec_source(mode: str, type_name: Any, fields: dict[str, Any]) -> str:
    if mode == "dict":
        return f"kvrules.spec_from_dict({render({'type': type_name, **fields})})"
    cls = SPEC_CLASSES[type_name].__name__ if type_name in SPEC_CLASSES else repr(type_name)
    args = ", ".join(f"{k}={render(v)}" for k, v in fields.items())
    return f"kvrules.{cls}({args})"


def render_case(case: Case) -> str:
    """Python source that replays ``case``."""
    specs = [(render(name), _spec_source(m, t, f)) for name, m, t, f in case["layers"]]
    workers = case["workers"]
    if isinstance(workers, list):
        text = (
            "["
            + ", ".join("{" + ", ".join(f"{specs[i][0]}: {specs[i][1]}" for i in p) + "}" for p in workers)
            + "]"
        )
    else:
        text = "{" + ", ".join(f"{n}: {s}" for n, s in specs) + "}"
        if isinstance(workers, str):
            text = f"<{workers} form of> {text}"
    engine = ", ".join(f"{k}={render(v)}" for k, v in case["engine"].items())
    config = {
        "ctor": f"kvrules.EngineConfig({engine})",
        "from_dict": f"kvrules.EngineConfig.from_dict({render(case['engine'])})",
        "none": "None",
        "dict": render(case["engine"]),
    }[case["config"]]
    memory, strategies = render(case["memory"]), render(case["strategies"])
    if case["entry"] == "plan":
        return f"kvrules.plan({text}, {memory}, {config}, strategies={strategies})"
    return f"kvrules.Planner({strategies}).plan({text}, {memory}, {config})"


__all__ = ["SPEC_CLASSES", "api_case", "engine_case", "render_case", "run_api_case", "shrink", "spec_case"]
