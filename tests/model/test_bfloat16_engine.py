"""The engine in bfloat16 on the CPU, end to end, against its float32 run (float32_parity.py).

``LLM(dtype="bfloat16")``: weights and activations bfloat16, every projection's sums in float32 (torch's CPU
GEMM), the norms, gates and the GDN recurrence in float32 as in float32 runs. Greedy tokens must equal
float32's and the teacher-forced logprobs stay within BF16_MODEL_VS_FLOAT32_LOGPROB; with weight-only INT8
projections too. The budget line counts bfloat16 weights at 2 bytes.
"""
from __future__ import annotations

import pytest
import torch
from float32_parity import assert_parity, default_dir, float32_run  # noqa: F401 (fixtures)
from tolerances import BF16_MODEL_VS_FLOAT32_LOGPROB

from qwen_ops import LLM


@pytest.mark.parametrize("quantization", [None, "int8_weight_only"])
def test_bfloat16_generates_like_float32(quantization, default_dir, float32_run):
    llm = LLM(default_dir, dtype="bfloat16", num_blocks=64, quantization=quantization)
    assert llm.llm_engine.model.dtype == torch.bfloat16
    what = "bfloat16" + (f"+{quantization}" if quantization else "")
    assert_parity(llm, float32_run, BF16_MODEL_VS_FLOAT32_LOGPROB[what], what)
    config, float_config = llm.llm_engine.engine_config, float32_run[3]
    if quantization is None:  # every weight but the float32 GDN gates (A_log, dt_bias) at half the bytes
        assert "weights=bfloat16 (" in llm.budget_summary()
        assert float_config.weight_bytes / 2 <= config.weight_bytes < float_config.weight_bytes / 2 * 1.001
