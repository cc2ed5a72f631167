"""``gdn_decode_step``: a Qwen3.5 GDN layer's decode work between its projections, in one call.

For one token per sequence it runs, on the pools in place, what the model composes at decode from
``causal_conv1d_update`` (SiLU), the L2-normalised ``fused_recurrent_gated_delta_rule`` with the
gates of ``fused_gdn_gating``, and the gated RMSNorm before ``out_proj``
(``reference_decode_step.py`` is that composition, the op's definition). At batch 1 the three ops and
the norm cost more in op calls, checks and temporaries than in arithmetic (bench/RESULTS.md, "Issue 15,
perf-step3"); here it is one dispatcher call into ``bindings/cpu/gdn_decode_step_cpu.cpp`` that reads
and writes each pool row once.

The operator is defined in C++ (CPU kernel, float32 only, with the checks); this module registers its
fake (shape-only, for ``torch.compile``) and states the contract. Without ``qwen_ops._C`` (a pure-Python
install) ``gdn_decode_step_available()`` is False and the model composes the ops.
"""
from __future__ import annotations

import torch

from .. import _validate as check
from .._cpu_kernels import cpu_torch_op_available

OP = "gdn_decode_step"
F32 = (torch.float32,)

_AVAILABLE = cpu_torch_op_available(OP)  # False on a pure-Python install (QWEN_OPS_BUILD_EXT=0)


def gdn_decode_step_available() -> bool:
    """True when ``qwen_ops._C`` was built with the CPU kernel."""
    return _AVAILABLE


def _check(mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias, norm_weight, state_indices, eps):
    """The C++ kernel's shape and dtype checks, for the fake (same conditions, same argument names)."""
    check.tensor(OP, "ssm_states", ssm_states, dtypes=F32, ndim=4, layout="[S, Hv, Dk, Dv]")
    _, hv, dk, dv = ssm_states.shape
    check.tensor(OP, "mixed_qkv", mixed_qkv, dtypes=F32, ndim=2, layout="[B, 2 Hk Dk + Hv Dv]")
    batch, channels = mixed_qkv.shape
    key_twice = channels - hv * dv
    if key_twice <= 0 or key_twice % (2 * dk):
        raise ValueError(f"{OP}: argument 'mixed_qkv' must be [B, 2 Hk Dk + Hv Dv] with Dk = {dk}, Hv Dv = {hv * dv} "
                         f"(from 'ssm_states'), got shape {tuple(mixed_qkv.shape)}")
    hk = key_twice // (2 * dk)
    if hv % hk:
        raise ValueError(f"{OP}: the number of value heads Hv = {hv} must be a multiple of the key heads Hk = {hk}")
    check.tensor(OP, "z", z, dtypes=F32, shape=(batch, hv * dv), layout=f"[B, Hv Dv] = [{batch}, {hv * dv}]")
    check.tensor(OP, "b", b, dtypes=F32, shape=(batch, hv), layout=f"[B, Hv] = [{batch}, {hv}]")
    check.tensor(OP, "a", a, dtypes=F32, shape=(batch, hv), layout=f"[B, Hv] = [{batch}, {hv}]")
    check.tensor(OP, "conv_taps", conv_taps, dtypes=F32, ndim=2, layout="[K, C]")
    width = conv_taps.shape[0]
    check.tensor(OP, "conv_taps", conv_taps, shape=(width, channels), layout=f"[K, C] with C = {channels}")
    if width < 2:
        raise ValueError(f"{OP}: argument 'conv_taps' must have K >= 2 rows, got shape {tuple(conv_taps.shape)}")
    check.tensor(OP, "conv_states", conv_states, dtypes=F32, shape=(None, width - 1, channels),
                 layout=f"[S, K-1, C] = [S, {width - 1}, {channels}]")
    check.tensor(OP, "A_log", A_log, dtypes=F32, shape=(hv,), layout=f"[Hv] = [{hv}]")
    check.tensor(OP, "dt_bias", dt_bias, dtypes=F32, shape=(hv,), layout=f"[Hv] = [{hv}]")
    check.tensor(OP, "norm_weight", norm_weight, dtypes=F32, shape=(dv,), layout=f"[Dv] = [{dv}]")
    check.tensor(OP, "state_indices", state_indices, dtypes=check.INDEX_DTYPES, shape=(batch,),
                 layout=f"[B] = [{batch}]")
    check.same_device(OP, mixed_qkv=mixed_qkv, z=z, b=b, a=a, conv_states=conv_states, conv_taps=conv_taps,
                      ssm_states=ssm_states, A_log=A_log, dt_bias=dt_bias, norm_weight=norm_weight,
                      state_indices=state_indices)
    if not eps > 0:
        raise ValueError(f"{OP}: argument 'eps' must be > 0, got {eps!r}")
    return batch, hv * dv


if _AVAILABLE:
    @torch.library.register_fake(f"qwen_ops::{OP}")
    def _gdn_decode_step_fake(mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias, norm_weight,
                              state_indices, eps):
        batch, value_dim = _check(mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias,
                                  norm_weight, state_indices, eps)
        return mixed_qkv.new_empty((batch, value_dim))


def gdn_decode_step(mixed_qkv: torch.Tensor, z: torch.Tensor, b: torch.Tensor, a: torch.Tensor,
                    conv_states: torch.Tensor, conv_taps: torch.Tensor, ssm_states: torch.Tensor,
                    A_log: torch.Tensor, dt_bias: torch.Tensor, norm_weight: torch.Tensor,
                    state_indices: torch.Tensor, eps: float) -> torch.Tensor:
    """One decode token per sequence through a GDN layer, from its input projections to out_proj's input.

    Args (all CPU; float32 unless said; rows of the [B, ...] inputs contiguous, any row stride, so column
    views of one stacked projection output work):
        mixed_qkv: [B, C = 2 Hk Dk + Hv Dv], ``in_proj_qkv``'s output ([q | k | v] before the conv).
        z: [B, Hv Dv] (``in_proj_z``); b, a: [B, Hv] (``in_proj_b``, ``in_proj_a``).
        conv_states: [S, K-1, C] contiguous pool, the last K-1 inputs of each row; shifted in place.
        conv_taps: [K, C] contiguous, the conv weight [C, K] transposed (made once at load); no bias.
        ssm_states: [S, Hv, Dk, Dv] contiguous state pool; advanced in place.
        A_log, dt_bias: [Hv]; norm_weight: [Dv] (the plain, not zero-centred, output-norm weight).
        state_indices: int32/int64 [B], each sequence's pool row in both pools; -1 marks padding (zero
            output, nothing read or written).
        eps: the output RMSNorm's epsilon (> 0).
    Returns:
        [B, Hv Dv] float32, a new tensor: ``gated_rms_norm(o, z)`` flattened, o the delta rule's output with
        q, k L2-normalised and the default scale Dk ** -0.5 (Qwen3.5's). Equal to
        ``reference_decode_step.gdn_decode_step`` up to float32 rounding (the order of sums over a head).
    Raises:
        RuntimeError naming the op and the argument on a wrong device, dtype, rank, shape or stride, or a
        state index outside [-1, S), before any pool is written (the C++ checks); RuntimeError when
        ``qwen_ops._C`` lacks the kernel.
    """
    if not _AVAILABLE:
        raise RuntimeError(f"{OP}: qwen_ops._C is not built (or lacks the CPU kernel); compose the ops instead")
    return torch.ops.qwen_ops.gdn_decode_step(mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias,
                                              norm_weight, state_indices, float(eps))
