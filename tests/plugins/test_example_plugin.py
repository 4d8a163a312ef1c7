"""The third-party example plugin (examples/kvrules-kpool-tail), installed and used end to end.

Most tests install it as an installer would lay it out (the package plus a ``dist-info`` with
the entry points of its pyproject.toml) in a temporary directory on ``sys.path``; one test
installs it with pip into a temporary target, offline.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

import kvrules
from kvrules import KVRulesPluginManager, Planner, PluginError, get_plugin_manager
from kvrules.cli.main import main
from kvrules.model import load_model_file

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kvrules-kpool-tail"
MODEL = EXAMPLE / "models" / "glm-kpool-tiny.json"
PACKAGE = "kvrules_kpool_tail"


def install_layout(site: Path, source: Path = EXAMPLE) -> Path:
    """Lay the example out in ``site`` as pip would: the package and its dist-info."""
    project = tomllib.loads((source / "pyproject.toml").read_text())["project"]
    shutil.copytree(source / "src" / PACKAGE, site / PACKAGE)
    info = site / f"{PACKAGE}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    groups = project["entry-points"]
    (info / "entry_points.txt").write_text(
        "".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for g, eps in groups.items())
    )
    return info


def forget_modules(prefix: str) -> None:
    for name in [m for m in sys.modules if m == prefix or m.startswith(prefix + ".")]:
        del sys.modules[name]


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    yield
    structlog.reset_defaults()  # kvrules.cli.main configures structlog for the CLI


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    forget_modules(PACKAGE)
    forget_modules("kvtest_")


@pytest.fixture
def installed(site: Path) -> Path:
    install_layout(site)
    importlib.invalidate_caches()
    return site


def env_with(site: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVRULES_")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**env, **extra}


def test_installing_adds_spec_type_rule_and_layouts(
    installed: Path, kvrules_pm: KVRulesPluginManager
) -> None:
    regs = kvrules_pm.registries
    expected = "plugin 'kpool-tail' (kvrules-kpool-tail 0.1.0)"
    assert regs.spec_types.providers["kpool_tail"] == expected
    assert regs.rules.providers["kpool-tail-pad"] == expected
    assert regs.rules.providers["kpool-dedicated"] == expected
    assert regs.allocators.view_layout_providers["kpool-ring"] == expected


def test_the_docs_test_pattern_works_with_the_plugin_installed(
    installed: Path, kvrules_pm: KVRulesPluginManager
) -> None:
    """docs/plugins.md's pattern, ``kvrules_pm.register(plugin, name=...)``, in the plugin's own
    tests once it is installed: the kit's manager already holds it, registering it again is a no-op."""
    plugin = importlib.import_module(f"{PACKAGE}.plugin")
    assert kvrules_pm.get_plugin("kpool-tail") is plugin
    before = kvrules_pm.list_name_plugin()
    assert kvrules_pm.register(plugin, name="kpool-tail") == "kpool-tail"
    assert kvrules_pm.register(plugin, name="test-kpool-tail") == "kpool-tail"
    assert kvrules_pm.list_name_plugin() == before
    assert "kpool-tail-pad" in kvrules_pm.registries.rules.rules


def test_strategies_lists_all_three(installed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["strategies"]) == 0
    out = capsys.readouterr().out
    for line_start in ("kpool-tail-pad ", "kpool-dedicated ", "kpool_tail "):
        line = next(line for line in out.splitlines() if line.strip().startswith(line_start))
        assert "plugin 'kpool-tail' (kvrules-kpool-tail 0.1.0)" in line


def test_plan_uses_the_plugin_end_to_end(
    installed: Path, capsys: pytest.CaptureFixture[str], kvrules_pm: KVRulesPluginManager
) -> None:
    assert main(["plan", str(MODEL), "--json"]) == 0
    plan = kvrules.Plan.from_dict(
        json.loads(capsys.readouterr().out),
        spec_types=kvrules_pm.registries.spec_types.classes,
    )
    tails = {n: s for n, s in plan.specs.items() if s.type_name == "kpool_tail"}
    assert len(tails) == 8
    assert {(s.block_size, s.page_size_bytes, s.padding_bytes) for s in tails.values()} == {
        (128, 131072, 98304)
    }
    assert sum(d.rule == "kpool-tail-pad" and d.outcome == "applied" for d in plan.decisions) == 8
    assert not any(d.rule == "block-scale" and d.layer in tails for d in plan.decisions)
    assert plan.num_blocks == 2048  # the 1 GiB worker: 4 tensors x 128 KiB per block


def test_custom_layouts_plan_and_allocate(installed: Path, kvrules_pm: KVRulesPluginManager) -> None:
    pm = kvrules_pm
    model = load_model_file(MODEL, pm.registries.spec_types.classes)
    config = kvrules.EngineConfig.from_dict(model.engine)
    plan = Planner(["kpool-dedicated"], plugin_manager=pm).plan(
        model.worker_specs(), model.available_memory or [], config
    )
    assert [w.layout for w in plan.workers] == ["kpool-dedicated", "kpool-dedicated"]
    assert plan.num_blocks == 1024  # 8 tensors per block instead of 4
    allocation = kvrules.allocate(plan, "meta", worker=0, plugin_manager=pm)
    allocation.verify()
    tails = [n for n in allocation.layouts if n.endswith("kpool_tail")]
    assert {allocation.layouts[n] for n in tails} == {"kpool-ring"}
    assert tuple(allocation.views[tails[0]].shape) == (1024, 128, 1, 128)


