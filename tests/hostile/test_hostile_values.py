"""Hostile numbers at the API (reliability campaign, part "values"): every spec field, ``plan()``
argument and plan figure is an ``int`` within the bounds of :mod:`kvrules.values`, or a
:class:`~kvrules.KVRulesError` naming the field and the value; nothing overflows, and no work
grows with a number the user supplied."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from typing import Any

import jsonschema
import msgspec
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import kvrules
from kvrules import (
    AllocationError,
    CapacityError,
    ConfigError,
    EngineConfig,
    FullAttentionSpec,
    HiddenStateCacheSpec,
    KVCacheSpec,
    KVRulesError,
    KVRulesPluginManager,
    MambaSpec,
    Plan,
    Planner,
    SlidingWindowSpec,
    SpecError,
    UniformTypeKVCacheSpecs,
    hookimpl,
)
from kvrules.allocation import Allocator
from kvrules.pipeline.capacity import gib
from kvrules.plan import plan_json_schema
from kvrules.plugin.registry import AllocatorRegistry
from kvrules.plugin.rules import Check
from kvrules.specs.base import largest_divisor_at_most
from kvrules.values import MAX_BLOCKS, MAX_BYTES, MAX_DIMENSION, MAX_TOKENS

CFG = EngineConfig(max_model_len=4096)
GiB = 1 << 30


def full(block_size: Any = 16, **fields: Any) -> FullAttentionSpec:
    return FullAttentionSpec(
        block_size, **{"num_kv_heads": 8, "head_size": 128, "dtype": "bfloat16", **fields}
    )


# -- spec constructors ---------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [float("inf"), 1e400, float("nan"), -float("inf")])
def test_d4_a_mamba_dimension_that_is_infinite_or_nan_is_a_spec_error(dim: float) -> None:
    with pytest.raises(SpecError, match=r"MambaSpec\.shapes\[0\]\[0\]=(inf|nan|-inf) must be an integer"):
        MambaSpec(16, [[dim]], ["int8"])


def test_d4_the_model_file_form_with_infinity_is_a_spec_error_naming_the_layer() -> None:
    data = json.loads('{"type": "mamba", "block_size": 16, "shapes": [[Infinity]], "dtypes": ["int8"]}')
    with pytest.raises(SpecError, match=r"layer 'a'.*MambaSpec\.shapes\[0\]\[0\]=inf"):
        kvrules.spec_from_dict(data, layer="a")


@pytest.mark.parametrize(
    ("dim", "shown"),
    [(3.9, "3.9"), (True, "True"), ("3", "'3'"), (np.float64(3.0), "np.float64(3.0)"), (None, "None")],
)
def test_mamba_dimensions_that_are_not_integers_are_refused(dim: Any, shown: str) -> None:
    # 0.1.0 accepted 3.9 as 3, True as 1 and "3" as 3
    with pytest.raises(
        SpecError, match=rf"MambaSpec\.shapes\[0\]\[1\]={re.escape(shown)} must be an integer"
    ):
        MambaSpec(16, [[4, dim]], ["int8"])


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ("33", r"MambaSpec\.shapes='33' must be a list of shapes"),
        ([3], r"MambaSpec\.shapes\[0\]=3 must be a list of integers"),
        ([{"a": 3}], r"MambaSpec\.shapes\[0\]=\{'a': 3\} must be a list of integers"),
        ([[10**400]], r"MambaSpec\.shapes\[0\]\[0\]=<int of about 401 digits> must be <= 4294967296"),
    ],
)
def test_mamba_shapes_that_are_not_lists_of_bounded_integers_are_refused(shapes: Any, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        MambaSpec(16, shapes, ["int8"])


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: full(MAX_TOKENS + 1),
            rf"FullAttentionSpec\.block_size={MAX_TOKENS + 1} must be <= {MAX_TOKENS}",
        ),
        (lambda: full(16.0), r"FullAttentionSpec\.block_size=16\.0 must be an integer"),
        (lambda: full(True), r"FullAttentionSpec\.block_size=True must be an integer"),
        (lambda: full(num_kv_heads="8"), r"FullAttentionSpec\.num_kv_heads='8' must be an integer"),
        (lambda: full(head_size=MAX_DIMENSION + 1), r"FullAttentionSpec\.head_size=4294967297 must be <="),
        (lambda: full(page_size_padded=MAX_BYTES + 1), r"FullAttentionSpec\.page_size_padded=<int of about"),
        (lambda: full(sliding_window=2.5), r"FullAttentionSpec\.sliding_window=2\.5 must be an integer"),
        (
            lambda: SlidingWindowSpec(
                16, num_kv_heads=8, head_size=128, dtype="bfloat16", sliding_window=10**400
            ),
            r"SlidingWindowSpec\.sliding_window=<int of about 401 digits> must be <=",
        ),
        (
            lambda: MambaSpec(16, [[4]], ["int8"], num_speculative_blocks=1.0),
            r"MambaSpec\.num_speculative_blocks=1\.0 must be an integer",
        ),
        (lambda: full(0), r"FullAttentionSpec\.block_size=0 must be >= 1"),
    ],
)
def test_every_integer_field_is_an_integer_within_its_bound(build: Any, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        build()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: full(MAX_TOKENS, num_kv_heads=MAX_DIMENSION, head_size=MAX_DIMENSION),
            r"FullAttentionSpec\(block_size=1099511627776, num_kv_heads=4294967296, head_size=4294967296, "
            r"dtype='bfloat16'.*\) has a page of <int of about 33 digits> bytes, more than 9223372036854775807",
        ),
        (
            lambda: MambaSpec(16, [[MAX_DIMENSION, MAX_DIMENSION]], ["float32"]),
            r"MambaSpec\(shapes=\(\(4294967296, 4294967296\),\), dtypes=\('float32',\)\): the state tensors "
            r"up to shapes\[0\] hold more than 9223372036854775807 bytes",
        ),
        (
            lambda: UniformTypeKVCacheSpecs(
                16,
                {
                    "a": MambaSpec(16, [[1 << 31, 1 << 31]], ["int8"]),
                    "b": MambaSpec(16, [[1 << 31, 1 << 31]], ["int8"]),
                },
            ),
            r"UniformTypeKVCacheSpecs\(block_size=16\) has a page of <int of about 20 digits> bytes, more than "
            r"9223372036854775807",
        ),
    ],
)
def test_a_page_beyond_max_bytes_is_a_spec_error_naming_the_fields(build: Any, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        build()


def test_a_page_of_exactly_max_bytes_is_a_valid_spec() -> None:
    spec = MambaSpec(16, [[49, 73, 127, 337, 92737, 649657]], ["int8"])  # 2**63 - 1, factored
    assert spec.page_size_bytes == MAX_BYTES == (1 << 63) - 1


@pytest.mark.parametrize(
    "integer", [np.int64, np.int32, np.uint16, lambda v: torch.tensor(v, dtype=torch.int64)]
)
def test_numpy_and_torch_integers_are_normalised_to_int(integer: Any) -> None:
    specs = [
        (full(integer(16), num_kv_heads=integer(8)), full(16, num_kv_heads=8)),
        (
            SlidingWindowSpec(
                integer(16), num_kv_heads=8, head_size=integer(64), dtype="int8", sliding_window=integer(4)
            ),
            SlidingWindowSpec(16, num_kv_heads=8, head_size=64, dtype="int8", sliding_window=4),
        ),
        (
            MambaSpec(integer(16), [[integer(3), 8]], ["int8"], num_speculative_blocks=integer(2)),
            MambaSpec(16, [[3, 8]], ["int8"], num_speculative_blocks=2),
        ),
    ]
    for odd, plain in specs:
        assert odd == plain and hash(odd) == hash(plain)
        assert all(type(v) is int for v in _ints(odd)), odd
        assert json.loads(json.dumps(odd.to_dict())) == plain.to_dict()


def _ints(spec: KVCacheSpec) -> list[Any]:
    values: list[Any] = []
    for value in spec.field_values():
        if isinstance(value, tuple):
            values.extend(d for shape in value if isinstance(shape, tuple) for d in shape)
        elif not isinstance(value, (str, bool, type(None))) and not hasattr(value, "name"):
            values.append(value)
    return values


# -- D11: no work proportional to a block size -----------------------------------------------------


def slow_largest_divisor(number: int, limit: int) -> int:
    """0.1.0's scan: the reference for :func:`largest_divisor_at_most`."""
    return next(d for d in range(min(number, limit), 0, -1) if number % d == 0)


