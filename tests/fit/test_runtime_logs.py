"""kvrules fit's weights and KV budget against published vLLM start logs
(tests/data/fit/vllm_start_logs.json, each quoted with its source).

The figures compared are the log's own: ``Model loading took X GiB`` against kvrules' weights per
GPU, and the KV-cache memory vLLM reported (``Available KV cache memory`` / ``reserved for KV
Cache``, or ``GPU KV cache size: N tokens`` times the per-token bytes of the plan) against
``total x gpu_memory_utilization - weights - runtime estimate``. Where a log does not state a
setting, the table below says what the test assumes and why; none of those values comes from
kvrules' code. All these logs predate vLLM 0.21, which started to count the CUDA-graph pool in the
KV budget, so the estimate is taken without it (``enforce_eager``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvrules.sizing.fit import fit

DATA = Path(__file__).parent.parent / "data"
LOGS = {log["source"]: log for log in json.loads((DATA / "fit" / "vllm_start_logs.json").read_text())["logs"]}
GIB = 1 << 30

#: per log: the config to count, the GPU total (GiB, as torch reports it), and the settings the log
#: does not print, with the reason for each assumption
CASES: dict[str, dict[str, Any]] = {
    # Llama-3-8B: Llama-3.1-8B's layers with an 8,192-token rope (the rope cache is 32 MiB smaller);
    # V0 without chunked prefill batches max_model_len (8,192) tokens; V0's 256 sequences
    "https://github.com/vllm-project/vllm/pull/10511": {
        "config": {
            **json.loads((DATA / "hf" / "meta-llama__Llama-3.1-8B" / "config.json").read_text()),
            "max_position_embeddings": 8192,
            "rope_scaling": None,
        },
        "total_gib": 79.22,
        "max_model_len": 8192,
        "tokens": 8192,
        "seqs": 256,
    },
    # RTX 3090, --max-model-len 20000, V0 without chunked prefill: 20,000 batched tokens
    "https://github.com/vllm-project/vllm/issues/10517": {
        "config": "meta-llama__Llama-3.1-8B",
        "total_gib": 23.58,
        "max_model_len": 20000,
        "tokens": 20000,
        "seqs": 256,
    },
    # four A10 (24 GB: 22.07 GiB as torch reports it), vLLM 0.8.5 (V1): vllm serve's defaults
    # below 70 GiB (2,048 tokens, 256 sequences); 1 KV head per rank
    "https://github.com/vllm-project/vllm/issues/17327": {
        "config": "Qwen__Qwen3-30B-A3B",
        "total_gib": 22.07,
        "max_model_len": 8192,
        "tokens": 2048,
        "seqs": 256,
        "tp": 4,
    },
    # two RTX 4090 (23.55 GiB each as torch reports it), V0 at 131,072 tokens: chunked prefill on,
    # 2,048 batched tokens
    "https://github.com/vllm-project/vllm/issues/13061": {
        "config": "deepseek-ai__DeepSeek-R1-Distill-Qwen-14B",
        "total_gib": 23.55,
        "max_model_len": 131072,
        "tokens": 2048,
        "seqs": 256,
        "tp": 2,
    },
    # one A10 (22.07 GiB as the log prints it), a vLLM 0.7.x V0 engine at the model's own 131,072
    # tokens (the log's max seq len). The model is not named: 14.9888 GB is Llama-3.1-8B's weights
    # with its 131,072-position rope cache to the fourth decimal (vllm#10517 logs the same), and TP 1
    # since that is the whole model. Not printed, so V0's defaults: chunked prefill on above 32K
    # tokens (EngineArgs.create_engine_config, use_long_context; Llama-3.1 has no sliding window)
    # with 2,048 batched tokens (SchedulerConfig's _DEFAULT_MAX_NUM_BATCHED_TOKENS, 2,048 since
    # vLLM PR #10544 of 2024-11, before 0.7.0) and EngineArgs' 256 sequences. The log's 0.22 GiB
    # activation peak fits 2,048 tokens, not a 131,072-token prefill
    "https://github.com/oracle-samples/oci-data-science-ai-samples/blob/main/ai-quick-actions/troubleshooting-tips.md": {
        "config": "meta-llama__Llama-3.1-8B",
        "total_gib": 22.07,
        "max_model_len": 131072,
        "tokens": 2048,
        "seqs": 256,
    },
}
#: logs compared on weights only (the config and fit's settings), and why not on the KV budget
WEIGHTS_ONLY: dict[str, dict[str, Any]] = {
    # the "before" log of a PR that changed what the profile holds: 5.6 GiB of non-KV memory
    "https://github.com/vllm-project/vllm/pull/17122": {"config": "meta-llama__Llama-3.1-8B"},
    # gpt-oss-120b on one H100, vLLM 0.10.1 with its defaults, which took the Marlin backend there
    # (the log's marlin_utils_fp4 warning; triton_kernels was not a dependency yet). Weights only:
    # the log does not print the GPU's total, and a failed start says little about the profile.
    # By hand (vLLM 0.10.1's Mxfp4MoEMethod.create_weights pads for Marlin, I 2880 -> 2944 (to
    # 128), H 2880 -> 3072 (to 256); prepare_moe_fp4_layer_for_marlin repacks each weight into as
    # many bytes, turns the e8m0 scales into 1-byte float8_e8m0fnu and the biases into bf16):
    #   per expert: gate_up 5888 x 1536 blocks + 5888 x 96 scales + 5888 x 2 bias bytes,
    #   down 3072 x 1472 + 3072 x 92 + 3072 x 2 = 14,431,744; x 128 experts x 36 layers
    #   = 66,501,476,352
    #   bf16 rest: embedding and lm_head 201088 (= 3142 x 64) x 2880 x 2 = 1,158,266,880 each;
    #   attention per layer q/k/v 5120 x 2880 + 5120 bias + o 2880 x 4096 + 2880 bias + 64 sinks
    #   = 26,550,144, x 36 x 2 = 1,911,610,368; router (128 x 2880 + 128) x 36 x 2 = 26,551,296;
    #   norms (2 x 36 + 1) x 2880 x 2 = 420,480
    #   yarn rope cache, float32 in gpt_oss.py: 131072 x 64 x 4 = 33,554,432
    #   total 70,790,146,688 bytes = 65.928 GiB against 65.9651 logged: 0.037 GiB (37 MiB, about
    #   1 MiB a layer) unexplained. Not counted: Marlin's workspaces, 132 SMs x 4 int32 a layer
    #   (under 0.1 MiB in all); the pre-repack tensors are freed before the log measures
    "https://github.com/vllm-project/vllm/issues/23278": {
        "config": {
            **json.loads((DATA / "hf" / "openai__gpt-oss-120b" / "config.json").read_text()),
            # the stored file keeps the KV fields; the published config.json has 2880
            "intermediate_size": 2880,
        },
        "fit": {"mxfp4_backend": "marlin"},
    },
    # gpt-oss-120b on one H100, vLLM 0.14.1, "Using Triton backend" (triton_kernels' matmul_ogs).
    # Weights only: the log found ends before the profile and prints no GPU total. By hand (vLLM
    # 0.14's Mxfp4MoEMethod: create_weights rounds I to 64, 2880 stays; process_weights_after_loading
    # turns both biases to float32, swaps each weight for triton_kernels' Hopper value layout of as
    # many bytes (rows to 16, packed bytes to 32: no padding here) and frees it, but leaves the
    # uint8 scales registered on the layer while their HopperMXScaleLayout copy, rows padded to
    # 2 * 8 warps * 2 * 8 = 256, lives in the method's PrecisionConfig):
    #   per expert: gate_up 5760 x 1440 blocks + 5760 x 90 scales + 5888 x 90 swizzled scales
    #   (5760 -> 23 x 256) + 5760 x 4 bias bytes, down 2880 x 1440 + 2880 x 90 + 3072 x 90
    #   (2880 -> 12 x 256) + 2880 x 4 = 14,060,160; x 128 experts x 36 layers = 64,789,217,280
    #   (the checkpoint's 60,993,699,840, plus 3,715,891,200 of swizzled scales and 79,626,240 of
    #   wider biases)
    #   bf16 rest and float32 rope cache as for vllm#23278 above: 4,288,670,336
    #   total 69,077,887,616 bytes = 64.334 GiB against 64.38 logged (64.375-64.385 before
    #   rounding): 0.041-0.051 GiB (42-52 MiB, 1.2-1.4 MiB a layer) unexplained, next to the
    #   37 MiB vllm#23278 leaves through Marlin. The pre-swizzle weights, the transposed and padded
    #   intermediates and the bf16 biases are freed before the log measures (memory allocated
    #   after loading minus before, DeviceMemoryProfiler)
    "https://github.com/vllm-project/vllm/issues/33155": {
        "config": {
            **json.loads((DATA / "hf" / "openai__gpt-oss-120b" / "config.json").read_text()),
            "intermediate_size": 2880,
        },
        "fit": {"mxfp4_backend": "triton"},
    },
    # Qwen3-235B-A22B-FP8 at TP 4, one worker of four ("vllm serve ... --tensor-parallel-size 4
    # --gpu-memory-utilization 0.5", vLLM main of 2025-07-22, V1). By hand (block fp8: e4m3 weights
    # with a float32 scale per 128 x 128 block; lm_head, the routers and the norms left in bf16 by
    # the config's modules_to_not_convert; experts split on their intermediate size, 1536 / 4 = 384
    # a rank; the vocabulary, 151936, is already a multiple of 64: 37984 a rank):
    #   per layer: qkv 2304 x 4096 + 18 x 32 scales x 4 B, o 4096 x 2048 + 32 x 16 x 4, q/k norms
    #   2 x 128 x 2, layer norms 2 x 4096 x 2, router 128 x 4096 x 2, experts
    #   128 x (768 x 4096 + 6 x 32 x 4) + 128 x (4096 x 384 + 32 x 3 x 4) = 623,022,848;
    #   x 94 = 58,564,147,712
    #   embedding and lm_head 37984 x 4096 x 2 = 311,164,928 each; final norm 8,192; the bf16 rope
    #   cache 40960 x 128 x 2 = 10,485,760
    #   total 59,196,971,520 bytes = 55.131 GiB against 55.13 logged.
    # Weights only: kvrules' KV budget is out of reach. With the settings the log implies (the GPU's
    # total as torch reports it, 69.86 GiB requested / 0.5 = 139.72 GiB; max_model_len 40,960, the
    # config's max_position_embeddings, as the command sets none; vllm serve's V1 defaults from
    # 70 GiB on a GPU that is not an A100, 8,192 batched tokens and 1,024 sequences,
    # EngineArgs._set_default_args_v1 in vllm/engine/arg_utils.py, the same before and after this
    # date) kvrules leaves 11.55 GiB where the log's "Available KV cache memory" is 7.07 (this vLLM
    # did not take a CUDA-graph pool out of it): the profile held 5.62 GiB of torch peak and 2.04
    # outside torch where kvrules estimates 2.38 and 0.80. docs/fit.md says what is known of the gap.
    "https://github.com/vllm-project/vllm/pull/21429": {"config": "Qwen__Qwen3-235B-A22B-FP8", "tp": 4},
}
#: kvrules' weights differ from the log: not modelled yet (said in docs/fit.md)
KNOWN_GAPS: set[str] = set()


def _config(name_or_dict: Any) -> Any:
    return DATA / "hf" / name_or_dict if isinstance(name_or_dict, str) else name_or_dict


def _report(source: str) -> Any:
    case, log = CASES[source], LOGS[source]
    return fit(
        _config(case["config"]),
        gpu_memory=int(case["total_gib"] * GIB),
        gpu_memory_utilization=log["gpu_memory_utilization"] or 0.9,
        tp=case.get("tp", 1),
        max_model_len=case["max_model_len"],
        max_num_batched_tokens=case["tokens"],
        max_num_seqs=case["seqs"],
        enforce_eager=True,
        strategies=("vllm-0.33",),
    )


def test_enough_logs_are_compared() -> None:
    assert len(CASES) + len(WEIGHTS_ONLY) >= 5
    assert set(CASES) | set(WEIGHTS_ONLY) | KNOWN_GAPS <= set(LOGS)


@pytest.mark.parametrize("source", [*CASES, *WEIGHTS_ONLY])
def test_weights_per_gpu_match_the_log(source: str) -> None:
    log = LOGS[source]
    case = CASES[source] if source in CASES else WEIGHTS_ONLY[source]
    report = fit(
        _config(case["config"]),
        gpu_memory="80GiB",
        tp=case.get("tp", 1),
        max_model_len=4096,
        strategies=("vllm-0.33",),
        **case.get("fit", {}),
    )
    assert report.weights_bytes_per_gpu / GIB == pytest.approx(log["weights_gib"], rel=0.012)


def _logged_kv_gib(log: dict[str, Any], report: Any) -> float:
    if log["kv_cache_gib"] is not None:
        return float(log["kv_cache_gib"])
    plan = report.answers[0].plan
    per_token = sum(spec.page_size_bytes / spec.block_size for spec in plan.specs.values())
    return float(log["kv_cache_tokens"] * per_token / GIB)


@pytest.mark.parametrize("source", list(CASES))
def test_kv_budget_is_within_reach_of_the_log(source: str) -> None:
    """The estimate's error: at most 1 GiB or 12 % of the logged KV memory, whichever is more."""
    report = _report(source)
    logged = _logged_kv_gib(LOGS[source], report)
    estimated = report.kv_cache_bytes_per_gpu / GIB
    assert abs(estimated - logged) <= max(1.0, 0.12 * logged), (estimated, logged, report.runtime.formulas)
