"""The core's checks of a grouping and of a layout's tensors name the layer at fault, whatever
the fault (unknown, repeated within or across, not a string, unhashable, missing)."""

from __future__ import annotations

from itertools import pairwise, zip_longest

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvrules import FullAttentionSpec, KVCacheGroup, KVCacheTensor, plan_checks
from kvrules.plugin.answers import groups_problem, partition_problem, tensors_problem

SPEC = FullAttentionSpec(16, num_kv_heads=2, head_size=64, dtype="bfloat16")
WIDE = FullAttentionSpec(16, num_kv_heads=4, head_size=64, dtype="bfloat16")
SPECS = {"a.0": SPEC, "a.1": SPEC, "b.0": SPEC, "b.1": SPEC}


class Name(str):
    """A str subclass: equal to a layer name, but not a layer name the core accepts."""


def groups(*layers: tuple[object, ...]) -> list[KVCacheGroup]:
    return [KVCacheGroup(names, SPEC) for names in layers]  # type: ignore[arg-type]


def test_a_partition_passes() -> None:
    assert groups_problem(groups(("a.0", "a.1"), ("b.0", "b.1")), SPECS) is None


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (groups(("a.0", "a.1"), ("b.0",)), "left 1 layer(s) out of every group, e.g. b.1"),
        (groups(("a.0", "a.1"), ("b.0", "b.1", "c.9")), "placed unknown layer 'c.9' in group 1"),
        (groups(("a.0", "a.1", "a.0"), ("b.0", "b.1")), "placed layer 'a.0' in groups 0 and 0"),
        (groups(("a.0", "a.1"), ("b.0", "a.1")), "placed layer 'a.1' in groups 0 and 1"),
        (groups(("a.0", "a.1"), ("b.0", 7)), "placed unknown layer 7 in group 1"),
        (groups(("a.0", "a.1"), ("b.0", ["b.1"])), "placed unknown layer ['b.1'] in group 1"),
        (groups(("a.0", "a.1"), ("b.0", Name("b.1"))), "placed unknown layer 'b.1' in group 1"),
    ],
)
def test_a_wrong_grouping_names_the_layer(answer: list[KVCacheGroup], message: str) -> None:
    assert groups_problem(answer, SPECS) == message


def test_a_partitioner_may_leave_layers_out() -> None:
    assert groups_problem(groups(("a.0",)), SPECS, complete=False) is None


def test_a_pooled_group_of_two_pages_is_refused() -> None:
    specs = {**SPECS, "b.1": WIDE}
    assert groups_problem(groups(("a.0", "a.1"), ("b.0", "b.1")), specs) == (
        f"pooled layer 'b.1' (page {WIDE.page_size_bytes} bytes) in group 1, whose page is "
        f"{SPEC.page_size_bytes} bytes; a pooled group holds one page size"
    )


GROUPS = [KVCacheGroup(("a.0", "a.1"), SPEC), KVCacheGroup(("b.0", "b.1"), SPEC)]
PAGE = SPEC.page_size_bytes


def tensors(*layers: tuple[object, ...], blocks: int = 10) -> tuple[KVCacheTensor, ...]:
    return tuple(KVCacheTensor(PAGE * blocks, names) for names in layers)  # type: ignore[arg-type]


def test_tensors_covering_every_layer_once_pass() -> None:
    assert tensors_problem(tensors(("a.0", "b.0"), ("a.1", "b.1")), GROUPS, 1 << 30, 10) is None


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (tensors(("a.0", "b.0"), ("a.1",)), "left 1 layer(s) in no tensor, e.g. b.1"),
        (
            tensors(("a.0", "b.0"), ("a.1", "b.1", "c.9")),
            "put layer 'c.9', which is not on this worker, in tensor 1",
        ),
        (
            tensors(("a.0", "b.0"), ("a.1", "b.1", "a.0")),
            "put layer 'a.0' in more than one tensor (again in tensor 1)",
        ),
        (
            tensors(("a.0", "b.0", "b.0"), ("a.1", "b.1")),
            "put layer 'b.0' in more than one tensor (again in tensor 0)",
        ),
        (tensors(("a.0", "b.0"), ("a.1", 3)), "put layer 3, which is not on this worker, in tensor 1"),
        (
            tensors(("a.0", "b.0"), ("a.1", Name("b.1"))),
            "put layer 'b.1', which is not on this worker, in tensor 1",
        ),
        (
            tensors(("a.0", "b.0"), ("a.1", "b.1"), blocks=9),
            f"made tensor 0 of {PAGE * 9} bytes, less than 10 blocks of {PAGE} bytes for a.0, b.0",
        ),
    ],
)
def test_wrong_tensors_name_the_layer(answer: tuple[KVCacheTensor, ...], message: str) -> None:
    assert tensors_problem(answer, GROUPS, 1 << 30, 10) == message


def test_a_tensor_is_sized_for_its_widest_layer() -> None:
    mixed = [KVCacheGroup(("a.0", "a.1"), SPEC), KVCacheGroup(("b.0", "b.1"), WIDE)]
    too_small = tensors(("a.0", "b.0"), ("a.1", "b.1"))
    assert tensors_problem(too_small, mixed, 1 << 30, 10) == (
        f"made tensor 0 of {PAGE * 10} bytes, less than 10 blocks of {WIDE.page_size_bytes} bytes for a.0, b.0"
    )
    wide = tuple(KVCacheTensor(WIDE.page_size_bytes * 10, t.shared_by) for t in too_small)
    assert tensors_problem(wide, mixed, 1 << 30, 10) is None


