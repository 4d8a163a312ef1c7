"""The plugin author's API: ``kvrules.plugin`` exports at most 35 names, all for authors.

The 0.2 names that left it (the grouping cost model, the host-side names, the helpers only an
allocator or the core needs) resolve from ``kvrules.plugin`` in 0.3 with a ``DeprecationWarning``
naming their new module, are the very objects of that module, and are listed in the CHANGELOG's
"Deprecated" subsection; nothing in the repository imports them from ``kvrules.plugin`` any more.
"""

from __future__ import annotations

import ast
import importlib
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import kvrules
import kvrules.grouping
import kvrules.plugin
import kvrules.plugin.grouping
from kvrules.plan import BackingTensor

ROOT = Path(__file__).resolve().parents[2]
MOVED = {name: home for name, (home, _) in kvrules.plugin._MOVED.items()}

# what 0.2's kvrules.plugin.__all__ held: the kept names and the moved ones, nothing lost
EXPORTED_IN_0_2 = 71


def _moved(name: str) -> tuple[object, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(kvrules.plugin, name)
    return value, [w for w in caught if issubclass(w.category, DeprecationWarning)]


def test_the_author_api_is_at_most_35_names_and_dir_shows_only_them() -> None:
    exported = kvrules.plugin.__all__
    assert len(exported) <= 35, f"kvrules.plugin exports {len(exported)} names"
    assert len(set(exported)) == len(exported)
    assert dir(kvrules.plugin) == sorted(exported)
    assert not set(exported) & set(MOVED)
    assert len(exported) + len(MOVED) == EXPORTED_IN_0_2 + 1  # + BackingTensor, new in 0.3


def test_every_author_name_resolves_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        missing = [name for name in kvrules.plugin.__all__ if getattr(kvrules.plugin, name, None) is None]
    assert missing == []


def test_a_vllm_0_33_backing_layout_can_be_written_from_the_author_api() -> None:
    assert kvrules.plugin.BackingTensor is BackingTensor


@pytest.mark.parametrize("name", sorted(MOVED))
def test_a_moved_name_warns_naming_its_new_module_and_is_the_same_object(name: str) -> None:
    home = MOVED[name]
    value, caught = _moved(name)
    assert len(caught) == 1, f"kvrules.plugin.{name}: {[str(w.message) for w in caught]}"
    message = str(caught[0].message)
    assert f"kvrules.plugin.{name} is deprecated" in message and "0.4" in message
    assert f"from {home} import {name}" in message
    assert caught[0].filename == __file__, "the warning points at the caller, not kvrules"
    assert getattr(importlib.import_module(home), name) is value


# the new modules that list their public names (kvrules.dtypes has no list)
LISTING_HOMES = sorted(h for h in set(MOVED.values()) if hasattr(importlib.import_module(h), "__all__"))


@pytest.mark.parametrize("home", LISTING_HOMES)
def test_a_new_home_that_lists_its_names_lists_the_moved_ones(home: str) -> None:
    listed = importlib.import_module(home).__all__
    assert [name for name, to in MOVED.items() if to == home and name not in listed] == []


def test_the_grouping_cost_model_moved_whole() -> None:
    assert {name for name, home in MOVED.items() if home == "kvrules.grouping"} == set(
        kvrules.grouping.__all__
    ) - {"Bucket"}


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        kvrules.plugin.no_such_name  # noqa: B018
    with pytest.raises(AttributeError, match="no_such_name"):
        kvrules.plugin.grouping.no_such_name  # noqa: B018


@pytest.mark.parametrize("name", ["search", "GroupingCost", "shape_changes"])
def test_the_0_2_grouping_module_path_warns_and_gives_the_same_object(name: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"from kvrules.grouping import {name}"):
        value = getattr(kvrules.plugin.grouping, name)
    assert value is getattr(kvrules.grouping, name)


def test_the_changelog_lists_each_moved_name_and_its_new_module_under_deprecated() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    unreleased = text[text.index("## [Unreleased]") :].split("\n## ")[0]
    start = unreleased.index("### Deprecated")
    section = unreleased[start : unreleased.index("\n### ", start + 1)]
    assert "0.4" in section
    for home in set(MOVED.values()):
        names = sorted(name for name, to in MOVED.items() if to == home)
        entry = next((line for line in section.split("\n- ") if f"-> `{home}`" in line), "")
        assert entry, f"CHANGELOG Deprecated has no entry for names moved to {home}"
        assert [name for name in names if f"`{name}`" not in entry] == [], home


# -- nothing in the repository uses a moved name through kvrules.plugin ----------------------
SOURCES = ("kvrules", "plugins", "tests", "benchmarks", "examples", "scripts")
FENCE = re.compile(r"```python\n(.*?)```", re.S)


def _python_sources() -> Iterator[tuple[str, str]]:
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, block in enumerate(FENCE.findall(path.read_text(encoding="utf-8"))):
            yield f"{path.relative_to(ROOT)} python block {number + 1}", block


def _moved_uses(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a documented signature, not a program: its import lines one by one
        lines = [line.strip() for line in source.splitlines() if line.strip().startswith("from kvrules.")]
        return [use for line in lines if not line.endswith("(") for use in _moved_uses(line)]
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("kvrules.plugin", "kvrules.plugin.grouping"):
            uses += [
                f"from {node.module} import {a.name}"
                for a in node.names
                if a.name in MOVED or node.module == "kvrules.plugin.grouping"
            ]
        if (
            isinstance(node, ast.Attribute)
            and node.attr in MOVED
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "plugin"
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id == "kvrules"
        ):
            uses.append(f"kvrules.plugin.{node.attr}")
    return uses


def test_the_scan_finds_a_moved_name() -> None:
    assert _moved_uses("from kvrules.plugin import Check, search\nkvrules.plugin.enable_trace(pm)\n") == [
        "from kvrules.plugin import search",
        "kvrules.plugin.enable_trace",
    ]


def test_nothing_in_the_repository_uses_a_moved_name_through_kvrules_plugin() -> None:
    found = {
        where: uses
        for where, source in _python_sources()
        if where != "tests/plugins/test_plugin_api.py" and (uses := _moved_uses(source))
    }
    assert found == {}
