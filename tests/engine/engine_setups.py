"""The real-engine runs of tests/engine: each run is one process of ``engine_runner.py``
starting several engines in a row (vLLM imports once per process), with the environment a
deployment would give it; the setups every run starts; the test-only plugin's installation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MODELS = HERE / "models"
RUNNER = HERE / "engine_runner.py"
#: one engine run may take this long (vLLM's import, then each engine's start and requests)
RUN_TIMEOUT_S = 1200


def setup(name: str, model: str, draft: str | None = None, **extra: Any) -> dict[str, Any]:
    """One engine: the model (a folder of ``models/``), a draft model (``k`` = 2 speculative
    tokens) and ``LLM()`` options the runner knows (``prefix_caching``, ``gpu_memory_utilization``)."""
    out: dict[str, Any] = {"name": name, "model": str(MODELS / model)}
    if draft is not None:
        out.update(draft=str(MODELS / draft), k=2)
    out.update(extra)
    return out


@dataclass(frozen=True)
class EngineRun:
    """What one runner process did: a result per setup (by name) and its whole output."""

    results: dict[str, dict[str, Any]]
    output: str

    def __getitem__(self, name: str) -> dict[str, Any]:
        result = self.results[name]
        assert result["ok"], f"engine {name!r} failed: {result['error']}\n{result.get('traceback', '')}"
        return result


def run_engines(
    setups: Sequence[Mapping[str, Any]],
    workdir: Path,
    *,
    env: Mapping[str, str] | None = None,
    multiprocess: bool = False,
    pythonpath: Sequence[Path] = (),
) -> EngineRun:
    """Start ``setups`` one after another in one new process of this Python."""
    workdir.mkdir(parents=True, exist_ok=True)
    given, out = workdir / "setups.json", workdir / "results.json"
    given.write_text(json.dumps(list(setups)))
    child = {k: v for k, v in os.environ.items() if not k.startswith(("KVRULES_", "VLLM_"))}
    child.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
    # vLLM 0.32's CPU path for a Mamba2 target with a draft reads memory it never wrote, so its
    # greedy tokens follow whatever the heap held: here `MALLOC_PERTURB_=165` turns vLLM alone's
    # tokens for `mamba2-hybrid+wide-draft` into the ones CI's kvrules run gave. glibc filling
    # every allocation with one byte makes each run's tokens depend on the plan alone, not on
    # what else the process imported before.
    child["MALLOC_PERTURB_"] = "37"
    if not multiprocess:
        child["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if pythonpath:
        child["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), child.get("PYTHONPATH", "")])
    child.update(env or {})
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(given), str(out)],
        env=child,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    output = done.stdout + done.stderr
    (workdir / "output.log").write_text(output)
    assert done.returncode == 0 and out.exists(), f"the engine runner failed:\n{output[-6000:]}"
    return EngineRun({r["name"]: r for r in json.loads(out.read_text())}, output)


#: in-process engines, each started with vLLM alone and with kvrules turned on
SETUPS = [
    setup("dense", "llama"),
    setup("all-sliding", "mistral-swa"),
    setup("sliding-5to1", "gemma3-5to1"),
    setup("sliding-3to2", "gemma3-3to2"),
    setup("mamba2-hybrid", "granite-4.0-h"),
    setup("gdn-hybrid", "qwen3-next"),
    setup("dense+draft", "llama", "llama-draft"),
    setup("sliding-3to2+draft", "gemma3-3to2", "llama-draft"),
    # vLLM's Mamba `align` mode with a draft calls a Triton kernel that is a stub on CPU
    setup("gdn-hybrid+draft", "qwen3-next", "llama-draft", prefix_caching=False),
    setup("gdn-hybrid+wide-draft", "qwen3-next", "llama-draft-wide", prefix_caching=False),
    setup("mamba2-hybrid+wide-draft", "granite-4.0-h", "llama-draft-wide", prefix_caching=False),
]
#: the engine core in its own process (vLLM's default), as a served model runs
MULTIPROCESS = [setup("sliding-3to2+draft", "gemma3-3to2", "llama-draft", gpu_memory_utilization=0.5)]
#: the test-only plugin ``test-raiser`` (its router always raises), through its entry point
DECLINE = [setup("sliding-3to2", "gemma3-3to2")]


def install_test_plugin(root: Path) -> Path:
    """A folder that, on ``PYTHONPATH``, installs ``kvrules_test_raiser`` as a distribution with
    an entry point in ``kvrules.plugins`` (as ``pip install`` of a plugin package would)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "kvrules_test_raiser.py").write_text((HERE / "plugin" / "kvrules_test_raiser.py").read_text())
    info = root / "kvrules_test_raiser-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kvrules-test-raiser\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[kvrules.plugins]\ntest-raiser = kvrules_test_raiser\n")
    return root
