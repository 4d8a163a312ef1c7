"""docs/plugins.md and the pages it links stay true: every hook with its exact signature, every
code block runs (the harness of tests/cli/test_readme.py), the minimal plugin plans and conforms; and
what plugin authors are told by the kit and by ``kvrules strategies`` is right."""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import ClassVar

import pytest
from test_readme import ROOT, Outcome, blocks, run_documents

import kvrules
from kvrules import KVRulesPluginManager
from kvrules.cli.listing import plain_text
from kvrules.plugin import hookspecs
from kvrules.testing import ConformanceError, check_plugin, registered

DOC = ROOT / "docs" / "plugins.md"
TEXT = DOC.read_text(encoding="utf-8")
#: the guide and the pages it links, run as one: a page may use the files another page writes
PAGES = [DOC, *sorted((ROOT / "docs").glob("plugin-*.md"))]


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


@pytest.fixture(scope="module")
def pages_run(tmp_path_factory: pytest.TempPathFactory) -> list[Outcome]:
    return run_documents(PAGES, tmp_path_factory.mktemp("plugin-docs"))


@pytest.mark.parametrize(
    "index",
    range(sum(len(blocks(page)) for page in PAGES)),
    ids=[f"{page.stem}-line{b.line}-{b.kind}" for page in PAGES for b in blocks(page)],
)
def test_every_block_of_the_plugin_pages_runs(index: int, pages_run: list[Outcome]) -> None:
    outcome = pages_run[index]
    if outcome.error is not None:
        raise outcome.error


def test_the_guide_links_every_plugin_page() -> None:
    for page in PAGES[1:]:
        assert f"]({page.name})" in TEXT, f"docs/plugins.md does not link {page.name}"


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
    (tmp_path / "kvrules_acme.py").write_text(code_block("file: kvrules_acme.py"))
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


@pytest.mark.kvrules_pm(autoload=False)
def test_the_documented_trace_lines_look_like_the_real_trace(kvrules_pm: KVRulesPluginManager) -> None:
    pm = kvrules_pm
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


# -- what plugin authors are told ----------------------------------------------------------------
def test_descriptions_print_rst_literals_as_quoted_text() -> None:
    assert (
        plain_text("kept for an ``extract_hidden_states`` drafter")
        == "kept for an 'extract_hidden_states' drafter"
    )
    assert plain_text("one latent of `head_size`; see :class:`kvrules.MambaSpec`") == (
        "one latent of 'head_size'; see 'kvrules.MambaSpec'"
    )
    assert plain_text("no markup, it's fine") == "no markup, it's fine"


def test_kvrules_strategies_prints_no_rst_markup(capsys: pytest.CaptureFixture[str]) -> None:
    from kvrules.cli.main import main

    assert main(["strategies", "--no-autoload"]) == 0
    out = capsys.readouterr().out
    assert "`" not in out
    assert "Hidden states kept for an 'extract_hidden_states' drafter" in out


@dataclass(frozen=True, eq=False)
class TailSpec(kvrules.FullAttentionSpec):
    """A spec type kvrules has no samples of."""

    type_name: ClassVar[str] = "docs_tail"


class NewType:
    """A plugin registering :class:`TailSpec`."""

    name = "newtype"

    @kvrules.hookimpl
    def kvrules_register_spec_types(self, registry: kvrules.plugin.SpecTypeRegistry) -> None:
        registry.add(TailSpec)


def test_check_plugin_advises_its_own_keyword_for_spec_examples() -> None:
    with pytest.raises(ConformanceError) as missing:
        check_plugin(NewType())
    assert "check_plugin(plugin, spec_examples={'docs_tail': [TailSpec(...)]})" in str(missing.value)
    spec = TailSpec(16, num_kv_heads=2, head_size=64, dtype="bfloat16")
    with pytest.raises(ConformanceError, match=r"its keys 'TailSpec' are not spec types .*'docs_tail'"):
        check_plugin(NewType(), spec_examples={"TailSpec": [spec]})
    report = check_plugin(NewType(), spec_examples={"docs_tail": [spec]})
    assert "docs_tail" in report.registries.spec_types.classes


def test_check_spec_type_advises_its_own_keyword() -> None:
    with pytest.raises(
        ConformanceError, match=r"pass check_spec_type\(TailSpec, examples=\[TailSpec\(\.\.\.\)\]\)"
    ):
        kvrules.testing.check_spec_type(TailSpec)


def test_registered_lists_a_manager_by_kind_and_provider(acme: ModuleType) -> None:
    pm = kvrules.get_plugin_manager(autoload=False, plugins=[acme])
    everything = registered(pm)
    assert list(everything) == [
        "spec types",
        "rules",
        "presets",
        "allocators",
        "view layouts",
        "architectures",
    ]
    assert everything["rules"]["mamba-pad"].startswith("plugin 'page-unify' (kvrules ")
    assert everything["view layouts"]["mamba-states"].startswith("plugin 'torch-allocator' (kvrules ")
    assert registered(pm, plugin="kvrules_acme") == {
        "spec types": {},
        "rules": {"acme-pad": "plugin 'kvrules_acme' (registered in-process)"},
        "presets": {},
        "allocators": {},
        "view layouts": {},
        "architectures": {},
    }
    with pytest.raises(
        kvrules.PluginError,
        match=r"registered\(plugin='acme'\): no such plugin; registered plugins: .*kvrules_acme",
    ):
        registered(pm, plugin="acme")
