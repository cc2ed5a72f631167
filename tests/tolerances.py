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

# qwen_ops::small_m_linear (bindings/cpu/) against F.linear and against a float64 product: all three
# are float32 dot products over K taken in different orders (SIMD lanes then a fixed lane fold, MKL's
# blocking, exact), so they differ by rounding only, a few ulps of the sum of |w * x| terms. With the
# tests' operands (outputs of order 1, K up to 3584) measured max |diff| 2.9e-6 kernel vs F.linear,
# 1.5e-6 (AVX-512) to 2.2e-6 (portable, AVX2) kernel vs float64, 2.5e-6 F.linear vs float64: the kernel
# is as accurate as F.linear. 2e-5 leaves room for other draws without hiding a wrong element (an
# off-by-one in K or a missed column is off by O(1)).
SMALL_M_LINEAR = {
    torch.float32: (2e-5, 2e-5),
}

# The bfloat16 small_m_linear (tests/ops/test_small_m_linear_bf16.py) against the float32 product of the same
# bfloat16 operands: the products are exact in float32 and summed there (vdpbf16ps, or the portable loop),
# then the result is rounded once to bfloat16: at most half a bfloat16 ulp, <= 2^-8 of |out| (rtol 4e-3),
# plus the float32 sums' order (a few 1e-7 at outputs of order 1; atol 2e-5 as SMALL_M_LINEAR). A wrong
# element, lane or K tail is off by O(1).
SMALL_M_LINEAR_BF16 = {
    torch.bfloat16: (2e-5, 4e-3),
}

# The C++ decode attention's variants (tests/ops/test_kv_kernel_isas.py) at Qwen3.5's head size D = 256 with
# sharp softmaxes (query x 3), against the float32 reference: both take 256-term dot products and weighted sums
# over hundreds of tokens in float32, in different orders, and a score's rounding error e scales its softmax
# weight by exp(e), so the differences grow with D and with the scores' size past VECTORIZED_VS_REFERENCE's
# (measured at D <= 32): up to 2.9e-6 absolute / 1.2e-5 relative measured (AVX2, INT8). 1e-5 + 1e-5 * |x| leaves
# room for other draws; a wrong exponential, running max or lane moves outputs by 1e-3 or more.
DECODE_KERNEL_AT_HEAD_256 = {
    torch.float32: (1e-5, 1e-5),
}

# The Triton chunk kernels (ops/gdn/triton_chunk.py) with 16-bit inputs give every tl.dot its operands in
# that dtype (as fla does: tensor cores, float32 accumulation): Tinv's factored forms, w, Aqk, the state S
# at each chunk start and v_new are rounded to it (half an ulp: 2**-11 float16, 2**-8 bfloat16, relative),
# where the torch reference keeps float32. Final states (float32, entries up to ~4 in the tests) against the
# float32 reference, measured max |diff| over 3 draws (seeds 0-2) of 4 packed sequences (1-130 tokens, Dk 32,
# Dv 48): float16 kernel under the interpreter 5.9e-4; bfloat16 by the
# rounding model of tests/gdn_chunk_rounding.py rounding to nearest as a device does 4.7e-3, and the bfloat16
# kernel under the interpreter, whose float32 -> bfloat16 conversions truncate (INTERPRETER_FP32_TO_BF16),
# 9.0e-3. The bounds leave 2-4x. Outputs, stored in the 16-bit dtype, stay within KERNEL_VS_REFERENCE.
CHUNK_16BIT_DOTS_STATE_VS_FLOAT32 = {
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (2e-2, 2e-2),
}

# The 16-bit kernel under the interpreter against the rounding model at the same dtype (for bfloat16 the model
# truncating as the interpreter does): both round the same operands, but float32 sums taken in another order
# put a few operands on the other side of a rounding boundary (one ulp each), so they agree to a few such
# flips, not bit for bit. Measured max |diff| (final states) over the draws above: float16 2.5e-4, bfloat16
# 8.4e-4. The bounds leave 4-5x and stay well under CHUNK_16BIT_DOTS_STATE_VS_FLOAT32's.
CHUNK_KERNEL_VS_ROUNDING_MODEL = {
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (4e-3, 4e-3),
}

# INT8-weight projections (ops/int8_linear). W8A8: no tolerance at all. The int8 products are summed in
# int32, which is exact (|sum| <= 128 * 128 * K < 2^31 for K <= 65536), and the four float32 roundings after
# it (int64 -> float32, * x_scale, * weight_scale, + bias) are the same operations in the same order in the
# reference, the C++ variants (compiled with -ffp-contract=off, so nothing fuses) and the Triton interpreter,
# so the outputs are equal bitwise. Weight-only: float32 sums of K products in another order than the
# reference's matmul (SIMD lanes, tiles), each product exact (an int8 times a float32 fits 32 mantissa bits
# only after rounding once): relative error a few float32 ulps of sum |x * w|; 2e-5 of an output of order 1
# (weights scaled by 1/K ** 0.5 in the tests), as SMALL_M_LINEAR.
INT8_WEIGHT_ONLY_VS_REFERENCE = {
    torch.float32: (2e-5, 2e-5),
    torch.bfloat16: (2e-2, 2e-2),  # the same sums, then one bfloat16 rounding of the output
}

# The engine with INT8 projections against the same checkpoint run in float32, on the tiny default model
# (tests/model/test_int8_weights.py): teacher-forced logprobs of a 48-token sequence (32 prompt + 16 greedy
# tokens). Measured max |d logprob| over the sequence's tokens: W8A8_DYNAMIC 0.0097, static W8A8 0.022,
# weight-only 0.0069 with a float32 lm_head, 0.0084 since "int8_weight_only" quantizes the lm_head too (over
# the whole vocabulary 0.031, 0.16, 0.020 with the float head); greedy tokens 16/16 in all three. The bounds
# leave 2.4-3x: INT8 rounding of weights (and activations) is the error, not float32 rounding.
INT8_MODEL_VS_FLOAT32_LOGPROB = {"W8A8_DYNAMIC": 0.03, "W8A8": 0.06, "W8A16": 0.02}

# The engine in bfloat16 (weights and activations; projections summed in float32 by torch's CPU GEMM, norms and
# gates in float32) against float32 on the tiny default model, whose weights are stored in bfloat16 (so only
# the activations' rounding differs): teacher-forced logprobs as INT8_MODEL_VS_FLOAT32_LOGPROB. Measured max
# |d logprob| 0.0043 (bfloat16) and 0.0110 (bfloat16 with weight-only INT8, its lm_head INT8 too; 0.0069 with a
# bfloat16 head); greedy tokens 16/16. Bounds 2.7-4.6x.
BF16_MODEL_VS_FLOAT32_LOGPROB = {"bfloat16": 0.02, "bfloat16+int8_weight_only": 0.03}

# qwen_ops::rms_norm (bindings/cpu/rms_norm_cpu.cpp) against ops/norm/reference.py: the same float32 operations
# in the same order but for the sum of squares (16 lanes, then the lanes, against torch's mean), which moves
# the normaliser by a few float32 ulps; outputs of order 1 (tests' x ~ N(0, 1), scale ~ 1). bfloat16: the
# outputs are then one rounding each, so a tipped rounding is one bfloat16 ulp.
RMS_NORM = {
    torch.float32: (1e-6, 1e-6),
    torch.bfloat16: (0.0, 2.0 ** -7),
}
