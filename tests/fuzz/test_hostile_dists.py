"""Hostile plugin distributions, installed (issue 25 item 4): each is found through its entry
point as an installed package is, and ends in a clean error naming it, or in a plan where every
patch it made to kvrules is named (``kvrules strategies``, a PluginPatchWarning, a ``load``
decision; refused under KVRULES_STRICT_PLUGINS) and every wrong answer is blamed on it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

import kvrules
from fuzz.hostile_dists import DISTS, install, make_venv, pip_install, run_with

ROOT = Path(__file__).resolve().parents[2]
PATCHES = {
    "patch-method": "FullAttentionSpec.max_memory_usage_bytes added",
    "patch-property": "FullAttentionSpec.page_size_bytes added",
    "patch-function": "kvrules.plan replaced",
    "odd-name": "FullAttentionSpec.kvrules_odd_helper added",
}


def _run(key: str, tmp_path: Path, argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    report = run_with(install(tmp_path / key, DISTS[key]), argv, env)
    assert "exc" not in report and not report.get("hang"), report
    assert "Traceback" not in report["stderr"], report["stderr"][-2000:]
    return report


def _errors(report: dict[str, Any]) -> list[str]:
    return [line for line in report["stderr"].splitlines() if line.startswith("kvrules: error: ")]


def _label(key: str) -> str:
    dist = DISTS[key]
    return f"plugin {dist.entry!r} ({dist.name} 1.0)"


@pytest.mark.parametrize("key", ["raises", "no-module"])
@pytest.mark.parametrize("argv", [["strategies"], ["plan", "--example", "llama3-8b"]])
def test_an_entry_point_that_does_not_load_is_refused_naming_it(
    key: str, argv: list[str], tmp_path: Path
) -> None:
    report = _run(key, tmp_path, argv)
    assert report["rc"] == 2
    assert any(f'"{DISTS[key].entry}"' in line for line in _errors(report)), report["stderr"]


def test_an_entry_point_that_is_no_module_does_not_break_kvrules(tmp_path: Path) -> None:
    report = _run("not-a-plugin", tmp_path, ["plan", "--example", "llama3-8b"])
    assert report["rc"] == 0  # an object with no hooks: registered, and it answers nothing


@pytest.mark.parametrize("key", sorted(PATCHES))
def test_a_patch_is_named_in_strategies_and_warned(key: str, tmp_path: Path) -> None:
    report = _run(key, tmp_path, ["strategies"])
    assert report["rc"] == 0
    stdout = report["stderr"].partition("\n[stdout]\n")[2]
    assert f"patched: {_label(key)} patched kvrules when loaded" in stdout
    assert PATCHES[key] in stdout
    warned = report["stderr"].partition("\n[stdout]\n")[0]
    assert "PluginPatchWarning" in warned and _label(key) in warned


@pytest.mark.parametrize("key", sorted(PATCHES))
def test_a_plan_records_the_patch_and_strict_refuses_it(key: str, tmp_path: Path) -> None:
    report = _run(key, tmp_path, ["plan", "--example", "llama3-8b", "--json"])
    assert report["rc"] in (0, 2)  # doubled pages may leave too little memory: a CapacityError
    if report["rc"] == 0:
        stdout = report["stderr"].partition("\n[stdout]\n")[2]
        # read as data: this (unpatched) process would rightly not take it as a plan kvrules made
        load = [d for d in json.loads(stdout)["decisions"] if d["stage"] == "load"]
        assert [d["rule"] for d in load] == [DISTS[key].entry] and PATCHES[key] in load[0]["reason"]
    strict = _run(
        key, tmp_path / "strict", ["plan", "--example", "llama3-8b"], {"KVRULES_STRICT_PLUGINS": "1"}
    )
    assert strict["rc"] == 2
    assert any(_label(key) in line and "KVRULES_STRICT_PLUGINS" in line for line in _errors(strict))


def test_a_spec_type_of_its_own_is_no_patch(tmp_path: Path) -> None:
    report = _run("own-spec-type", tmp_path, ["strategies"], {"KVRULES_STRICT_PLUGINS": "1"})
    assert report["rc"] == 0, report["stderr"][-2000:]
    assert "patched" not in report["stderr"] and "PluginPatchWarning" not in report["stderr"]


def test_a_rule_answering_wrongly_is_blamed_on_its_distribution(tmp_path: Path) -> None:
    report = _run("wrong-rule", tmp_path, ["plan", "--example", "llama3-8b"])
    assert report["rc"] == 2
    (line,) = _errors(report)
    assert _label("wrong-rule") in line and "rule 'hostile-router'" in line
    assert not any(f"plugin {name!r}" in line for name in kvrules.BUILTIN_PLUGINS)


def test_an_odd_distribution_name_can_be_blocked(tmp_path: Path) -> None:
    for block in (DISTS["odd-name"].name, DISTS["odd-name"].entry):
        report = _run("odd-name", tmp_path / "b", ["strategies", "--block", block])
        assert report["rc"] == 0
        assert "patched:" not in report["stderr"], block


def test_pip_installed_into_a_throwaway_venv_the_patch_is_named(tmp_path: Path) -> None:
    pytest.importorskip("setuptools")
    python = make_venv(tmp_path / "venv", ROOT)
    pip_install(python, DISTS["patch-method"], tmp_path / "src")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "default"}
    done = subprocess.run(
        [str(python), "-c", "import sys; from kvrules.cli.main import main; sys.exit(main(['strategies']))"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"patched: {_label('patch-method')}" in done.stdout
    assert "PluginPatchWarning" in done.stderr
