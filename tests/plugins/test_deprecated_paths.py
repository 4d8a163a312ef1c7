"""The 0.1 import paths that the README, docs/ and examples/ used: removed in 0.3, or public.

Each case is one ``from MODULE import NAMES`` line that the committed 0.1 documentation or the
example plugin used. A path deprecated in 0.2 is gone in 0.3 (as 0.2 announced): it no longer
imports, its replacement holds every name it held, and the CHANGELOG's Removed section names
both. A public path still imports, without a ``DeprecationWarning``, and yields the very objects
of its new module. The public paths are imported in one fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class OldPath:
    """``from module import names``; ``new``: where the same objects live in 0.2 (None: nowhere else)."""

    module: str
    names: tuple[str, ...]
    new: str | None
    deprecated: bool
    used_in: str

    @property
    def id(self) -> str:
        return f"{self.module}:{','.join(self.names)}"


def _table(text: str) -> tuple[OldPath, ...]:
    """Rows ``module | names | new module or - | deprecated or public | where it was used``."""
    rows = []
    for line in text.strip().splitlines():
        module, names, new, status, used_in = (cell.strip() for cell in line.split("|"))
        assert status in ("deprecated", "public"), line
        rows.append(
            OldPath(
                module, tuple(names.split()), None if new == "-" else new, status == "deprecated", used_in
            )
        )
    return tuple(rows)


# What the committed 0.1 README.md, docs/*.md and examples/ imported (and the rest of each shim).
CASES = _table(
    """
kvrules.rules           | LayerStrategy applies declines        | kvrules.plugin   | deprecated | README.md
kvrules.rules           | Check LayerStrategy applies declines  | kvrules.plugin   | deprecated | docs/plugins.md, docs/allocation.md
kvrules.rules           | Aligner applies declines              | kvrules.plugin   | deprecated | docs/hf.md
kvrules.context         | PlanContext                           | kvrules.plugin   | deprecated | docs/plugins.md
kvrules.registry        | RuleRegistry                          | kvrules.plugin   | deprecated | docs/plugins.md
kvrules.registry        | NamedPlugin                           | kvrules.plugin   | deprecated | docs/allocation.md (prose)
kvrules.plugin_manager  | enable_trace get_plugin_manager       | kvrules          | deprecated | docs/plugins.md (prose)
kvrules.modelfile       | load_example                          | kvrules.examples | deprecated | docs/allocation.md, docs/beyond-vllm.md, docs/vllm.md
kvrules.modelfile       | example_names                         | kvrules.examples | deprecated | the rest of the shim
kvrules.modelfile       | ModelFile load_model_file parse_model | kvrules.model    | deprecated | the rest of the shim
kvrules.hookspecs       | hookimpl kvrules_register_spec_types kvrules_register_rules kvrules_register_allocators kvrules_register_architectures | kvrules.plugin.hookspecs | deprecated | README.md, docs/plugins.md (prose)
kvrules.strategies      | DEFAULT_SET StrategySet StrategySpec resolve_strategies | kvrules | deprecated | the shim (not in the docs)
kvrules                 | get_plugin_manager                    | kvrules.plugin.manager | public | docs/beyond-vllm.md
kvrules                 | hookimpl                              | kvrules.plugin   | public     | docs/beyond-vllm.md
kvrules                 | EngineConfig Planner                  | -                | public     | docs/beyond-vllm.md, docs/hf.md
kvrules.allocation      | Allocator Placement ViewLayout        | kvrules.plugin   | public     | docs/allocation.md, examples/kvrules-kpool-tail
kvrules.allocation      | Allocation allocate                   | kvrules          | public     | the 0.1 API of the module
kvrules.dtypes          | to_torch                              | -                | public     | docs/allocation.md
kvrules.hf              | Architecture AlignContext             | kvrules.plugin   | public     | docs/hf.md
kvrules.hf              | BuildSettings HFConfig layers         | -                | public     | docs/hf.md
kvrules.hf              | HFOptions build_hf_model model_from_hf specs_from_hf | - | public  | docs/hf.md
kvrules.specs           | KVCacheSpec UniformTypeKVCacheSpecs spec_to_dict | kvrules | public | docs/hf.md, docs/plugins.md, examples/kvrules-kpool-tail
kvrules.specs           | cdiv round_up                         | kvrules.specs.base | public   | docs/plugins.md, examples/kvrules-kpool-tail
kvrules.testing         | check_plugin Scenario sample_scenarios CapturedDecisions | - | public | docs/plugins.md, examples/kvrules-kpool-tail
kvrules.distributed     | plan_across_ranks                     | -                | public     | docs/distributed.md, examples/plan_across_ranks.py
kvrules.integrations    | vllm                                  | -                | public     | docs/vllm.md
kvrules.plugin.rules    | Check LayerStrategy Layout applies declines | kvrules.plugin | public | examples/kvrules-kpool-tail
kvrules.plugin.context  | PlanContext                           | kvrules.plugin   | public     | examples/kvrules-kpool-tail
kvrules.plugin.registry | AllocatorRegistry RuleRegistry SpecTypeRegistry | kvrules.plugin | public | examples/kvrules-kpool-tail
kvrules.plugin.manager  | KVRulesPluginManager                  | kvrules          | public     | examples/kvrules-kpool-tail
kvrules.model           | load_model_file                       | -                | public     | examples/kvrules-kpool-tail
"""
)
DEPRECATED_CASES = [case for case in CASES if case.deprecated]
PUBLIC_CASES = [case for case in CASES if not case.deprecated]
DEPRECATED = sorted({case.module for case in DEPRECATED_CASES})

# Runs the given cases in order in a fresh interpreter: each import under its own
# catch_warnings, then the new module, and reports what was warned and which names are the same
# objects. The import is compiled as "plugin_code.py", line 1, to see where warnings point.
PROBE = r"""
import importlib, json, sys, warnings

