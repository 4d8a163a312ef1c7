"""Replacing module functions of vLLM's planner, and putting them back (the 0.28 and 0.32 lines).

Those lines have no planner hook: kvrules answers by replacing functions of
``vllm.v1.core.kv_cache_utils`` and every copy a loaded ``vllm.*`` module imported by name (for
example ``vllm.v1.engine.core.get_kv_cache_configs`` on 0.28). :class:`Patches` records what it
replaced, so that :meth:`Patches.restore` gives every module vLLM's own function back, and so
that kvrules' functions can call vLLM's own ones (:meth:`Patches.original`) when they hand a call
back to vLLM (:mod:`kvrules.integrations.vllm_fallback`). Importing this module never imports vLLM.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

_lock = threading.RLock()


def vllm_modules() -> list[ModuleType]:
    """Every loaded ``vllm.*`` module."""
    return [
        m for m in list(sys.modules.values()) if isinstance(m, ModuleType) and m.__name__.startswith("vllm")
    ]


@dataclass
class Patches:
    """kvrules' functions in place of vLLM's, by name.

    :ivar ours: name -> kvrules' function.
    :ivar replaced: every ``(module, name, vLLM's function)`` replaced, oldest first.
    """

    ours: Mapping[str, Callable[..., Any]]
    replaced: list[tuple[ModuleType, str, Any]] = field(default_factory=list)

    def apply(self, utils: ModuleType) -> list[tuple[ModuleType, str, Any]]:
        """Replace every reference to ``utils``' functions that is not kvrules' yet (in ``utils``
        and in every loaded ``vllm.*`` module holding the same object); returns what changed."""
        fresh: list[tuple[ModuleType, str, Any]] = []
        with _lock:
            for name, mine in self.ours.items():
                theirs = utils.__dict__.get(name)
                if theirs is None or theirs is mine:
                    continue
                for module in vllm_modules():
                    if module.__dict__.get(name) is theirs:
                        setattr(module, name, mine)
                        fresh.append((module, name, theirs))
            self.replaced.extend(fresh)
        return fresh

    def original(self, name: str) -> Callable[..., Any]:
        """vLLM's own function ``name``, as replaced last (a reload may have made a newer one).

        :raises KeyError: ``name`` was never replaced.
        """
        with _lock:
            for _, replaced_name, theirs in reversed(self.replaced):
                if replaced_name == name:
                    return theirs  # type: ignore[no-any-return]
        raise KeyError(name)

    def restore(self) -> int:
        """Give every module vLLM's functions back (modules that imported kvrules' functions after
        they were replaced included); returns how many replacements were undone."""
        with _lock:
            latest: dict[str, Any] = {}
            for module, name, theirs in reversed(self.replaced):  # newest original first
                latest.setdefault(name, theirs)
                if module.__dict__.get(name) is self.ours[name]:
                    setattr(module, name, theirs)
            for module in vllm_modules():
                for name, theirs in latest.items():
                    if module.__dict__.get(name) is self.ours[name]:
                        setattr(module, name, theirs)
            count = len(self.replaced)
            self.replaced.clear()
        return count

    def names(self) -> list[str]:
        """``module.function`` for every reference replaced, sorted."""
        with _lock:
            return sorted({f"{m.__name__}.{n}" for m, n, _ in self.replaced})


__all__ = ["Patches", "vllm_modules"]