def test_a_partition_leaves_the_other_layers_in_order() -> None:
    problem, left = partition_problem(groups(("a.1", "b.0")), {"b.1": SPEC, "a.0": SPEC}, SPECS)
    assert problem is None
    assert list(left) == ["a.0", "b.1"]


@pytest.mark.parametrize(
    ("remaining", "message"),
    [
        (
            {"a.0": SPEC, "b.1": SPEC, "b.0": SPEC},
            "left layer 'b.0' in both its groups and the remaining specs",
        ),
        (
            {"a.0": SPEC, "b.1": WIDE},
            "left layer 'b.1' in both its groups and the remaining specs, or changed it",
        ),
        (
            {"a.0": SPEC, "b.1": SPEC, "z.9": SPEC},
            "left layer 'z.9' in both its groups and the remaining specs",
        ),
        ({"a.0": SPEC}, "left layer 'b.1' neither in a group nor in the remaining specs"),
    ],
)
def test_a_partition_whose_remaining_specs_are_wrong_is_refused(
    remaining: dict[str, FullAttentionSpec], message: str
) -> None:
    problem, left = partition_problem(groups(("a.1", "b.0")), remaining, SPECS)
    assert problem is not None and problem.startswith(message)
    assert left == {}


# -- the tensors check's shortcut: layers listed in group order -----------------------------------

ROWS = {"a": [f"a.{i}" for i in range(5)], "b": [f"b.{i}" for i in range(5)], "c": ["c.0", "c.1", "c.2"]}
POOL = [KVCacheGroup(tuple(names), SPEC) for names in ROWS.values()]


@st.composite
def arrangements(draw: st.DrawFn) -> tuple[KVCacheTensor, ...]:
    """The shared pool's rows (tensor i = layer i of every group), cut anew, some layers moved,
    dropped, repeated or foreign, and some tensors sized one block short."""
    names = [n for row in zip_longest(*ROWS.values()) for n in row if n is not None]
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["swap", "drop", "repeat", "foreign"]))
        at = draw(st.integers(0, len(names) - 1))
        if kind == "swap":
            other = draw(st.integers(0, len(names) - 1))
            names[at], names[other] = names[other], names[at]
        elif kind == "drop":
            del names[at]
        elif kind == "repeat":
            names.insert(draw(st.integers(0, len(names))), names[at])
        else:
            names[at] = "z.9"
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(names) - 1)), max_size=6))))
    bounds = [0, *cuts, len(names)]
    short = draw(st.booleans())
    return tuple(
        KVCacheTensor(PAGE * (9 if short and i == 0 else 10), tuple(names[a:b]))
        for i, (a, b) in enumerate(pairwise(bounds))
    )


@settings(max_examples=300, deadline=None)
@given(arrangements())
def test_the_group_order_shortcut_gives_the_general_checks_verdict(answer: tuple[KVCacheTensor, ...]) -> None:
    """Tensors listing the layers in group order are accepted by comparing two lists; any other
    answer goes to the general check. Either way the verdict is the general check's own."""
    shortcut = tensors_problem(answer, POOL, 1 << 30, 10)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plan_checks, "_in_group_order", lambda tensors, groups: False)
        general = tensors_problem(answer, POOL, 1 << 30, 10)
    assert shortcut == general


def test_the_shortcut_takes_only_the_group_order() -> None:
    rows = tuple(KVCacheTensor(PAGE * 10, tuple(r for r in row if r)) for row in zip_longest(*ROWS.values()))
    assert plan_checks._in_group_order(rows, POOL)
    assert not plan_checks._in_group_order(rows[::-1], POOL)
    assert not plan_checks._in_group_order((*rows, KVCacheTensor(PAGE * 10, ("a.0",))), POOL)
    bad = (KVCacheTensor(PAGE * 10, 5), *rows[1:])  # type: ignore[arg-type]
    assert not plan_checks._in_group_order(bad, POOL)
    assert tensors_problem(bad, POOL, 1 << 30, 10) == (
        "gave tensor 0 shared_by = 5; it must be a tuple of layer names"
    )


# -- layer names compared as names, whatever objects carry them ---------------------------------

MODEL = {f"l.{i}": [SPEC, WIDE, SPEC][i % 3] for i in range(14)}


def test_names_equal_to_the_layers_but_other_objects_are_accepted() -> None:
    """Equal strings made anew pass the groups and the tensors checks (the group-order shortcut
    compares names by identity first, then by value)."""
    layers = {spec: [n for n, s in MODEL.items() if s is spec] for spec in (SPEC, WIDE)}
    anew = [KVCacheGroup(tuple("".join(list(n)) for n in layers[s]), s) for s in (SPEC, WIDE)]
    assert all(a is not b for a, b in zip(anew[0].layer_names, layers[SPEC], strict=True))
    assert groups_problem(anew, MODEL) is None
    rows = tuple(KVCacheTensor(PAGE * 10, tuple(r for r in row if r)) for row in zip_longest(*ROWS.values()))
    copies = tuple(KVCacheTensor(t.size, tuple("".join(list(n)) for n in t.shared_by)) for t in rows)
    assert plan_checks._in_group_order(copies, POOL) and tensors_problem(copies, POOL, 1 << 30, 10) is None