@given(st.integers(1, 5000), st.integers(1, 6000))
def test_largest_divisor_matches_the_linear_scan(number: int, limit: int) -> None:
    assert largest_divisor_at_most(number, limit) == slow_largest_divisor(number, limit)


@given(st.integers(1, 3000), st.integers(1, 4), st.integers(1, 64), st.integers(1, 1 << 16))
def test_aligned_to_matches_the_linear_scan(block: int, heads: int, head: int, page: int) -> None:
    spec = HiddenStateCacheSpec(16, num_kv_heads=heads, head_size=head, dtype="int8")
    expected = slow_largest_divisor(block, max(page // spec.token_bytes, 1))
    if expected * spec.token_bytes > page:
        with pytest.raises(SpecError, match="more than the common page"):
            spec.aligned_to(page, block)
        return
    aligned = spec.aligned_to(page, block)
    assert aligned.block_size == expected and aligned.page_size_bytes == page


def test_d11_a_hidden_state_layer_beside_a_huge_prime_block_size_plans_at_once() -> None:
    mamba = MambaSpec(1000000007, [[10**9]], ["int8"])
    hidden = HiddenStateCacheSpec(16, num_kv_heads=1, head_size=1, dtype="int8")
    start = time.perf_counter()
    plan = Planner("vllm").plan({"m": mamba, "h": hidden}, 2**62, CFG)  # 56.6 s in 0.1.0
    assert time.perf_counter() - start < 2.0
    assert plan.specs["h"].block_size == 1


def test_largest_divisor_of_the_largest_prime_block_size_is_fast() -> None:
    prime = 1099511627689  # the largest prime <= MAX_TOKENS: the worst case, ~2 * 2**20 remainders
    start = time.perf_counter()
    assert largest_divisor_at_most(prime, prime - 1) == 1
    assert largest_divisor_at_most(2 * prime, prime + 1) == prime
    assert time.perf_counter() - start < 2.0


# -- plan(): specs, available_memory, layer names --------------------------------------------------


@pytest.mark.parametrize(
    ("memory", "message"),
    [
        (None, r"available_memory = None is not allowed: an integer >= 0"),
        (1.5e9, r"available_memory = 1500000000\.0 is not allowed: an integer >= 0"),
        (-1, r"available_memory = -1 is not allowed"),
        (True, r"available_memory = True is not allowed"),
        ("40GiB", r"available_memory = '40GiB' is a string; .*kvrules\.units\.parse_size\('40GiB'\)"),
        (
            10**400,
            r"available_memory = <int of about 401 digits> is not allowed: at most 9223372036854775807",
        ),
        (
            MAX_BYTES + 1,
            r"available_memory = <int of about 20 digits> is not allowed: at most 9223372036854775807 bytes",
        ),
        ({"a": 1}, r"available_memory = \{'a': 1\} is not allowed: one number of bytes, or a list"),
        ([GiB, "2GiB"], r"available_memory has 2 values for 1 workers"),
    ],
)
def test_d9_available_memory_is_bytes_as_an_int_in_range(memory: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        kvrules.plan({"a": full()}, memory, CFG)


def test_d9_every_worker_s_memory_is_checked_by_index() -> None:
    with pytest.raises(ConfigError, match=r"available_memory\[1\] = 2\.5 is not allowed"):
        kvrules.plan([{"a": full()}, {"b": full()}], [GiB, 2.5], CFG)


@pytest.mark.parametrize("memory", [np.int64(GiB), np.uint64(GiB), torch.tensor(GiB), [np.int32(GiB)]])
def test_d9_numpy_and_torch_memory_is_normalised(memory: Any) -> None:
    plan = kvrules.plan({"a": full()}, memory, CFG)
    assert type(plan.workers[0].available_memory) is int
    assert plan.to_dict()["workers"][0]["available_memory"] == GiB
    assert plan == kvrules.plan({"a": full()}, GiB, CFG)


@pytest.mark.parametrize("strategies", ["vllm", "default"])
@pytest.mark.parametrize(
    ("specs", "message"),
    [
        ({0: full()}, r"^worker 0, layer name = 0 is not allowed: a non-empty string$"),
        ({"a": full(), b"b": full()}, r"^worker 0, layer name = b'b' is not allowed"),
        ({"": full()}, r"^worker 0, layer name = '' is not allowed"),
        ({"\ud800": full()}, r"layer name = '\\ud800' is not allowed: a string that can be written as UTF-8"),
        ([{"a": full()}, {1: full(32)}], r"^worker 1, layer name = 1 is not allowed"),
    ],
)
def test_d15_non_string_layer_names_are_refused_before_any_plugin_sees_them(
    specs: Any, message: str, strategies: str
) -> None:
    with pytest.raises(SpecError, match=message):
        Planner(strategies).plan(specs, GiB, CFG)


def test_d15_unify_refuses_non_string_layer_names_too() -> None:
    with pytest.raises(SpecError, match=r"^layer name = 0 is not allowed: a non-empty string$"):
        Planner("vllm").unify({0: full(), "b": full(32)})


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        ("model.json", r"specs = 'model\.json' is a string; specs must be a mapping of layer name to spec"),
        ([], r"specs is an empty list; specs must be"),
        ((), r"specs is an empty tuple; specs must be"),
        ([{"a": full()}, ["a"]], r"specs\[1\] = \['a'\] is not a mapping of layer name to spec"),
        ([full()], r"specs\[0\] = FullAttentionSpec\(.*is not a mapping"),
        (5, r"specs = 5 \(int\) is not allowed"),
        ({"a": 5}, r"layer 'a': 5 is not a KV-cache spec"),
    ],
)
def test_planner_specs_that_are_not_mappings_of_specs_are_spec_errors(specs: Any, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        kvrules.plan(specs, GiB, CFG)


# -- D8: integers beyond float range -------------------------------------------------------------


def test_d8_memory_beyond_float_range_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="available_memory = <int of about 401 digits>"):
        kvrules.plan({"a": full()}, 10**400, CFG)


@pytest.mark.parametrize(
    "config",
    [
        {"max_model_len": 10**300},
        {"max_model_len": 10**400},
        {"max_model_len": 10**400, "auto_fit_max_model_len": True},
        {"max_model_len": 4096, "num_gpu_blocks_override": 10**400},
        {"max_model_len": 4096, "max_num_batched_tokens": 10**400},
    ],
)
def test_d8_huge_engine_settings_are_a_kvrules_error(config: dict[str, Any]) -> None:
    # EngineConfig bounds its fields; planning must not overflow whatever gets through
    with pytest.raises(KVRulesError):
        kvrules.plan({"a": full()}, MAX_BYTES, EngineConfig(**config))


def test_d8_an_override_whose_tensors_exceed_max_bytes_is_a_capacity_error() -> None:
    config = EngineConfig(max_model_len=4096, num_gpu_blocks_override=MAX_BLOCKS)
    mamba = MambaSpec(16, [[1 << 20, 1 << 10]], ["int8"])  # a 1 GiB page
    with pytest.raises(
        CapacityError,
        match=r"num_gpu_blocks_override=281474976710656 blocks x 1073741824 bytes per block = "
        r"<int of about 24 digits> bytes on worker 0, more than 9223372036854775807 bytes .* use at most "
        r"8589934591 blocks",
    ):
        kvrules.plan({"m": mamba}, GiB, config)


def test_d8_the_largest_memory_and_length_plan_exactly() -> None:
    config = EngineConfig(max_model_len=MAX_TOKENS, auto_fit_max_model_len=True)
    plan = Planner("vllm").plan({"a": full(), "m": MambaSpec(16, [[4, 8]], ["int8"])}, MAX_BYTES, config)
    check_plan(plan, [MAX_BYTES])


def test_a_pool_holds_at_most_max_blocks_blocks() -> None:
    tiny = FullAttentionSpec(1, num_kv_heads=1, head_size=1, dtype="int8")  # a 2-byte page
    plan = kvrules.plan({"a": tiny}, MAX_BYTES, CFG)
    assert plan.num_blocks == plan.workers[0].own_num_blocks == MAX_BLOCKS
    assert plan.workers[0].tensors[0].size == 2 * MAX_BLOCKS
    (capped,) = [d for d in plan.decisions if d.rule == "max-blocks"]
    assert "9223372036854775807 bytes give 4611686018427387903 blocks" in capped.reason
    check_plan(plan, [MAX_BYTES])


def test_gib_is_exact_for_any_int() -> None:
    assert gib(10**400).startswith("9313225746154785156")
    assert gib(3 * (1 << 27)) == f"{3 * (1 << 27) / GiB:.2f} GiB" == "0.38 GiB"
    assert gib(1 << 27) == "0.12 GiB"  # half to even, like float formatting


# -- D17: allocation refuses sizes no tensor can have ----------------------------------------------


@dataclasses.dataclass(frozen=True)
class NeverAsked(Allocator):
    """An allocator that fails the test when asked anything."""

    name: str = "never-asked"
    priority: int = 1000

    def supports(self, device: str) -> Check:
        raise AssertionError("the allocator was asked about a plan kvrules should have refused")

    def buffer(self, nbytes: int, device: str) -> Any:
        raise AssertionError("the allocator was asked for a buffer")


class NeverAskedPlugin:
    name = "test-never-asked"

    @hookimpl
    def kvrules_register_allocators(self, registry: AllocatorRegistry) -> None:
        registry.add(NeverAsked())


def _edited(plan: Plan, **tensor: Any) -> Plan:
    worker = plan.workers[0]
    tensors = (msgspec.structs.replace(worker.tensors[0], **tensor), *worker.tensors[1:])
    return msgspec.structs.replace(plan, workers=(msgspec.structs.replace(worker, tensors=tensors),))


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (
            {"size": 10**30},
            r"tensor 0 of worker 0: size = <int of about 31 digits> is not allowed: at most 9223372036854775807",
        ),
        (
            {"size": MAX_BYTES + 1},
            r"tensor 0 of worker 0: size = <int of about 20 digits> is not allowed: at most 9223372036854775807",
        ),
        ({"size": -1}, r"tensor 0 of worker 0: size = -1 is not allowed"),
        ({"offset": 2**70}, r"tensor 0 of worker 0: offset = <int of about 22 digits> is not allowed"),
        ({"size": 1.5}, r"tensor 0 of worker 0: size = 1\.5 is not allowed"),
    ],
)
@pytest.mark.kvrules_pm(plugins=[NeverAskedPlugin()])
def test_d17_allocate_refuses_sizes_beyond_max_bytes_before_asking_the_allocator(
    tensor: dict[str, Any], message: str, kvrules_pm: KVRulesPluginManager
) -> None:
    plan = _edited(kvrules.plan({"a": full()}, GiB, CFG), **tensor)
    pm = kvrules_pm
    with pytest.raises(AllocationError, match=message):
        kvrules.allocate(plan, "meta", plugin_manager=pm)


