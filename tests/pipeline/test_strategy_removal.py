"""``-name`` in strategy sets: ``"default,-min-padding"`` removes a rule from the base set, through
the Python API and the command line (architecture §7, issue 14)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cli_helpers import run_cli as run

import kvrules
from kvrules import EngineConfig, Planner, PluginError, resolve_strategies
from kvrules.examples import load_example
from kvrules.plan import Plan
from kvrules.plugin import Grouper, hookimpl

GEMMA = load_example("gemma3-27b")  # groupers decide its groups: min-padding and vllm-group-size
CONFIG = EngineConfig(max_model_len=131072)


def active(strategies: Any) -> dict[str, list[str]]:
    """The active rule names of each kind."""
    chosen = Planner(strategies).strategies
    return {kind: [r.name for r in rules] for kind, rules in chosen.active.items()}


def gemma_plan(strategies: Any) -> Plan:
    return Planner(strategies).plan(GEMMA.specs, 20 << 30, CONFIG)


def test_a_removal_drops_one_rule_from_the_default_set() -> None:
    default, removed = active(None), active("default,-min-padding")
    assert "min-padding" in default["grouper"]
    assert removed["grouper"] == [r for r in default["grouper"] if r != "min-padding"] == ["vllm-group-size"]
    assert {k: v for k, v in removed.items() if k != "grouper"} == {
        k: v for k, v in default.items() if k != "grouper"
    }


@pytest.mark.parametrize(
    "spelling", ["default,-min-padding", "-min-padding", ["default", "-min-padding"], ["-min-padding"]]
)
def test_every_spelling_resolves_alike(spelling: Any) -> None:
    chosen = Planner(spelling).strategies
    assert chosen.name == "default+-min-padding"
    assert chosen.names() == [n for n in Planner().strategies.names() if n != "min-padding"]


def test_a_removal_does_not_count_as_naming_its_kind() -> None:
    default = active(None)["layer-strategy"]
    assert active(["default", "-stride-pad"])["layer-strategy"] == [r for r in default if r != "stride-pad"]
    assert active(["default", "stride-pad"])["layer-strategy"] == ["stride-pad"]  # a name replaces
    assert active("default,stride-pad,-min-padding")["layer-strategy"] == ["stride-pad"]


def test_a_removal_starts_from_the_preset_named_first() -> None:
    chosen = Planner("vllm,-stride-pad").strategies
    assert chosen.name == Planner("vllm").strategies.name + "+-stride-pad"  # the preset as resolved
    assert "stride-pad" not in chosen.names()
    vllm = Planner("vllm").strategies.names()
    assert chosen.names() == [n for n in vllm if n != "stride-pad"]


def test_the_plan_records_the_set_as_resolved_and_keeps_its_invariants() -> None:
    plan = gemma_plan("default,-min-padding")
    assert plan.strategy_set == "default+-min-padding"
    data = json.loads(plan.to_json())
    assert data == plan.to_dict() and data["strategy_set"] == "default+-min-padding"
    assert Plan.from_dict(data).to_dict() == data
    assert "min-padding" not in {d.rule for d in plan.decisions}


def test_decisions_are_those_of_the_same_rules_named_positively() -> None:
    removed = gemma_plan("default,-min-padding").to_dict()
    named = gemma_plan(["default", "vllm-group-size"]).to_dict()  # the same active rules
    assert removed.pop("strategy_set") == "default+-min-padding"
    assert named.pop("strategy_set") == "default+vllm-group-size"
    assert removed == named


def test_removing_every_rule_of_a_kind_fails_at_planning_naming_it() -> None:
    planner = Planner("default,-min-padding,-vllm-group-size")
    assert planner.strategies.rules("grouper") == ()
    with pytest.raises(kvrules.KVRulesError, match="no active grouper"):
        planner.plan(GEMMA.specs, 20 << 30, CONFIG)


@pytest.mark.parametrize(
    ("strategies", "message"),
    [
        ("default,-nope", r"unknown rule 'nope' in the removal '-nope'; available presets: default, vllm"),
        (["-nope"], r"unknown rule 'nope' .*; rules: attention-free, .*block-scale"),
        ("default,nope", r"unknown rule 'nope' in the strategy list; available presets: default"),
        ("nope", r"unknown strategy set 'nope'; available presets: default, vllm"),
        ("vllm,-min-padding", r"cannot remove 'min-padding': it is not in the strategy set 'vllm' "),
        ("-min-padding,-min-padding", r"cannot remove 'min-padding': it is not in the strategy set"),
        ("-vllm", r"'-vllm' in the strategy list: only rules can be removed, and 'vllm' is a preset"),
        ("-", r"unknown rule '' in the removal '-'"),
        ("stride-pad,-stride-pad", r"both names and removes stride-pad"),
        ("-stride-pad,vllm", r"preset 'vllm' may only come first"),
        (" , ", r"strategies = ' , ' names no preset and no rule"),
    ],
)
def test_bad_strategy_lists_name_the_culprit(strategies: Any, message: str) -> None:
    with pytest.raises(PluginError, match=message):
        resolve_strategies(strategies, kvrules.default_manager().registries.rules)


def test_the_not_in_set_error_lists_what_the_set_has() -> None:
    with pytest.raises(PluginError, match=r"\(its grouper rules: vllm-group-size\)"):
        Planner("vllm,-min-padding")


class DashRule(Grouper):
    """A grouper that never applies (it exists to be registered)."""


class DashPlugin:
    """Registers a grouper named ``name``: built with it, or renamed to it afterwards."""

    name = "dash-plugin"

    def __init__(self, rule_name: str, *, rename: bool) -> None:
        self.rule_name, self.rename = rule_name, rename

    @hookimpl
    def kvrules_register_rules(self, registry: Any) -> None:
        if self.rename:
            rule = DashRule(name="dash-ok")
            object.__setattr__(rule, "name", self.rule_name)
        else:
            rule = DashRule(name=self.rule_name)
        registry.add(rule)


@pytest.mark.parametrize("rename", [False, True])
def test_a_rule_name_may_not_start_with_a_dash(rename: bool) -> None:
    plugin = DashPlugin("-min-padding", rename=rename)
    pm = kvrules.get_plugin_manager(autoload=False, plugins=[plugin])
    with pytest.raises(PluginError, match=r"'-min-padding' is invalid: use lower-case words") as info:
        pm.registries  # noqa: B018 (collected on first use)
    assert "plugin 'dash-plugin'" in str(info.value)


# -- the command line -----------------------------------------------------------------------------


def test_cli_removal_joined_with_equals(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", "--example", "gemma3-27b", "--strategies=-min-padding")
    assert code == 0, err
    assert "strategy set: default+-min-padding" in out


def test_cli_removal_after_a_preset(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, "plan", "--example", "gemma3-27b", "--json", "--strategies", "default,-min-padding"
    )
    assert code == 0, err
    assert json.loads(out)["strategy_set"] == "default+-min-padding"


def test_cli_removal_as_a_separate_word_says_how_to_write_it(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", "--example", "gemma3-27b", "--strategies", "-min-padding")
    assert code == 2 and not out
    assert "argument --strategies: expected one argument" in err
    assert "must be joined to its flag: --strategies=-min-padding" in err
    assert "Traceback" not in err


def test_cli_strategies_listing_shows_the_removed_rule_inactive(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "strategies", "--strategies=-min-padding")
    assert code == 0, err
    [row] = [line for line in out.splitlines() if line.strip().startswith("min-padding ")]
    assert " no " in row
    [row] = [line for line in out.splitlines() if line.strip().startswith("vllm-group-size ")]
    assert " yes " in row


def test_cli_unknown_removal_lists_the_names(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--example", "gemma3-27b", "--strategies=default,-min-paddin")
    assert code == 2
    assert "unknown rule 'min-paddin' in the removal '-min-paddin'" in err and "min-padding" in err
