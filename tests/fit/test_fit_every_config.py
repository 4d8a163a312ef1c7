"""``kvrules.fit()`` on every stored HF config: a report, or one clean error naming what cannot
be counted; the refusals are exactly the known ones, so a new one shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvrules import ModelFileError
from kvrules.sizing.fit import fit

HF = Path(__file__).parent.parent / "data" / "hf"
CONFIGS = sorted(d.name for d in HF.iterdir() if (d / "config.json").is_file())
#: configs whose weights kvrules cannot count, and the field or reason its error names
NOT_COUNTED = {
    "Qwen__Qwen2.5-VL-7B-Instruct": "vision_config.intermediate_size",
    "google__gemma-3-12b-it": "vision_config.intermediate_size",
    "google__gemma-3-4b-it": "vision_config.intermediate_size",
    "meta-llama__Llama-4-Maverick-17B-128E-Instruct": "vision_config.intermediate_size",
    "meta-llama__Llama-4-Scout-17B-16E-Instruct": "vision_config.intermediate_size",
    "mistralai__Mistral-Small-3.1-24B-Instruct-2503": "vision_config.intermediate_size",
    "tencent__Hunyuan-A13B-Instruct": "moe_intermediate_size",
}


@pytest.mark.parametrize("name", CONFIGS)
def test_fit_answers_or_names_what_it_cannot_count(name: str) -> None:
    if name in NOT_COUNTED:
        with pytest.raises(ModelFileError, match=NOT_COUNTED[name]):
            fit(HF / name, gpu="H100", max_model_len=8192, allow_assumed_sizes=True)
        return
    report = fit(HF / name, gpu="H100", max_model_len=8192, allow_assumed_sizes=True)
    assert report.weights_bytes_per_gpu > 0 and len(report.answers) == 2
    for answer in report.answers:
        assert answer.fits == (answer.plan is not None)
        if answer.fits:
            assert answer.max_concurrency >= 1 and answer.max_model_len_fits >= 8192
    assert all(alt.report.fits for alt in report.nearest)