def test_blocking_by_name_removes_it(installed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    regs = get_plugin_manager(blocked=["kpool-tail"]).registries
    assert "kpool_tail" not in regs.spec_types.classes
    assert "kpool-tail-pad" not in regs.rules.rules
    assert main(["plan", str(MODEL), "--block", "kpool-tail"]) == 2
    err = capsys.readouterr().err
    assert "unknown spec type 'kpool_tail'" in err
    assert "model.layers.0.indexer.kpool_tail" in err


def test_autoload_off_leaves_it_out(installed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVRULES_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert "kpool-tail-pad" not in get_plugin_manager().registries.rules.rules
    monkeypatch.delenv("KVRULES_DISABLE_PLUGIN_AUTOLOAD")
    assert "kpool-tail-pad" in get_plugin_manager().registries.rules.rules


def test_uninstalling_removes_it(installed: Path) -> None:
    assert "kpool_tail" in get_plugin_manager().registries.spec_types.classes
    shutil.rmtree(next(installed.glob(f"{PACKAGE}-*.dist-info")))
    shutil.rmtree(installed / PACKAGE)
    importlib.invalidate_caches()
    regs = get_plugin_manager().registries
    assert "kpool_tail" not in regs.spec_types.classes
    assert "kpool-tail-pad" not in regs.rules.rules
    assert "kpool-ring" not in regs.allocators.view_layouts


def test_example_imports_only_the_public_plugin_api() -> None:
    # the plugin's code: kvrules and kvrules.plugin only; its tests may add the kit and model files
    public = {"kvrules", "kvrules.plugin", "kvrules.testing", "kvrules.model"}
    seen = set()
    for path in [*EXAMPLE.glob("src/**/*.py"), *EXAMPLE.glob("tests/*.py")]:
        for line in path.read_text().splitlines():
            words = line.split()
            if (
                words[:1] in (["from"], ["import"])
                and words[1].startswith("kvrules")
                and "kpool" not in words[1]
            ):
                seen.add(words[1])
    assert seen <= public, f"the example reaches into kvrules internals: {sorted(seen - public)}"
    assert {"kvrules", "kvrules.plugin"} <= seen


def test_pip_install_into_a_temporary_target(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    result = subprocess.run(
        [*install, "--no-index", "--target", str(target), str(source)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    kvrules_cli = [sys.executable, "-m", "kvrules.cli.main"]
    shown = subprocess.run(
        [*kvrules_cli, "strategies"], env=env_with(target), capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    assert "kpool-tail-pad" in shown.stdout and "kpool_tail" in shown.stdout
    planned = subprocess.run(
        [*kvrules_cli, "plan", str(MODEL)], env=env_with(target), capture_output=True, text=True, timeout=60
    )
    assert planned.returncode == 0, planned.stderr
    assert "kpool-tail-pad" in planned.stdout


def test_the_example_s_own_kit_tests_pass(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    install_layout(site)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "tests")],
        cwd=EXAMPLE,
        env=env_with(site, PYTHONDONTWRITEBYTECODE="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout


BROKEN_RESULT = """
from dataclasses import dataclass
from typing import ClassVar
import kvrules
from kvrules.plugin.rules import LayerStrategy, applies
from kvrules_kpool_tail.spec import KpoolTailSpec

@dataclass(frozen=True)
class WrongPad(LayerStrategy):
    touches: ClassVar[frozenset[str]] = frozenset({"page_size_padded"})
    name: str = "wrong-pad"
    priority: int = 900
    description: str = "Pads kpool tails to half the target (a bug)."

    def check(self, layer, spec, target, ctx):
        return applies("always")

    def apply(self, layer, spec, target, ctx):
        return spec.evolve(page_size_padded=max(spec.page_size_bytes, target // 2))

@kvrules.hookimpl
def kvrules_register_rules(registry):
    registry.add(WrongPad())
"""


def add_distribution(site: Path, dist: str, module: str, source: str, entry: str) -> None:
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[kvrules.plugins]\n{entry} = {module}\n")
    importlib.invalidate_caches()


def test_plugin_raising_at_import_is_named(installed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    add_distribution(
        installed, "kvtest-crash", "kvtest_crash", "raise ImportError('no libkpool.so')\n", "crash"
    )
    with pytest.raises(PluginError, match=r'error loading plugin "crash": ImportError: no libkpool.so'):
        get_plugin_manager()
    assert main(["plan", str(MODEL)]) == 2
    assert 'error loading plugin "crash"' in capsys.readouterr().err
    assert main(["plan", str(MODEL), "--block", "crash"]) == 0


def test_plugin_returning_an_invalid_spec_is_named(installed: Path) -> None:
    add_distribution(installed, "kvtest-wrong", "kvtest_wrong", BROKEN_RESULT, "wrong")
    pm = get_plugin_manager()
    model = load_model_file(MODEL, pm.registries.spec_types.classes)
    with pytest.raises(PluginError) as info:
        Planner(plugin_manager=pm).plan(
            model.worker_specs(), model.available_memory or [], kvrules.EngineConfig.from_dict(model.engine)
        )
    message = str(info.value)
    assert "rule 'wrong-pad' (plugin 'wrong' (kvtest-wrong 1.0))" in message
    assert "the target is 131072 bytes" in message


def test_plugin_registering_a_non_spec_is_named(installed: Path) -> None:
    source = "import kvrules\n@kvrules.hookimpl\ndef kvrules_register_spec_types(registry):\n    registry.add(dict)\n"
    add_distribution(installed, "kvtest-notspec", "kvtest_notspec", source, "notspec")
    with pytest.raises(
        PluginError, match=r"plugin 'notspec' \(kvtest-notspec 1.0\) registered <class 'dict'>"
    ):
        _ = get_plugin_manager().registries
