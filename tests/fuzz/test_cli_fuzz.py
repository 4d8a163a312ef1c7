"""Model files and Hugging Face configs under fuzz, through ``kvrules.cli.main.main`` in a forked
child each: mutated shipped examples and hostile flags end in exit 0 (a plan that keeps every
invariant) or exit 2 with a ``kvrules: error:`` message; never a traceback, a crash or a hang.

The first tests check the forked runner itself on stand-in commands.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from fuzz.ci import ci, expect_sound, seeded_sample
from fuzz.cli_cases import TINY, hf_case, model_case, run_cli_case, show_cli_case, shrink_cli
from fuzz.draw import strategy
from fuzz.forked import classify, fork_main
from fuzz.mutate import apply, dumps


def _sleeps(argv: list[str]) -> int:
    time.sleep(60)
    return 0


def _raises(argv: list[str]) -> int:
    raise TypeError("unhashable type: 'list'")


def _refuses(argv: list[str]) -> int:
    print("kvrules: error: layer 'a': block_size=0 is not allowed", file=sys.stderr)
    return 2


def _exhausts(argv: list[str]) -> int:
    return len(bytearray(1 << 40))


def _prints_a_surrogate(argv: list[str]) -> int:
    print("layer \ud800")
    return 0


@pytest.mark.parametrize(
    ("target", "kind", "error_type"),
    [
        (_sleeps, "hang", "Hang"),
        (_raises, "other", "TypeError"),
        (_refuses, "error", ""),
        (_exhausts, "other", "MemoryError"),
        (_prints_a_surrogate, "other", "UnicodeEncodeError"),
    ],
)
def test_the_forked_runner_tells_how_a_command_ended(target: Any, kind: str, error_type: str) -> None:
    started = time.monotonic()
    outcome = classify(fork_main([], seconds=1, target=target))
    assert (outcome.kind, outcome.error_type) == (kind, error_type), outcome
    assert time.monotonic() - started < 8


def test_mutations_replay_to_the_same_bytes() -> None:
    ops = [
        {"op": "set", "at": 3, "value": 0},
        {"op": "flip", "at": 5, "byte": 255},
        {"op": "dup", "at": 1, "value": 1},
    ]
    assert apply(TINY, ops) == apply(TINY, ops)
    assert apply(TINY, []) == dumps(TINY).encode()
    assert b"\xff" in apply(TINY, ops[1:2])


def test_a_plan_from_a_shipped_example_passes(tmp_path: Path) -> None:
    case = {"kind": "model", "example": "tiny", "ops": [], "command": "plan", "flags": []}
    assert run_cli_case(case, tmp_path).kind == "ok"


@ci(150)
@given(case=strategy(model_case))
def test_mutated_model_files_exit_0_or_2(case: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    work = tmp_path_factory.getbasetemp() / "fuzz-model"
    work.mkdir(exist_ok=True)
    expect_sound(case, lambda c: run_cli_case(c, work), shrink_cli, show_cli_case)


@ci(100)
@given(case=strategy(hf_case))
def test_mutated_hf_configs_exit_0_or_2(case: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    work = tmp_path_factory.getbasetemp() / "fuzz-hf"
    work.mkdir(exist_ok=True)
    expect_sound(case, lambda c: run_cli_case(c, work), shrink_cli, show_cli_case)


@pytest.mark.parametrize(("kind", "count"), [("model", 300), ("hf", 200)])
def test_a_seeded_sample_exits_0_or_2(kind: str, count: int, tmp_path: Path) -> None:
    gen = model_case if kind == "model" else hf_case
    seeded_sample(
        gen, lambda c: run_cli_case(c, tmp_path), shrink_cli, show_cli_case, count=count, prefix=f"ci-{kind}"
    )
