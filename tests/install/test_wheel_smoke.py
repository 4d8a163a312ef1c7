"""scripts/wheel_smoke.py's own logic, without building anything: which files the wheel must hold,
what counts as a packaging mistake, the entry points it reads from a wheel, and that CI runs it with
the same torch pin as scripts/setup.sh. (The build itself runs in .ci/run.)"""

from __future__ import annotations

import importlib.util
import json
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from kvrules.examples import example_names

ROOT = Path(__file__).resolve().parents[2]


def load_script() -> ModuleType:
    """scripts/wheel_smoke.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("wheel_smoke", ROOT / "scripts" / "wheel_smoke.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


smoke = load_script()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_package_dirs_are_read_from_pyproject() -> None:
    assert smoke.package_dirs(PYPROJECT) == {"kvrules": "kvrules", "kvrules_plugins": "plugins"}


def test_package_dirs_without_a_packages_list_is_an_error() -> None:
    with pytest.raises(smoke.SmokeError, match=r"\[tool.setuptools\] packages"):
        smoke.package_dirs({"tool": {"setuptools": {}}})


def test_expected_files_rename_source_dirs_to_import_names() -> None:
    names = [
        "plugins/align.py",
        "plugins/py.typed",
        "kvrules/examples/hf/x/config.json",
        "README.md",
        "pluginsx/a",
    ]
    assert smoke.expected_files(names, {"kvrules": "kvrules", "kvrules_plugins": "plugins"}) == {
        "kvrules_plugins/align.py",
        "kvrules_plugins/py.typed",
        "kvrules/examples/hf/x/config.json",
    }


def test_an_unpackaged_data_file_and_a_stale_file_are_both_problems() -> None:
    expected = {"kvrules/__init__.py", "kvrules/examples/new/a.json"}
    shipped = {"kvrules/__init__.py", "kvrules/gone.py"}
    problems = smoke.packaging_problems(expected, shipped)
    assert len(problems) == 2
    assert "not in the wheel: kvrules/examples/new/a.json" in problems[0]
    assert problems[1] == "in the wheel but not in the source tree: kvrules/gone.py"
    assert smoke.packaging_problems(expected, set(expected)) == []


def test_wheel_package_files_keeps_only_the_packages() -> None:
    members = [
        "kvrules/",
        "kvrules/a.py",
        "kvrules_plugins/b.py",
        "kvrules-0.1.0.dist-info/RECORD",
        "other/c.py",
    ]
    assert smoke.wheel_package_files(members, ["kvrules", "kvrules_plugins"]) == {
        "kvrules/a.py",
        "kvrules_plugins/b.py",
    }


def test_a_plugin_module_without_entry_point_is_a_problem() -> None:
    expected = {"kvrules_plugins/__init__.py", "kvrules_plugins/align.py", "kvrules_plugins/new_rule.py"}
    groups = {
        "kvrules.plugins": {"align": "kvrules_plugins.align"},
        "console_scripts": {"kvrules": "kvrules.cli:main"},
    }
    problems = smoke.plugin_entry_point_problems(expected, groups)
    assert problems == [
        "plugins/new_rule.py has no entry point in group 'kvrules.plugins' "
        '([project.entry-points."kvrules.plugins"] in pyproject.toml)'
    ]
    groups["kvrules.plugins"]["new-rule"] = "kvrules_plugins.new_rule"
    assert smoke.plugin_entry_point_problems(expected, groups) == []
    del groups["console_scripts"]
    assert smoke.plugin_entry_point_problems(expected, groups) == [
        "the wheel declares no 'kvrules' console script ([project.scripts])"
    ]


def test_every_plugin_module_of_the_source_tree_has_an_entry_point() -> None:
    expected = {f"kvrules_plugins/{p.name}" for p in (ROOT / "plugins").glob("*.py")}
    groups = {"kvrules.plugins": PYPROJECT["project"]["entry-points"]["kvrules.plugins"]}
    groups["console_scripts"] = PYPROJECT["project"]["scripts"]
    assert smoke.plugin_entry_point_problems(expected, groups) == []


def test_wheel_entry_points_are_read_case_preserving(tmp_path: Path) -> None:
    wheel = tmp_path / "x-1-py3-none-any.whl"
    text = "[console_scripts]\nkvrules = kvrules.cli:main\n\n[kvrules.plugins]\nSpec-Types = kvrules_plugins.spec_types\n"
    with zipfile.ZipFile(wheel, "w") as out:
        out.writestr("x-1.dist-info/entry_points.txt", text)
    with zipfile.ZipFile(wheel) as archive:
        assert smoke.wheel_entry_points(archive) == {
            "console_scripts": {"kvrules": "kvrules.cli:main"},
            "kvrules.plugins": {"Spec-Types": "kvrules_plugins.spec_types"},
        }


def test_schema_problems_name_the_failure(tmp_path: Path) -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "kvrules.plan/v9",
        "type": "object",
        "required": ["schema", "groups"],
    }
    (tmp_path / "plan-v9.json").write_text(json.dumps(schema), encoding="utf-8")
    assert smoke.schema_problems({"schema": "kvrules.plan/v9", "groups": []}, tmp_path) == []
    assert smoke.schema_problems({"schema": "kvrules.plan/v9"}, tmp_path) == [
        "plan JSON fails kvrules.plan/v9: 'groups' is a required property at the top level"
    ]
    assert "ships schemas ['kvrules.plan/v9']" in smoke.schema_problems({"schema": "other"}, tmp_path)[0]


def test_ci_runs_the_smoke_test_after_the_tests_with_setup_sh_torch_pin() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    tests = ci.index("bash scripts/setup.sh && .venv/bin/python -m pytest -q")
    assert ci[tests + 1] == ".venv/bin/python scripts/wheel_smoke.py"
    setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    assert f'"{smoke.TORCH}"' in setup


def test_build_is_a_dev_tool() -> None:
    dev = PYPROJECT["project"]["optional-dependencies"]["dev"]
    assert any(req.split(">")[0].split("=")[0] == "build" for req in dev)


# the checks the fresh environment runs, run here against the development install


def test_the_development_install_passes_the_installed_side_checks() -> None:
    assert smoke.guarded("entry points", smoke._entry_point_problems) == []
    assert smoke._marker_and_schema_problems() == []
    shipped = sorted(smoke.expected_files(smoke.checkout_files(ROOT), smoke.package_dirs(PYPROJECT)))
    assert smoke._installed_file_problems(shipped) == []
    assert smoke.example_folder_problems(shipped, example_names()) == []
    assert smoke.example_load_problems(["issue-43626", "llama3-8b"]) == []


def test_a_source_hf_example_that_is_not_installed_is_a_problem() -> None:
    source = [
        "kvrules/examples/hf/no-such-model/example.json",
        "kvrules/examples/hf/no-such-model/config.json",
    ]
    assert smoke.example_folder_problems(source, example_names()) == [
        "example hf-no-such-model (kvrules/examples/hf/no-such-model/ in the source tree) is not installed"
    ]


def test_examples_that_do_not_load_are_one_problem_per_error() -> None:
    problems = smoke.example_load_problems(["llama3-8b", "nope-1", "nope-2"])
    assert len(problems) == 2
    assert problems[0].startswith("example(s) nope-1 do not load: ModelFileError: unknown example 'nope-1'")
    assert problems[1].startswith("example(s) nope-2 do not load: ModelFileError: unknown example 'nope-2'")


def test_a_file_that_is_not_installed_is_a_problem() -> None:
    assert smoke._installed_file_problems(["kvrules/schemas/plan-v99.json"]) == [
        "not installed: kvrules/schemas/plan-v99.json"
    ]


def test_a_check_that_raises_is_one_problem_naming_it() -> None:
    def broken() -> list[str]:
        raise FileNotFoundError("examples/hf")

    assert smoke.guarded("examples", broken) == ["the examples check raised FileNotFoundError: examples/hf"]


def test_a_failed_command_is_reported_by_its_last_line() -> None:
    stderr = "torch/x.py:368: UserWarning: no numpy\n  cpu = f()\nkvrules: error: no such example\n\n"
    assert smoke.last_line(stderr) == "kvrules: error: no such example"
    assert smoke.last_line("") == "(no output)"


def test_the_verdict_lists_every_problem_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert smoke.verdict(["not in the wheel: kvrules/a.json", "`import kvrules` imports torch"]) == 1
    err = capsys.readouterr().err
    assert "wheel-smoke: FAIL: not in the wheel: kvrules/a.json\n" in err
    assert "wheel-smoke: FAIL: `import kvrules` imports torch\n" in err
    assert "NOT good: 2 problem(s)" in err
    assert smoke.verdict([]) == 0
    assert "the wheel is good" in capsys.readouterr().err
