"""``gdn_decode_step``: a Qwen3.5 GDN layer's decode work between its projections, in one call.

For the decode tokens of a step it runs, on the pools in place, what the model composes at decode from
``causal_conv1d_update`` (SiLU), the L2-normalised ``fused_recurrent_gated_delta_rule`` with the
gates of ``fused_gdn_gating``, and the gated RMSNorm before ``out_proj``
(``reference.py`` is that composition, the op's definition), including the speculative-decoding form of
both (several tokens per sequence, one pool row per token). At batch 1 the three ops and the norm cost
more in launches, checks and temporaries than in arithmetic (bench/RESULTS.md, "Issue 15, perf-step3").

Backends (``backend=`` as every op; ``IMPLEMENTATIONS["gdn_decode_step"]``):

* ``torch``: one token per sequence on CPU tensors is the C++ kernel
  ``torch.ops.qwen_ops.gdn_decode_step`` (``bindings/cpu/gdn_decode_step_cpu.cpp``, its own checks and
  the fake below); the speculative form, other devices or a build without ``qwen_ops._C`` run the reference;
* ``triton``: one launch (``triton.py``);
* ``ascendc``: one launch (``ops_ascendc/gdn_decode_step``, through ``ops/ascendc_backend.py``).

Every path but the C++ kernel goes through the custom op ``torch.ops.qwen_ops.gdn_decode_step_backends``:
the checks below, with metadata values checked before any kernel touches a pool, then the backend.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from ... import _validate as check
from ..._backend import dispatch, resolved_backend
from ..._cpu_kernels import LazyCpuOp
from ..._library import custom_op
from ...conv.op import check_spec_decode_form

OP = "gdn_decode_step"
# The custom op of every path but the torch backend's C++ kernel (module doc).
BACKENDS_OP = "gdn_decode_step_backends"
F32 = (torch.float32,)
# The activation dtypes (mixed_qkv, z, b, a, the conv pool, conv taps and norm weight share one); the recurrent
# state, A_log and dt_bias are float32 in both. bfloat16 is served by the torch backend (module doc).
ACTIVATION_DTYPES = (torch.float32, torch.bfloat16)


def _rows(name, t, width, tokens, layout, dtypes):
    """[T, width] of ``dtypes`` with contiguous rows (a column view of one stacked projection output is fine)."""
    check.tensor(OP, name, t, dtypes=dtypes, shape=(tokens, width), layout=f"{layout} = [{tokens}, {width}]")
    if width > 1 and t.stride(1) != 1:
        raise ValueError(f"{OP}: argument '{name}' must have contiguous rows (stride 1 along dim 1), "
                         f"got strides {t.stride()}")


def _check(mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias, norm_weight, state_indices, eps,
           query_start_loc=None, num_accepted_tokens=None, *, values=False):
    """Shapes, dtypes, layouts (and with ``values`` the indices) of the op; returns (T, Hv Dv).

    The C++ kernel's conditions under the same argument names, plus the speculative-decoding form.
    """
    check.tensor(OP, "ssm_states", ssm_states, dtypes=F32, ndim=4, layout="[S, Hv, Dk, Dv]")
    _, hv, dk, dv = ssm_states.shape
    check.tensor(OP, "mixed_qkv", mixed_qkv, dtypes=ACTIVATION_DTYPES, ndim=2, layout="[T, 2 Hk Dk + Hv Dv]")
    same = (mixed_qkv.dtype,)  # every other activation and weight tensor: mixed_qkv's dtype
    tokens, channels = mixed_qkv.shape
    key_twice = channels - hv * dv
    if dk == 0 or dv == 0 or key_twice <= 0 or key_twice % (2 * dk):
        raise ValueError(f"{OP}: argument 'mixed_qkv' must be [T, 2 Hk Dk + Hv Dv] with Dk = {dk}, Hv Dv = {hv * dv} "
                         f"(from 'ssm_states'), got shape {tuple(mixed_qkv.shape)}")
    hk = key_twice // (2 * dk)
    if hv % hk:
        raise ValueError(f"{OP}: the number of value heads Hv = {hv} must be a multiple of the key heads Hk = {hk}")
    _rows("mixed_qkv", mixed_qkv, channels, tokens, "[T, C]", same)
    _rows("z", z, hv * dv, tokens, "[T, Hv Dv]", same)
    _rows("b", b, hv, tokens, "[T, Hv]", same)
    _rows("a", a, hv, tokens, "[T, Hv]", same)
    check.tensor(OP, "conv_taps", conv_taps, dtypes=same, ndim=2, layout="[K, C]")
    width = conv_taps.shape[0]
    check.tensor(OP, "conv_taps", conv_taps, shape=(width, channels), layout=f"[K, C] with C = {channels}")
    if width < 2:
        raise ValueError(f"{OP}: argument 'conv_taps' must have K >= 2 rows, got shape {tuple(conv_taps.shape)}")
    check.tensor(OP, "conv_states", conv_states, dtypes=same, shape=(None, width - 1, channels),
                 layout=f"[S, K-1, C] = [S, {width - 1}, {channels}]")
    for name, t in (("conv_taps", conv_taps), ("conv_states", conv_states), ("ssm_states", ssm_states)):
        if not t.is_contiguous():
            raise ValueError(f"{OP}: argument '{name}' must be contiguous")
    check.tensor(OP, "A_log", A_log, dtypes=F32, shape=(hv,), layout=f"[Hv] = [{hv}]")
    check.tensor(OP, "dt_bias", dt_bias, dtypes=F32, shape=(hv,), layout=f"[Hv] = [{hv}]")
    check.tensor(OP, "norm_weight", norm_weight, dtypes=same, shape=(dv,), layout=f"[Dv] = [{dv}]")
    check.same_device(OP, mixed_qkv=mixed_qkv, z=z, b=b, a=a, conv_states=conv_states, conv_taps=conv_taps,
                      ssm_states=ssm_states, A_log=A_log, dt_bias=dt_bias, norm_weight=norm_weight,
                      state_indices=state_indices)
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
        raise ValueError(f"{OP}: argument 'eps' must be finite and > 0, got {eps!r}")
    pool_rows = min(conv_states.shape[0], ssm_states.shape[0])  # one row index serves both pools
    if query_start_loc is not None or num_accepted_tokens is not None or state_indices.dim() == 2:
        check_spec_decode_form(mixed_qkv, conv_states, state_indices, query_start_loc, num_accepted_tokens,
                               values=values, op=OP, index_name="state_indices")
    else:
        check.tensor(OP, "state_indices", state_indices, dtypes=check.INDEX_DTYPES, shape=(tokens,),
                     layout=f"[B] = [{tokens}] (one token per sequence)")
    check.indices(OP, "state_indices", state_indices, pool_rows, allow_padding=True, values=values)
    return tokens, hv * dv


def _cpu_kernel_fake(mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias, norm_weight,
                     state_indices, eps):
    """The C++ kernel's fake (shape-only, for ``torch.compile``), registered by ``gdn_decode_step_available``."""
    tokens, value_dim = _check(mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias,
                               norm_weight, state_indices, eps)
    return mixed_qkv.new_empty((tokens, value_dim))


