"""Hostile plugin distributions (issue 25 item 4): installed the way ``pip install`` leaves a
distribution (a ``*.dist-info`` folder with ``METADATA`` and ``entry_points.txt``, beside its
module), in a folder that a forked child puts first on ``sys.path``. ``importlib.metadata`` reads
entry points from every ``sys.path`` entry, so kvrules discovers them exactly as it discovers an
installed package; :func:`make_venv` also makes a throwaway venv for the ``pip`` path itself.

:data:`DISTS` are the hostile distributions: an entry point that raises at import, one naming no
module, one naming a module attribute that is not a plugin, ones that patch a kvrules method, a
property or a module function, a rule that answers wrongly, one that only defines a spec type of its own (no patch), and a
distribution with an odd name.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz.cli_cases import WARM_UP
from fuzz.env_cases import show_warning
from fuzz.forked import fork_main, warm_up


@dataclass(frozen=True)
class Dist:
    """One distribution: its name, its entry point (name and value) and its module's source."""

    name: str
    entry: str
    value: str
    module: str = ""
    source: str = ""


_WRONG_ROUTER = """
from dataclasses import dataclass
from kvrules.plugin import Check, Router, applies, hookimpl


@dataclass(frozen=True)
class WrongRouter(Router):
    name: str = "hostile-router"
    priority: int = 10_000
    description: str = "Always applies, then routes no layer at all (a wrong answer)."

    def check(self, specs, ctx) -> Check:
        return applies("the hostile router always applies.")

    def route(self, specs, ctx):
        return []


@hookimpl
def kvrules_register_rules(registry):
    registry.add(WrongRouter())
"""

DISTS: dict[str, Dist] = {
    "raises": Dist(
        "kvrules-hostile-raises",
        "hostile-raises",
        "kvrules_hostile_raises",
        "kvrules_hostile_raises",
        'raise RuntimeError("the hostile plugin refuses to import")\n',
    ),
    "no-module": Dist("kvrules-hostile-missing", "hostile-missing", "kvrules_hostile_nowhere"),
    "not-a-plugin": Dist(
        "kvrules-hostile-const",
        "hostile-const",
        "kvrules_hostile_const:VALUE",
        "kvrules_hostile_const",
        "VALUE = 3\n",
    ),
    "patch-method": Dist(
        "kvrules-hostile-method",
        "hostile-method",
        "kvrules_hostile_method",
        "kvrules_hostile_method",
        "import kvrules\n\nkvrules.FullAttentionSpec.max_memory_usage_bytes = lambda self, config: 0\n",
    ),
    "patch-property": Dist(
        "kvrules-hostile-property",
        "hostile-property",
        "kvrules_hostile_property",
        "kvrules_hostile_property",
        "import kvrules\n\n_old = kvrules.FullAttentionSpec.page_size_bytes\n"
        "_get = getattr(_old, 'fget', None) or _old.func  # a property or a cached_property\n"
        "kvrules.FullAttentionSpec.page_size_bytes = property(lambda self: 2 * _get(self))\n",
    ),
    "patch-function": Dist(
        "kvrules-hostile-function",
        "hostile-function",
        "kvrules_hostile_function",
        "kvrules_hostile_function",
        "import kvrules\n\n_plan = kvrules.plan\nkvrules.plan = lambda *a, **k: _plan(*a, **k)\n",
    ),
    "wrong-rule": Dist(
        "kvrules-hostile-rule", "hostile-rule", "kvrules_hostile_rule", "kvrules_hostile_rule", _WRONG_ROUTER
    ),
    "own-spec-type": Dist(
        "kvrules-own-spec-type",
        "own-spec-type",
        "kvrules_own_spec_type",
        "kvrules_own_spec_type",
        "from dataclasses import dataclass\n\nimport kvrules\n\n\n"
        "@dataclass(frozen=True)\nclass OwnSpec(kvrules.FullAttentionSpec):\n"
        '    type_name = "own_spec"\n\n    def max_memory_usage_bytes(self, config):\n        return 0\n',
    ),
    "odd-name": Dist(
        "Kvrules_Ödd.Name-ü",
        "ödd plugin.x",
        "kvrules_hostile_odd",
        "kvrules_hostile_odd",
        '"""A plugin from a distribution with an odd name, adding a method to a kvrules class."""\n'
        "import kvrules\n\nkvrules.FullAttentionSpec.kvrules_odd_helper = lambda self: 1\n",
    ),
}


def _folder_name(dist: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in dist)


def install(root: Path, dist: Dist) -> Path:
    """Write ``dist`` into ``root`` as an installed distribution (dist-info folder and module)."""
    root.mkdir(parents=True, exist_ok=True)
    if dist.module:
        (root / f"{dist.module}.py").write_text(dist.source, encoding="utf-8")
    info = root / f"{_folder_name(dist.name)}-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist.name}\nVersion: 1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[kvrules.plugins]\n{dist.entry} = {dist.value}\n", encoding="utf-8"
    )
    return root


def run_with(folder: Path, argv: Sequence[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """``kvrules argv`` in a forked child with ``folder`` first on ``sys.path`` (and ``env`` set
    there): the report of :func:`fuzz.forked.fork_main` (``rc``, ``stderr``, and the tail of
    stdout after a ``[stdout]`` line in it)."""
    warm_up(WARM_UP)

    def target(args: list[str]) -> int:
        import io
        import warnings

        from kvrules.cli.main import main

        os.environ.update(env or {})
        sys.path.insert(0, str(folder))
        warnings.resetwarnings()
        warnings.showwarning = show_warning
        out = io.StringIO()
        real, sys.stdout = sys.stdout, out
        try:
            return main(args)
        finally:
            sys.stdout = real
            sys.stderr.write("\n[stdout]\n" + out.getvalue()[-20000:])

    return fork_main(list(argv), target=target)


def make_venv(path: Path, project: Path) -> Path:
    """A throwaway venv at ``path`` (``--system-site-packages``, no pip of its own) that sees this
    interpreter's packages and ``project`` (kvrules' checkout) first; its python."""
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(path)
    python = path / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ours = [p for p in sys.path if p.endswith("site-packages")]
    lines = [str(project)] + [f"import site; site.addsitedir({p!r})" for p in ours]
    Path(site, "kvrules_fuzz_parent.pth").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return python


def pip_install(python: Path, dist: Dist, source: Path) -> None:
    """``pip install --no-deps`` of ``dist`` as a local project (pyproject.toml, setuptools)."""
    source.mkdir(parents=True, exist_ok=True)
    (source / f"{dist.module}.py").write_text(dist.source, encoding="utf-8")
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{dist.name}"\nversion = "1.0"\n\n'
        f'[project.entry-points."kvrules.plugins"]\n"{dist.entry}" = "{dist.value}"\n\n'
        f'[tool.setuptools]\npy-modules = ["{dist.module}"]\n',
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
        env={**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )


__all__ = ["DISTS", "Dist", "install", "make_venv", "pip_install", "run_with"]
