"""The small building blocks of Qwen3.5: the projections (``linear``), zero-centred RMSNorm, gated RMSNorm,
RoPE, SwiGLU.

Shapes are token-major: x is [T, ...] for a flat batch of T tokens.
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from ...ops.int8_linear import int8_linear, quantize_per_token, quantize_static
from ...ops.int8_linear.op import WEIGHT_ONLY_CPU_X_DTYPES, weight_only_cpu_op_available
from ...ops.int8_linear.reference import dequantize_weight
from ...ops.linear import SMALL_M_MAX_ROWS, small_m_linear_available, small_m_linear_bf16_simd
from ...ops.norm import rms_norm_available
from ...ops.norm.reference import rms_norm as rms_norm_torch
from ..loading.quantization import W8A8, W8A8_DYNAMIC, Int8Weight

# QWEN_OPS_SMALL_M_LINEAR=0 keeps every projection on F.linear (to compare, or where the kernel is unwanted).
SMALL_M_LINEAR_ENV = "QWEN_OPS_SMALL_M_LINEAR"
_small_m_linear_on = small_m_linear_available() and os.environ.get(SMALL_M_LINEAR_ENV, "1") != "0"


# bfloat16 takes the kernel only where it has its AVX-512 BF16 variant (vdpbf16ps reads half float32's bytes);
# elsewhere F.linear (oneDNN) serves it.
_SMALL_M_DTYPES = (torch.float32, torch.bfloat16) if small_m_linear_bf16_simd() else (torch.float32,)


# The weight-only INT8 CPU kernel as a C++ torch operator (ops/int8_linear/op.py), for int8_projection.
_WEIGHT_ONLY_CPU_OP = weight_only_cpu_op_available()

# QWEN_OPS_RMS_NORM_KERNEL=0 keeps the norms as torch ops (to compare).
RMS_NORM_KERNEL_ENV = "QWEN_OPS_RMS_NORM_KERNEL"
_rms_norm_kernel_on = rms_norm_available() and os.environ.get(RMS_NORM_KERNEL_ENV, "1") != "0"


def set_rms_norm_kernel(enabled: bool) -> bool:
    """Turn the CPU RMSNorm kernel on or off for ``rms_norm_scaled``; returns the previous setting."""
    global _rms_norm_kernel_on
    previous = _rms_norm_kernel_on
    _rms_norm_kernel_on = bool(enabled) and rms_norm_available()
    return previous


def set_small_m_linear(enabled: bool) -> bool:
    """Turn the CPU small-M projection kernel on or off for ``linear``; returns the previous setting.

    It can only be on where ``qwen_ops._C`` has it (``small_m_linear_available()``).
    """
    global _small_m_linear_on
    previous = _small_m_linear_on
    _small_m_linear_on = bool(enabled) and small_m_linear_available()
    return previous


def linear(x: torch.Tensor, weight: torch.Tensor | Int8Weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``; x: [T, K], weight: [N, K] (or an ``Int8Weight``), bias: [N] or None -> [T, N].

    An ``Int8Weight`` runs ``int8_projection``. On the CPU with at most ``SMALL_M_MAX_ROWS`` rows (decode
    steps) and contiguous operands, in float32 (or bfloat16 where the CPU has AVX-512 BF16), it runs
    ``torch.ops.qwen_ops.small_m_linear``, which streams the weight at the machine's bandwidth where MKL's
    small-M sgemm does not; the result equals F.linear's up to the order of the float32 sums over K (bfloat16:
    float32 sums, one rounding). Everything else (prefill, other dtypes and devices) is F.linear.
    """
    if isinstance(weight, Int8Weight):
        return int8_projection(x, weight, bias)
    if (_small_m_linear_on and x.device.type == "cpu" and x.dim() == 2 and x.shape[0] <= SMALL_M_MAX_ROWS
            and x.dtype in _SMALL_M_DTYPES and weight.dtype == x.dtype and x.is_contiguous()
            and weight.is_contiguous()
            and (bias is None or (bias.dtype == x.dtype and bias.is_contiguous()))):
        return torch.ops.qwen_ops.small_m_linear(x, weight, bias)
    return F.linear(x, weight, bias)


# Rows of x up to which a weight-only INT8 projection runs the INT8 kernel; past them the weight is
# dequantized for the call and the float path runs. Measured with the kernels on 2 threads (bench/RESULTS.md,
# "INT8-weight projections"; bench/e2e/bench_int8_linear.py): the kernel was 1.5-12x faster up to 64 rows,
# about equal or faster at 256, and within 11 % either way at 512 (prefill). 16 parallel INT8 sequences of the
# 0.8B shape decoded at 68.0 tok/s with this bound against 29.5 with the earlier one of 4 rows (measured
# single-threaded, before the extension used OpenMP).
WEIGHT_ONLY_KERNEL_MAX_ROWS = 256