_CPU_KERNEL = LazyCpuOp(OP, _cpu_kernel_fake)


def gdn_decode_step_available() -> bool:
    """True when ``qwen_ops._C`` was built with the torch backend's CPU kernel (one token per sequence).

    The first call loads the extension (False on a pure-Python install, ``QWEN_OPS_BUILD_EXT=0``) and registers
    the kernel's fake.
    """
    return _CPU_KERNEL.available()


@custom_op(BACKENDS_OP, mutates_args=("conv_states", "ssm_states"))
def _backends_op(mixed_qkv: torch.Tensor, z: torch.Tensor, b: torch.Tensor, a: torch.Tensor,
                 conv_states: torch.Tensor, conv_taps: torch.Tensor, ssm_states: torch.Tensor, A_log: torch.Tensor,
                 dt_bias: torch.Tensor, norm_weight: torch.Tensor, state_indices: torch.Tensor, eps: float,
                 query_start_loc: Optional[torch.Tensor], num_accepted_tokens: Optional[torch.Tensor],
                 backend: Optional[str]) -> torch.Tensor:
    _check(mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias, norm_weight, state_indices, eps,
           query_start_loc, num_accepted_tokens, values=check.values_checked(mixed_qkv.device))
    served = resolved_backend(OP, backend, mixed_qkv.device)
    if mixed_qkv.dtype != torch.float32 and served != "torch":
        raise TypeError(f"{OP}: argument 'mixed_qkv' is {mixed_qkv.dtype}, which only the torch backend serves; "
                        f"backend {served!r} takes float32")
    return dispatch(OP, backend, mixed_qkv.device, mixed_qkv=mixed_qkv, z=z, b=b, a=a, conv_states=conv_states,
                    conv_taps=conv_taps, ssm_states=ssm_states, A_log=A_log, dt_bias=dt_bias,
                    norm_weight=norm_weight.contiguous(), state_indices=state_indices.contiguous(), eps=float(eps),
                    query_start_loc=query_start_loc, num_accepted_tokens=num_accepted_tokens)


@_backends_op.register_fake
def _backends_fake(mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias, norm_weight, state_indices,
                   eps, query_start_loc, num_accepted_tokens, backend):
    tokens, value_dim = _check(mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias, norm_weight,
                               state_indices, eps, query_start_loc, num_accepted_tokens)
    return mixed_qkv.new_empty((tokens, value_dim))