def test_d17_an_edited_plan_file_for_1e30_bytes_is_an_allocation_error() -> None:
    data = kvrules.plan({"a": full()}, GiB, CFG).to_dict()
    data["workers"][0]["tensors"][0]["size"] = 10**30
    data["workers"][0]["num_blocks"] = data["num_blocks"] = 10**30 // full().page_size_bytes
    try:
        plan = Plan.from_dict(json.loads(json.dumps(data)))
    except KVRulesError:
        return  # refusing it when reading is as good
    with pytest.raises(
        AllocationError, match=r"worker 0: num_blocks = <int of about 26 digits> is not allowed"
    ):
        kvrules.allocate(plan, "meta")


# -- extreme in-bound values: a plan keeping every invariant, or a KVRulesError --------------------


def check_plan(plan: Plan, memories: list[int]) -> None:
    """The campaign's invariants that concern figures."""
    blocks = {w.num_blocks for w in plan.workers}
    assert len(blocks) == 1 and plan.num_blocks >= 0
    for worker, memory in zip(plan.workers, memories, strict=True):
        assert worker.available_memory <= MAX_BYTES
        if plan.config.num_gpu_blocks_override is None:
            assert worker.available_memory == memory
        assert all(0 <= t.size <= MAX_BYTES for t in worker.tensors)
        assert worker.allocated_bytes <= worker.available_memory
    if math.isinf(plan.max_concurrency):
        assert plan.capacity_tokens == 0
    else:
        assert plan.capacity_tokens == math.floor(plan.max_concurrency * plan.max_model_len)
    data = plan.to_dict()
    assert json.loads(plan.to_json()) == data
    jsonschema.validate(data, plan_json_schema())
    assert Plan.from_dict(data).to_dict() == data