def int8_projection(x: torch.Tensor, weight: Int8Weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [T, K] float -> [T, N] in x's dtype through ``ops.int8_linear``, as the weight's scheme says.

    ``W8A8_DYNAMIC``: x quantized per token (``quantize_per_token``); ``W8A8``: x quantized with the layer's
    calibrated scale and zero point (``quantize_static``), the checkpoint's quant_bias added to the int32 sums
    and its deq_scale applied (the per-row scale is 1); weight-only: x as it is, through the INT8 kernel up to
    ``WEIGHT_ONLY_KERNEL_MAX_ROWS`` rows, else ``linear`` over the weight dequantized in x's dtype for this call
    (the same product up to rounding: int8 times its float32 scale, rounded once to x's dtype).
    """
    if weight.scheme == W8A8_DYNAMIC:
        q, token_scale = quantize_per_token(x)
        return int8_linear(q, weight.weight, weight.weight_scale, x_scale=token_scale, bias=bias, out_dtype=x.dtype)
    if weight.scheme == W8A8:
        q = quantize_static(x, weight.input_scale, weight.input_offset)
        ones = torch.ones(x.shape[0], dtype=torch.float32, device=x.device)
        return int8_linear(q, weight.weight, weight.weight_scale, x_scale=ones, quant_bias=weight.quant_bias,
                           bias=bias, out_dtype=x.dtype)
    if x.shape[0] > WEIGHT_ONLY_KERNEL_MAX_ROWS:
        return linear(x, dequantize_weight(weight.weight, weight.weight_scale).to(x.dtype), bias)
    if (_WEIGHT_ONLY_CPU_OP and x.device.type == "cpu" and x.dtype in WEIGHT_ONLY_CPU_X_DTYPES
            and x.is_contiguous() and (bias is None or bias.dtype == torch.float32)):
        # What int8_linear's torch backend runs on the CPU, called as a C++ operator: the same kernel and bits
        # without the Python custom op's dispatch (60-80 us a call, bench/e2e/bench_int8_linear.py).
        return torch.ops.qwen_ops.weight_only_int8_linear(x, weight.weight, weight.weight_scale, bias)
    return int8_linear(x, weight.weight, weight.weight_scale, bias=bias)


def rms_norm_zero_centred(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x * rsqrt(mean(x^2) + eps) * (1 + w)`` over the last dim, in float32, cast back to x's dtype.

    Qwen3.5 stores ``w`` centred on zero (all its norms but the GDN output norm).
    x: [..., H]; weight: [H].
    """
    return rms_norm_scaled(x, zero_centred_scale(weight), eps)


def zero_centred_scale(weight: torch.Tensor) -> torch.Tensor:
    """``1 + w`` in float32: the factor a zero-centred norm weight ``w`` [H] multiplies by (made once at load)."""
    return 1.0 + weight.float()


def rms_norm_scaled(x: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    """``x * rsqrt(mean(x^2) + eps) * scale`` over the last dim, in float32, cast back to x's dtype.

    x: [..., H]; scale: float32 [H] (``zero_centred_scale(w)``). On the CPU (float32 or bfloat16, contiguous or
    rows at one stride, ``qwen_ops._C`` built) one call of ``torch.ops.qwen_ops.rms_norm`` (``ops/norm``: the
    same operations, the sum of squares in another order); elsewhere ``ops/norm/reference.py``'s torch ops.
    """
    if (_rms_norm_kernel_on and x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16)
            and x.dim() >= 1 and x.stride(-1) == 1 and scale.dtype == torch.float32 and scale.is_contiguous()):
        if x.is_contiguous():
            return torch.ops.qwen_ops.rms_norm(x, scale, eps)
        rows = _rows_view(x)
        if rows is not None:  # e.g. the query heads, a view beside their gates: no copy
            return torch.ops.qwen_ops.rms_norm(rows, scale, eps).view(x.shape)
    return rms_norm_torch(x, scale, eps)


def _rows_view(x: torch.Tensor) -> torch.Tensor | None:
    """x [..., H] with contiguous rows as a 2-D [R, H] view at one row stride, or None where its strides do not
    allow one (then the torch form serves it)."""
    try:
        rows = x.view(-1, x.shape[-1])
    except RuntimeError:
        return None
    return rows if rows.stride(1) == 1 and rows.stride(0) >= rows.shape[1] else None


def rope_cos_sin(positions: torch.Tensor, rotary_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [T, rotary_dim] (float32) of plain RoPE for integer positions [T].

    The two halves repeat the same rotary_dim/2 frequencies (rotate-half layout).
    Qwen3.5's multimodal RoPE sections all see the same position for text, so
    this is exactly what it computes on text.
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32, device=positions.device)
                                / rotary_dim))
    freqs = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``cos.shape[-1]`` dims of each head with rotate-half; the rest pass through.

    x: [T, heads, D]; cos, sin: [T, rotary_dim] float32.
    """
    rot = cos.shape[-1]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    c, s = cos[:, None, :].to(x.dtype), sin[:, None, :].to(x.dtype)
    half = rot // 2
    rotated = torch.cat((-x_rot[..., half:], x_rot[..., :half]), dim=-1)
    return torch.cat((x_rot * c + rotated * s, x_pass), dim=-1)


def swiglu_mlp(x: torch.Tensor, gate_w: torch.Tensor, up_w: torch.Tensor, down_w: torch.Tensor) -> torch.Tensor:
    """``down(silu(gate(x)) * up(x))``; x: [T, H] -> [T, H]."""
    return linear(F.silu(linear(x, gate_w)) * linear(x, up_w), down_w)
