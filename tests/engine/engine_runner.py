"""Start real vLLM engines one after another in this process and write what each did as JSON.

Run by tests/engine/test_real_engines.py in the engine venv (never imported by the test suite):

    python engine_runner.py SETUPS.json OUT.json

``SETUPS.json`` is a list of setups: ``{"name", "model", "draft" (optional), "k" (speculative
tokens), "prefix_caching" (optional bool)}``; model paths are directories holding one
``config.json``. Every engine gets dummy weights, no tokenizer, eager mode, ``max_model_len``
512, 8 greedy requests of 16 tokens. Whether kvrules plans is decided by the environment the
test gives this process (``KVRULES_VLLM_STRATEGIES``), exactly as a deployment turns it on.

Written per setup: the greedy tokens, vLLM's logged KV-cache capacity, the scheduler's
``kv_cache_config`` field by field, the start time, kvrules' events (the ``kvrules`` logger) and
fallback decisions, and vLLM's log lines from ``vllm.kvrules``; or the error that stopped it.
"""

from __future__ import annotations

import dataclasses
import enum
import gc
import json
import logging
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

CAPACITY = re.compile(
    r"KV cache size: ([\d,]+) tokens, Maximum concurrency for (\d+) tokens per request: ([\d.]+)x"
)
PROMPTS = [[1 + i, 5, 7, 9, 11 + i] for i in range(8)]


class Capture(logging.Handler):
    """Keeps every record it sees."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class VllmRecords:
    """Every record made for a ``vllm`` logger, seen where records are made (vLLM replaces the
    handlers of its ``vllm`` logger whenever it configures logging, so a handler would be lost)."""

    def __init__(self) -> None:
        self.records: list[logging.LogRecord] = []
        self._make = logging.getLogRecordFactory()
        logging.setLogRecordFactory(self._record)

    def _record(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self._make(*args, **kwargs)
        if record.name == "vllm" or record.name.startswith("vllm."):
            self.records.append(record)
        return record


def plain(value: Any) -> Any:
    """``value`` (vLLM's dataclasses, enums, dtypes) as JSON data, field by field."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"__class__": type(value).__name__, **out}
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def run_one(setup: dict[str, Any], vllm_capture: VllmRecords, kv_capture: Capture) -> dict[str, Any]:
    from vllm import LLM, SamplingParams

    from kvrules.integrations import vllm as kv_vllm
    from kvrules.integrations import vllm_align, vllm_fallback

    vllm_capture.records.clear()
    kv_capture.records.clear()
    vllm_fallback.reset()
    kwargs: dict[str, Any] = {}
    if setup.get("draft"):
        kwargs["speculative_config"] = {"model": setup["draft"], "num_speculative_tokens": setup.get("k", 2)}
    if "prefix_caching" in setup:
        kwargs["enable_prefix_caching"] = setup["prefix_caching"]
    if "gpu_memory_utilization" in setup:  # the multiprocess CPU worker checks free memory against it
        kwargs["gpu_memory_utilization"] = setup["gpu_memory_utilization"]
    started = time.perf_counter()
    llm = LLM(
        model=setup["model"],
        load_format="dummy",
        skip_tokenizer_init=True,
        enforce_eager=True,
        max_model_len=512,
        seed=0,
        dtype="bfloat16",
        max_num_seqs=8,
        **kwargs,
    )
    start_s = time.perf_counter() - started
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True, detokenize=False)
    outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params, use_tqdm=False)
    core = llm.llm_engine.engine_core
    inner = getattr(core, "engine_core", None)
    config = plain(inner.scheduler.kv_cache_config) if inner is not None else None
    messages = [r.getMessage() for r in vllm_capture.records]
    logged = [m.groups() for m in map(CAPACITY.search, messages) if m]
    cache = llm.llm_engine.vllm_config.cache_config
    align = vllm_align.last_decision()
    result = {
        "name": setup["name"],
        "ok": True,
        "tokens": [list(o.outputs[0].token_ids) for o in outs],
        # what vLLM logs as "KV cache size: N tokens" (vLLM logs a line once per distinct text)
        "kv_tokens": getattr(cache, "kv_cache_size_tokens", None),
        "concurrency": getattr(cache, "kv_cache_max_concurrency", None),
        "logged": [{"kv_tokens": int(t.replace(",", "")), "concurrency": float(c)} for t, _, c in logged],
        "num_blocks": config["num_blocks"] if config else None,
        "kv_cache_config": config,
        "start_s": round(start_s, 2),
        "kvrules_events": [
            {"event": getattr(r, "kvrules_event", r.getMessage()), **plain(getattr(r, "kvrules_fields", {}))}
            for r in kv_capture.records
        ],
        "vllm_kvrules_log": [r.getMessage() for r in vllm_capture.records if r.name == "vllm.kvrules"],
        "fallbacks": [d.to_dict() for d in kv_vllm.fallbacks()],
        "align": None if align is None else align.to_dict(),
        "installed": kv_vllm.installed_strategies(),
    }
    del outs, llm, core, inner
    gc.collect()
    return result


def main(setups_path: str, out_path: str) -> int:
    setups = json.loads(Path(setups_path).read_text())
    vllm_capture, kv_capture = VllmRecords(), Capture()
    kvrules_logger = logging.getLogger("kvrules")
    kvrules_logger.addHandler(kv_capture)
    kvrules_logger.setLevel(logging.INFO)
    results = []
    for setup in setups:
        try:
            results.append(run_one(setup, vllm_capture, kv_capture))
        except Exception as exc:
            results.append(
                {
                    "name": setup["name"],
                    "ok": False,
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()[-4000:],
                }
            )
        Path(out_path).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
