"""``kvrules strategies`` and ``kvrules examples``: what is registered and what is built in."""

from __future__ import annotations

import argparse
import re
from typing import Any

from kvrules.cli.common import add_common, plugin_manager_from, strategies_from
from kvrules.examples import example_names, load_example
from kvrules.plugin.presets import resolve_strategies
from kvrules.report.tables import render_rules

#: reStructuredText inline literals and interpreted text (``x`` or `x`, roles such as :class:`x`)
_RST_LITERAL = re.compile(r"(?::[\w.-]+:)?``([^`\n]+)``|(?::[\w.-]+:)?`([^`\n]+)`")


def plain_text(text: str) -> str:
    """``text`` with RST literals (````x````, ```x```, ``:class:`x```) written as ``'x'``.

    Descriptions come from docstrings, written in RST; a terminal shows them as plain text.
    """
    return _RST_LITERAL.sub(lambda m: f"'{m.group(1) or m.group(2)}'", text)


def cmd_strategies(args: argparse.Namespace) -> int:
    pm = plugin_manager_from(args)
    active = resolve_strategies(strategies_from(args), pm.registries.rules)
    print(plain_text(render_rules(pm.registries, active)))
    for message in pm.patches.values():  # plugins that changed kvrules' own code (issue 25 R9)
        print(f"patched: {message}")
    return 0


def cmd_examples(args: argparse.Namespace) -> int:
    for name in example_names():
        model = load_example(name)
        print(f"{name:20s} {len(model.specs):4d} layers  {model.description}")
    return 0


def register(subparsers: Any) -> None:
    """Add the ``strategies`` and ``examples`` sub-commands."""
    s = subparsers.add_parser("strategies", help="list every registered rule and preset")
    add_common(s)
    s.set_defaults(func=cmd_strategies)
    e = subparsers.add_parser("examples", help="list the built-in examples")
    e.set_defaults(func=cmd_examples, log_format=None, log_level=None)