def _sizes(top: int) -> st.SearchStrategy[int]:
    """1, small, powers of two and anything up to ``top`` (inclusive)."""
    powers = st.integers(0, top.bit_length() - 1).map(lambda bits: 1 << bits)
    return st.sampled_from([1, 16, top]) | powers | st.integers(1, top)


@st.composite
def extreme_spec(draw: Any) -> tuple[type[KVCacheSpec], tuple[Any, ...], dict[str, Any]]:
    """``(class, args, fields)``: built in the test, where a SpecError is an outcome too."""
    kind = draw(st.sampled_from([FullAttentionSpec, SlidingWindowSpec, MambaSpec, HiddenStateCacheSpec]))
    block = draw(_sizes(MAX_TOKENS))
    if kind is MambaSpec:
        dims = draw(st.lists(_sizes(MAX_DIMENSION), min_size=1, max_size=3))
        extra = draw(st.sampled_from([0, 4, MAX_TOKENS]))
        return kind, (block, [dims], ["int8"]), {"num_speculative_blocks": extra}
    fields: dict[str, Any] = {
        "num_kv_heads": draw(_sizes(MAX_DIMENSION)),
        "head_size": draw(_sizes(MAX_DIMENSION)),
        "dtype": draw(st.sampled_from(["int8", "float32"])),
    }
    if kind is SlidingWindowSpec:
        fields["sliding_window"] = draw(_sizes(MAX_TOKENS))
    return kind, (block,), fields


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(extreme_spec(), min_size=1, max_size=3),
    memory=st.sampled_from([0, 1, GiB, 1 << 62, MAX_BYTES]) | st.integers(0, MAX_BYTES),
    length=st.sampled_from([1, 4096, MAX_TOKENS]) | st.integers(1, MAX_TOKENS),
    override=st.none() | st.sampled_from([1, MAX_BLOCKS]) | st.integers(1, MAX_BLOCKS),
    auto_fit=st.booleans(),
    batched=st.sampled_from([0, 2048, MAX_TOKENS]),
    strategies=st.sampled_from(["vllm", "default"]),
)
def test_extreme_in_bound_values_plan_or_raise_a_kvrules_error(
    specs: list[tuple[type[KVCacheSpec], tuple[Any, ...], dict[str, Any]]],
    memory: int,
    length: int,
    override: int | None,
    auto_fit: bool,
    batched: int,
    strategies: str,
) -> None:
    try:
        layers = {f"l{i}": kind(*args, **fields) for i, (kind, args, fields) in enumerate(specs)}
        config = EngineConfig(
            max_model_len=length,
            num_gpu_blocks_override=override,
            auto_fit_max_model_len=auto_fit,
            max_num_batched_tokens=batched,
        )
        plan = Planner(strategies).plan(layers, memory, config)
    except KVRulesError as error:
        event(f"refused: {type(error).__name__}")
        return
    event("planned")
    check_plan(plan, [memory])
    try:
        allocation = kvrules.allocate(plan, "meta")
    except KVRulesError as error:
        event(f"allocation refused: {type(error).__name__}")
        return
    assert allocation.nbytes <= plan.workers[0].available_memory