results = []
for case in json.loads(sys.argv[1]):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        namespace = {}
        statement = "from {} import {}".format(case["module"], ", ".join(case["names"]))
        exec(compile(statement, "plugin_code.py", "exec"), namespace)
    same = {}
    if case["new"]:
        new = importlib.import_module(case["new"])
        same = {name: namespace[name] is getattr(new, name, None) for name in case["names"]}
    results.append({
        "warnings": [
            {"message": str(w.message), "filename": w.filename, "lineno": w.lineno}
            for w in caught
            if issubclass(w.category, DeprecationWarning)
        ],
        "same": same,
        "missing": [name for name in case["names"] if namespace.get(name) is None],
    })
print(json.dumps(results))
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@pytest.fixture(scope="module")
def probes() -> Iterator[dict[str, dict[str, object]]]:
    """Every case's probe: each deprecated case alone, the public ones together, side by side."""
    batches = [PUBLIC_CASES]
    running = [
        (
            batch,
            subprocess.Popen(
                [sys.executable, "-c", PROBE, json.dumps([case.__dict__ for case in batch])],
                cwd=ROOT,
                env=_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for batch in batches
    ]
    results: dict[str, dict[str, object]] = {}
    for batch, proc in running:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{[case.id for case in batch]}: an import failed:\n{err[-3000:]}"
        results.update(
            zip((case.id for case in batch), json.loads(out.strip().splitlines()[-1]), strict=True)
        )
    yield results


@pytest.mark.parametrize("case", PUBLIC_CASES, ids=[case.id for case in PUBLIC_CASES])
def test_a_public_0_1_import_still_works_and_gives_the_same_objects(
    case: OldPath, probes: dict[str, dict[str, object]]
) -> None:
    result = probes[case.id]
    assert result["missing"] == [], f"{case.id} (used in {case.used_in}) lost names"
    if case.new:
        different = [name for name, same in result["same"].items() if not same]  # type: ignore[union-attr]
        assert different == [], f"from {case.module}: {different} are not the objects of {case.new}"


@pytest.mark.parametrize("case", DEPRECATED_CASES, ids=[case.id for case in DEPRECATED_CASES])
def test_a_removed_path_is_gone_and_its_replacement_holds_its_names(case: OldPath) -> None:
    import importlib
    import importlib.util

    assert importlib.util.find_spec(case.module) is None, f"{case.module} should be gone in 0.3"
    assert case.new is not None
    new = importlib.import_module(case.new)
    assert [name for name in case.names if not hasattr(new, name)] == [], f"{case.new} lacks names"


def test_the_changelog_says_what_replaces_each_removed_path() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    start = text.index("### Removed", text.index("## [Unreleased]"))
    removed = text[start : text.index("\n### ", start + 1)]
    for case in DEPRECATED_CASES:
        assert f"`{case.module}`" in removed, f"CHANGELOG Removed does not name {case.module}"
        assert f"`{case.new}`" in removed, f"CHANGELOG Removed does not name {case.new}"


@pytest.mark.parametrize("case", PUBLIC_CASES, ids=[case.id for case in PUBLIC_CASES])
def test_a_public_path_imports_without_a_deprecation_warning(
    case: OldPath, probes: dict[str, dict[str, object]]
) -> None:
    assert probes[case.id]["warnings"] == []


def test_no_module_of_kvrules_is_a_deprecation_shim_any_more() -> None:
    shims = sorted(
        f"kvrules.{path.stem}"
        for path in (ROOT / "kvrules").glob("*.py")
        if "DeprecationWarning" in path.read_text(encoding="utf-8")
    )
    assert shims == []
