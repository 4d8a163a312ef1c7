"""docs/plugins.md stays true: every hook with its exact signature, and the minimal plugin runs."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import kvrules
from kvrules.plugin import hookspecs
from kvrules.testing import check_plugin

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
TEXT = DOC.read_text(encoding="utf-8")


def hooks() -> dict[str, object]:
    return {n: f for n, f in inspect.getmembers(hookspecs, inspect.isfunction) if n.startswith("kvrules_")}


def signature(fn: object) -> str:
    """``def name(arg: Type) -> Return`` from the hookspec's own annotations."""
    annotations = fn.__annotations__  # type: ignore[attr-defined]
    params = ", ".join(f"{p}: {annotations[p]}" for p in inspect.signature(fn).parameters)  # type: ignore[arg-type]
    return f"def {fn.__name__}({params}) -> {annotations['return']}"  # type: ignore[attr-defined]


def section(name: str) -> str:
    match = re.search(rf"^### {name}\n(.*?)(?=^#{{2,3}} )", TEXT, re.S | re.M)
    assert match, f"docs/plugins.md has no section '### {name}'"
    return match.group(1)


def code_block(marker: str) -> str:
    match = re.search(rf"<!-- {re.escape(marker)} -->\n```python\n(.*?)```", TEXT, re.S)
    assert match, f"docs/plugins.md has no python block after <!-- {marker} -->"
    return match.group(1)


@pytest.mark.parametrize("name", sorted(hooks()))
def test_every_hook_is_documented_with_its_exact_signature(name: str) -> None:
    fn = hooks()[name]
    body = section(name)
    assert f"```python\n{signature(fn)}\n```" in body, (
        f"signature of {name} differs from kvrules/hookspecs.py"
    )
    semantics = (inspect.getdoc(fn) or "").strip().splitlines()[-1]
    assert semantics in body, f"the call semantics of {name} ({semantics!r}) are not stated"


def test_no_stale_hooks_are_documented() -> None:
    documented = set(re.findall(r"^### (kvrules_\w+)", TEXT, re.M))
    assert documented == set(hooks())


@pytest.fixture
def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    (tmp_path / "kvrules_acme.py").write_text(code_block("plugin-module: kvrules_acme.py"))
    monkeypatch.syspath_prepend(str(tmp_path))
    import kvrules_acme  # type: ignore[import-not-found]

    yield kvrules_acme
    del sys.modules["kvrules_acme"]


def test_the_minimal_plugin_plans_and_conforms(acme: ModuleType) -> None:
    pm = kvrules.get_plugin_manager(autoload=False, plugins=[acme])
    assert "acme-pad" in pm.registries.rules.rules
    specs = {
        "full": kvrules.FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16"),
        "swa": kvrules.SlidingWindowSpec(
            16, num_kv_heads=3, head_size=128, dtype="bfloat16", sliding_window=8
        ),
    }
    plan = kvrules.Planner(plugin_manager=pm).plan(specs, 1 << 30, kvrules.EngineConfig(max_model_len=4096))
    assert [d.rule for d in plan.decisions if d.layer == "swa" and d.outcome == "applied"] == ["acme-pad"]
    report = check_plugin(acme)
    assert report.rules["acme-pad"].applied > 0
    blocked = kvrules.get_plugin_manager(autoload=False, plugins=[acme], blocked=["kvrules_acme"])
    assert "acme-pad" not in blocked.registries.rules.rules


def test_the_minimal_plugin_s_tests_pass(tmp_path: Path) -> None:
    (tmp_path / "kvrules_acme.py").write_text(code_block("plugin-module: kvrules_acme.py"))
    (tmp_path / "test_acme.py").write_text(code_block("plugin-test: test_acme.py"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_acme.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "2 passed" in result.stdout


def test_the_documented_trace_lines_look_like_the_real_trace() -> None:
    pm = kvrules.get_plugin_manager(autoload=False)
    from io import StringIO

    from kvrules.plugin.manager import enable_trace

    out = StringIO()
    enable_trace(pm, out)
    _ = pm.registries
    lines = out.getvalue().splitlines()
    first = "kvrules trace: kvrules_register_spec_types(registry) -> plugin 'spec-types' (kvrules "
    assert lines[0].startswith(first)
    assert lines[0].split(" (kvrules ")[0] in TEXT
    assert re.match(r"kvrules trace:   registered spec type chunked_local, .* \(\d+\.\d\d ms\)$", lines[1])
    assert all(line.startswith("kvrules trace: ") for line in lines)
    assert "-> []" not in out.getvalue()  # plugins without an implementation are not shown


def test_the_trace_names_a_hook_that_raises() -> None:
    class Broken:
        @kvrules.hookimpl
        def kvrules_register_rules(self, registry: object) -> None:
            raise RuntimeError("kaput")

    pm = kvrules.get_plugin_manager(autoload=False, plugins=[Broken()])
    from io import StringIO

    from kvrules.plugin.manager import enable_trace

    out = StringIO()
    enable_trace(pm, out)
    with pytest.raises(kvrules.PluginError, match="failed in kvrules_register_rules: RuntimeError: kaput"):
        _ = pm.registries
    assert "kvrules trace:   raised RuntimeError: kaput" in out.getvalue()


def test_kvrules_trace_variable_turns_the_trace_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KVRULES_TRACE", "1")
    _ = kvrules.get_plugin_manager(autoload=False).registries
    assert "kvrules trace: kvrules_register_rules(registry) -> plugin 'page-unify'" in capsys.readouterr().err