def test_the_grouping_search_asks_each_distinct_shape_once_in_closed_form() -> None:
    """``shape_changes`` finds the first size of every distinct ``cdiv(length, size)`` shape that a
    scan over every size from 1 to the longest bucket finds, with O(sqrt) sizes, not one per layer."""
    from kvrules.grouping import shape_changes
    from kvrules.specs.base import cdiv

    def scan(lengths: list[int]) -> list[int]:
        seen: set[tuple[int, ...]] = set()
        first = []
        for size in range(1, max(lengths) + 1):
            shape = tuple(cdiv(n, size) for n in lengths)
            if shape not in seen:
                seen.add(shape)
                first.append(size)
        return first

    def firsts(lengths: list[int]) -> list[int]:
        seen: set[tuple[int, ...]] = set()
        out = []
        for size in shape_changes(lengths):
            shape = tuple(cdiv(n, size) for n in lengths)
            if shape not in seen:
                seen.add(shape)
                out.append(size)
        return out

    for lengths in ([1], [7], [48], [36, 12], [100, 99, 3], [0, 5], [64, 64, 1], [97, 250, 13, 2]):
        assert firsts(lengths) == scan(lengths), lengths
    assert shape_changes([0, 0]) == []
    assert len(shape_changes([875_000, 125_000])) < 4_000  # a scan would ask 875,000 sizes
