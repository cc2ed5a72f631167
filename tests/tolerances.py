"""Every numeric tolerance used by the tests, in one place.

``REFERENCE_VS_FLOAT64``: a torch reference, run in the given dtype, against
an independent float64 loop. ``KERNEL_VS_REFERENCE``: a kernel backend
(Triton, Ascend C) against the torch reference in the same dtype. Values are
(atol, rtol) for ``torch.testing.assert_close`` and are as tight as the
dtype's rounding allows for the reductions involved.
"""
import torch

REFERENCE_VS_FLOAT64 = {
    torch.float32: (2e-5, 2e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (2e-2, 2e-2),
}

KERNEL_VS_REFERENCE = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (2e-2, 2e-2),
}

# kv_scales_from_absmax is one float32 division of an exact max by 127:
# correctly rounded, so within 2**-24 relative of the float64 quotient.
INT8_SCALE_VS_FLOAT64 = {
    torch.float32: (0.0, 1e-6),
}


def tol(table, dtype):
    atol, rtol = table[dtype]
    return {"atol": atol, "rtol": rtol}

# The qwen_ops Qwen3.5 model against transformers' Qwen3.5 on the same tiny
# float32 checkpoint: logits and logprobs (measured max |diff| ~5e-6 over a
# 40-token prompt and 12 generated tokens).
MODEL_VS_TRANSFORMERS = {
    torch.float32: (1e-4, 1e-4),
}

# The same with an INT8 KV cache (per-channel scales calibrated by absmax):
# logprobs of the generated tokens against transformers' float32 ones
# (measured max |diff| ~0.018).
MODEL_INT8_KV_VS_TRANSFORMERS = {
    torch.float32: (5e-2, 0.0),
}

# Triton's interpreter (CPU CI) converts float32 -> bfloat16 by truncating the
# mantissa (``triton/runtime/interpreter.py``: ``cast_impl`` passes no rounding
# mode to ``_convert_float``), where compiled Triton and torch round to
# nearest even. A bfloat16 value stored from float32 data under the
# interpreter is therefore up to one bfloat16 ulp off: at most 2**-7 of the
# value (8 significant bits). Compiled kernels are compared exactly.
INTERPRETER_FP32_TO_BF16 = {
    torch.bfloat16: (0.0, 2.0 ** -7),
}

# The vectorised torch-backend forms (ops/gdn/vectorized_recurrent.py,
# ops/conv/vectorized_update.py) against the references they replace on the
# CPU, both float32 throughout: the same arithmetic with sums taken in another
# order (a batched matmul instead of per-sequence einsums; K addcmul passes
# instead of an unfolded reduction). Measured max |diff| ~1e-7 (GDN, values of
# order 1, up to 12 tokens), ~5e-7 (conv, before SiLU) and ~8e-7 (attention: the
# softmax's sums and the products over blocks taken in another order). Outputs stored in a
# low-precision dtype can round to neighbouring values: one ulp of that dtype.
VECTORIZED_VS_REFERENCE = {
    torch.float32: (2e-6, 2e-6),
    torch.bfloat16: (0.0, 2.0 ** -7),
}
