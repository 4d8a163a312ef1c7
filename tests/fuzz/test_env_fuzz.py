"""Environment values (issue 25 R7): every variable kvrules reads, set to drawn values, means
what the documentation says or ends in exit 2 naming the variable; never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from fuzz.ci import ci, expect_sound, seeded_sample
from fuzz.draw import strategy
from fuzz.env_cases import BOOLEANS, env_case, run_env_case, show_env, shrink_env
from kvrules.plugin.manager import AUTOLOAD_ENV, TRACE_ENV
from kvrules.plugin.patches import STRICT_ENV
from kvrules.switches import ON

DOCUMENTED = ("1", "true", "YES", " on ", "0", "False", "no", "OFF", "", "\t")
UNDOCUMENTED = ("maybe", "é", "\uff11", "truee", "2", "\udcff", "a" * 5000)


@pytest.mark.parametrize("value", DOCUMENTED + UNDOCUMENTED)
@pytest.mark.parametrize("name", [AUTOLOAD_ENV, TRACE_ENV, STRICT_ENV])
def test_a_switch_means_its_documented_value_or_is_refused_naming_it(
    name: str, value: str, tmp_path: Path
) -> None:
    case = {"env": {name: value}, "command": "plan", "patcher": True}
    outcome = run_env_case(case, tmp_path)
    # not a boolean: refused; KVRULES_STRICT_PLUGINS on: the patching plugin is refused
    refused = value in UNDOCUMENTED or (name == STRICT_ENV and value.strip().lower() in ON)
    assert outcome.kind == ("error" if refused else "ok"), outcome


def test_the_vllm_switches_are_read_at_plugin_load(tmp_path: Path) -> None:
    case = {
        "env": {"KVRULES_VLLM_STRATEGIES": "vllm", "KVRULES_VLLM_STRICT": "maybe"},
        "command": "vllm-plugin",
        "patcher": False,
    }
    outcome = run_env_case(case, tmp_path)
    assert outcome.kind == "error" and "KVRULES_VLLM_STRICT" in outcome.detail, outcome
    assert "KVRULES_VLLM_STRICT" in BOOLEANS


@ci(120)
@given(case=strategy(env_case))
def test_drawn_environments_mean_what_they_say(case: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    work = tmp_path_factory.getbasetemp() / "fuzz-env"
    work.mkdir(exist_ok=True)
    expect_sound(case, lambda c: run_env_case(c, work), shrink_env, show_env)


def test_a_seeded_sample_of_environments_means_what_it_says(tmp_path: Path) -> None:
    seeded_sample(
        env_case, lambda c: run_env_case(c, tmp_path), shrink_env, show_env, count=150, prefix="ci-env"
    )
