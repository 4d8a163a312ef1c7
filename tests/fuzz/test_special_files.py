"""Special files (issue 25 R2) in every slot of every command that reads a file: a FIFO,
``/dev/zero`` (and a link to it), ``/dev/null``, a directory, a dangling link, a link loop, a
socket, an over-size sparse file, an empty file and (not as root) an unreadable one each end in
exit 2 with a ``kvrules: error:`` line naming the path, within seconds; never a hang."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from fuzz.ci import ci, expect_sound
from fuzz.cli_cases import WARM_UP
from fuzz.draw import strategy
from fuzz.forked import warm_up
from fuzz.special_cases import (
    ALL_KINDS,
    SECONDS,
    SLOTS,
    run_special_case,
    show_special,
    shrink_special,
    special_case,
)

PLACES = [(slot, command) for slot, commands in sorted(SLOTS.items()) for command in commands]


@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize(("slot", "command"), PLACES)
def test_a_special_file_is_refused_naming_it(kind: str, slot: str, command: str, tmp_path: Path) -> None:
    if kind == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads a file without read permission")
    case = {"kind": kind, "slot": slot, "command": command, "name": "model.json", "flags": []}
    warm_up(WARM_UP)  # once per session, not the input's time
    started = time.monotonic()
    outcome = run_special_case(case, tmp_path)
    assert outcome.kind == "error", outcome
    assert time.monotonic() - started < SECONDS


@pytest.mark.parametrize("name", ["mödel ✓ file.json", "x" * 150 + ".json"])
def test_an_odd_name_is_named_too(name: str, tmp_path: Path) -> None:
    case = {"kind": "fifo", "slot": "model", "command": "plan", "name": name, "flags": []}
    assert run_special_case(case, tmp_path).kind == "error"


@ci(60)
@given(case=strategy(special_case))
def test_drawn_special_files_are_refused_naming_them(
    case: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    work = tmp_path_factory.getbasetemp() / "fuzz-special"
    expect_sound(case, lambda c: run_special_case(c, work), shrink_special, show_special)