def takes_cpu_kernel(device: torch.device, backend: str, spec_decode: bool) -> bool:
    """Whether a call runs the torch backend's C++ kernel (CPU, one token per sequence, ``qwen_ops._C`` built)."""
    if backend != "torch" or device.type != "cpu" or spec_decode:
        return False
    if torch.compiler.is_compiling():
        # A trace cannot load the extension: a kernel not looked up before (the model looks it up when it is
        # imported) counts as absent, and the reference serves the call.
        return _CPU_KERNEL.found
    return gdn_decode_step_available()


def gdn_decode_step(mixed_qkv: torch.Tensor, z: torch.Tensor, b: torch.Tensor, a: torch.Tensor,
                    conv_states: torch.Tensor, conv_taps: torch.Tensor, ssm_states: torch.Tensor,
                    A_log: torch.Tensor, dt_bias: torch.Tensor, norm_weight: torch.Tensor,
                    state_indices: torch.Tensor, eps: float, *, query_start_loc: torch.Tensor | None = None,
                    num_accepted_tokens: torch.Tensor | None = None, backend: str | None = None) -> torch.Tensor:
    """The decode tokens of a step through a GDN layer, from its input projections to out_proj's input.

    Args (the [T, ...] inputs with contiguous rows, any row stride, so column views of one stacked projection
    output work). Dtypes: mixed_qkv, z, b, a, conv_states, conv_taps and norm_weight all float32, or all
    bfloat16 (torch backend only: the C++ kernel on the CPU, else the reference); ssm_states, A_log and
    dt_bias float32 in both.
        mixed_qkv: [T, C = 2 Hk Dk + Hv Dv], ``in_proj_qkv``'s output ([q | k | v] before the conv).
        z: [T, Hv Dv] (``in_proj_z``); b, a: [T, Hv] (``in_proj_b``, ``in_proj_a``).
        conv_states: [S, K-1, C] contiguous pool, the last K-1 inputs of each row; shifted in place.
        conv_taps: [K, C] contiguous, the conv weight [C, K] transposed (made once at load); no bias.
        ssm_states: [S, Hv, Dk, Dv] contiguous state pool; advanced in place.
        A_log, dt_bias: [Hv]; norm_weight: [Dv] (the plain, not zero-centred, output-norm weight).
        state_indices: int32/int64, each sequence's pool row in both pools (row r of both pools belongs to
            one sequence). Decode: [B] with T = B, one token per sequence; -1 marks padding (zero output,
            nothing read or written). Speculative decoding: [B, W = 1 + k], one pool row per token, with:
        query_start_loc: [B+1] int32/int64, the B sequences' tokens packed along T (each at most W);
        num_accepted_tokens: [B] int32/int64 in [1, W]. Sequence r starts from pool row
            ``state_indices[r, num_accepted_tokens[r] - 1]`` and the conv window and state after its t-th
            token go to row ``state_indices[r, t]`` (the rule of ``causal_conv1d_update`` and
            ``fused_recurrent_gated_delta_rule``); a row of all -1 is padding.
        eps: the output RMSNorm's epsilon (finite, > 0).
        backend: "torch", "triton", "ascendc" or None (the device decides), as every op.
    Returns:
        [T, Hv Dv] in mixed_qkv's dtype, a new tensor: ``gated_rms_norm(o, z)`` flattened, o the delta rule's
        output with q, k L2-normalised and the default scale Dk ** -0.5 (Qwen3.5's). Equal to
        ``reference.gdn_decode_step`` up to float32 rounding (the order of sums over a head); in bfloat16 the
        kernel rounds where the reference's ops return, so they differ where that order tips a rounding.
    Raises:
        ValueError or TypeError (RuntimeError from the C++ kernel) naming the op and the argument on a wrong
        device, dtype, rank, shape or stride, bfloat16 on a backend other than torch, or a state index outside
        [-1, S), before any pool is written; BackendError when the backend cannot serve the call.
    """
    spec_decode = query_start_loc is not None or num_accepted_tokens is not None or state_indices.dim() == 2
    # Resolved here only where the C++ kernel may serve (a named other backend is resolved inside the custom op,
    # out of a trace's sight: its availability lookups load the extension).
    if (backend in (None, "torch") and mixed_qkv.device.type == "cpu" and not spec_decode
            and takes_cpu_kernel(mixed_qkv.device, resolved_backend(OP, backend, mixed_qkv.device), spec_decode)):
        return torch.ops.qwen_ops.gdn_decode_step(mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log,
                                                  dt_bias, norm_weight, state_indices, float(eps))
    return torch.ops.qwen_ops.gdn_decode_step_backends(mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log,
                                                       dt_bias, norm_weight, state_indices, float(eps),
                                                       query_start_loc, num_accepted_tokens, backend)
