"""The ``ascendc`` backend: adapters from the public ops to ``qwen_ops._C``.

The op layer (``qwen_ops.ops``) has validated every argument before it calls
these functions, with keyword arguments named as in the public op (``scale``
already a float). The adapters make read-only inputs contiguous, pick the
launch configuration and call the extension, which re-checks everything and
launches the Ascend C kernel: on NPU tensors when ``_C`` was built with CANN,
on CPU tensors through the project's CPU stand-in for the Ascend C API
(``ops_ascendc/README.md``).

``launch_config`` overrides the core count, the unified-buffer budget and a
tile cap for the calls inside it (tests use it to force many tiles and cores);
``last_launch()`` reports the tiling and, on the stand-in, the unified-buffer
high-water mark of the last launch.
"""
from __future__ import annotations

import contextlib
import threading

import torch

from ._backend import BackendError

KERNELS = ("reshape_and_cache", "paged_decode_attention", "fused_recurrent_gated_delta_rule",
           "causal_conv1d_update", "causal_conv1d_fn", "fused_gdn_gating", "prefill_attention",
           "chunk_gated_delta_rule", "mixed_attention", "fused_experts",
           "gdn_decode_step")

_local = threading.local()


def _ext():
    try:
        from qwen_ops import _C
    except ImportError as exc:  # pragma: no cover - resolve() checks first
        raise BackendError(f"ascendc: qwen_ops._C cannot be imported: {exc}") from exc
    if not hasattr(_C, "ascendc_kernels"):
        raise BackendError("ascendc: qwen_ops._C was built without Ascend C kernels")
    return _C


def _config() -> dict:
    return dict(getattr(_local, "config", None) or {"num_cores": 0, "ub_bytes": 0, "max_tile": 0})


@contextlib.contextmanager
def launch_config(*, num_cores: int = 0, ub_bytes: int = 0, max_tile: int = 0):
    """Within the block, launch on ``num_cores`` cores (0: default), plan tiles
    for ``ub_bytes`` of unified buffer (0: all that is usable) and cap tiles at
    ``max_tile`` tokens/columns/channels (0: no cap). Thread-local."""
    previous = getattr(_local, "config", None)
    _local.config = {"num_cores": int(num_cores), "ub_bytes": int(ub_bytes), "max_tile": int(max_tile)}
    try:
        yield
    finally:
        _local.config = previous


def last_launch() -> dict:
    """Tiling of the last launch on this process and, on the stand-in, its
    measured unified-buffer high-water mark (``ub_high_water``, bytes)."""
    return _ext().ascendc_last_launch()


def _c(t):
    return None if t is None else t.contiguous()


def _in_place(op: str, name: str, t: torch.Tensor) -> torch.Tensor:
    if not t.is_contiguous():
        raise BackendError(f"{op}: backend 'ascendc' updates '{name}' in place and needs it contiguous")
    return t


def reshape_and_cache(*, key, value, key_cache, value_cache, slot_mapping, k_scale=None, v_scale=None) -> None:
    op = "reshape_and_cache"
    _ext().ascendc_reshape_and_cache(
        _c(key), _c(value), _in_place(op, "key_cache", key_cache), _in_place(op, "value_cache", value_cache),
        _c(slot_mapping), _c(k_scale), _c(v_scale), **_config())


def paged_decode_attention(*, query, key_cache, value_cache, block_tables, seq_lens, scale, k_scale=None,
                           v_scale=None) -> torch.Tensor:
    d = query.shape[-1]
    if d % 16 != 0:
        raise BackendError(f"paged_decode_attention: backend 'ascendc' needs a head dim that is a multiple of 16, got {d}")
    return _ext().ascendc_paged_decode_attention(
        _c(query), _c(key_cache), _c(value_cache), _c(block_tables), _c(seq_lens), float(scale),
        _c(k_scale), _c(v_scale), **_config())


def _no_spec_decode(op: str, num_accepted_tokens) -> None:
    if num_accepted_tokens is not None:
        raise BackendError(f"{op}: backend 'ascendc' has no speculative-decoding form (num_accepted_tokens, one "
                           "state row per token); use backend 'triton' or 'torch' for it")


def fused_recurrent_gated_delta_rule(*, q, k, v, g, beta, scale, initial_state=None, output_final_state=False,
                                     cu_seqlens=None, ssm_state_indices=None, has_initial_state=None,
                                     use_qk_l2norm_in_kernel=False, num_accepted_tokens=None):
    op = "fused_recurrent_gated_delta_rule"
    _no_spec_decode(op, num_accepted_tokens)
    o, final = _delta_rule(_ext().ascendc_fused_recurrent_gated_delta_rule, "fused_recurrent_gated_delta_rule", q, k,
                           v, g, beta, scale, initial_state, output_final_state, cu_seqlens, ssm_state_indices,
                           has_initial_state, use_qk_l2norm_in_kernel)
    return o, (final if output_final_state else None)


def _delta_rule(binding, op, q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                ssm_state_indices, has_initial_state, use_qk_l2norm_in_kernel, **extra):
    """Both delta-rule bindings: a state pool is updated in place (so it must be contiguous), plain states are
    read. Returns the binding's tuple; ``extra`` are binding-specific keyword arguments."""
    if initial_state is not None:
        if ssm_state_indices is not None:
            initial_state = _in_place(op, "initial_state", initial_state)
        else:
            initial_state = initial_state.contiguous()
    return binding(
        _c(q), _c(k), _c(v), _c(g), _c(beta), float(scale), initial_state, bool(output_final_state),
        _c(cu_seqlens), _c(ssm_state_indices), _c(has_initial_state), bool(use_qk_l2norm_in_kernel), **extra,
        **_config())


def chunk_gated_delta_rule(*, q, k, v, g, beta, scale, initial_state=None, output_final_state=False, cu_seqlens=None,
                           ssm_state_indices=None, has_initial_state=None, use_qk_l2norm_in_kernel=False,
                           checkpoint_boundaries=None):
    """The chunked delta rule on the mixed AIC+AIV kernel: any Dk, Dv up to ``gdn_chunk_max_head_dim()``
    (padded to the cube tile of 16 inside the kernel). With ``checkpoint_boundaries`` [P, 2] the kernel also
    writes the state at the requested chunk ends, returned third (float32 [P, Hv, Dk, Dv])."""
    op = "chunk_gated_delta_rule"
    refusal = _gdn_chunk_refusal(q.shape[-1], v.shape[-1])
    if refusal is not None:
        raise BackendError(refusal)
    o, final, checkpoints = _delta_rule(
        _ext().ascendc_chunk_gated_delta_rule, op, q, k, v, g, beta, scale, initial_state, output_final_state,
        cu_seqlens, ssm_state_indices, has_initial_state, use_qk_l2norm_in_kernel,
        checkpoint_boundaries=_c(checkpoint_boundaries))
    result = (o, final if output_final_state else None)
    return result if checkpoint_boundaries is None else result + (checkpoints,)


def gdn_chunk_max_head_dim() -> int:
    """The largest Dk and Dv the Ascend C ``chunk_gated_delta_rule`` kernel serves (its tiling header's)."""
    return int(_ext().ascendc_gdn_chunk_max_head_dim)


def _gdn_chunk_refusal(dk: int, dv: int) -> str | None:
    limit = gdn_chunk_max_head_dim()
    if dk <= limit and dv <= limit:
        return None
    return (f"chunk_gated_delta_rule: backend 'ascendc' serves head dims Dk and Dv up to {limit} (a 64 x Dk float "
            f"operand is loaded whole into the cube's 64 KB L0A), got Dk = {dk}, Dv = {dv}")


def _attention_refusal(op: str, d: int) -> str | None:
    if d % 16 == 0 and d <= 256:
        return None
    return f"{op}: backend 'ascendc' needs a head dim that is a multiple of 16 and at most 256, got {d}"


def model_shape_refusals(*, attention_head_dim: int, gdn_key_head_dim: int, gdn_value_head_dim: int) -> dict[str, str]:
    """op -> why its Ascend C kernel cannot serve a model with these head dims (ops absent: served). The
    engine asks when it is built, so that such a model is refused there rather than in the middle of a step."""
    refusals = {"chunk_gated_delta_rule": _gdn_chunk_refusal(gdn_key_head_dim, gdn_value_head_dim),
                "mixed_attention": _attention_refusal("mixed_attention", attention_head_dim)}
    return {op: why for op, why in refusals.items() if why is not None}


def causal_conv1d_update(*, x, conv_states, weight, bias=None, cache_indices, activation="silu",
                         query_start_loc=None, num_accepted_tokens=None) -> torch.Tensor:
    op = "causal_conv1d_update"
    _no_spec_decode(op, num_accepted_tokens)
    if activation not in (None, "silu"):
        raise BackendError(f"{op}: backend 'ascendc' supports activation 'silu' or None, got {activation!r}")
    return _ext().ascendc_causal_conv1d_update(
        _c(x), _in_place(op, "conv_states", conv_states), _c(weight), _c(bias), _c(cache_indices),
        activation == "silu", **_config())


def causal_conv1d_fn(*, x, weight, bias=None, conv_states, query_start_loc, cache_indices, has_initial_state,
                     activation="silu") -> torch.Tensor:
    op = "causal_conv1d_fn"
    if activation not in (None, "silu"):
        raise BackendError(f"{op}: backend 'ascendc' supports activation 'silu' or None, got {activation!r}")
    return _ext().ascendc_causal_conv1d_fn(
        _c(x), _c(weight), _c(bias), _in_place(op, "conv_states", conv_states), _c(query_start_loc),
        _c(cache_indices), _c(has_initial_state), activation == "silu", **_config())


def gdn_decode_step(*, mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias, norm_weight,
                    state_indices, eps, query_start_loc=None, num_accepted_tokens=None) -> torch.Tensor:
    """A GDN layer's decode step in one launch (``ops/gdn/decode_step/op.py``); both pools updated in place."""
    op = "gdn_decode_step"
    return _ext().ascendc_gdn_decode_step(
        _c(mixed_qkv), _c(z), _c(b), _c(a), _in_place(op, "conv_states", conv_states), _c(conv_taps),
        _in_place(op, "ssm_states", ssm_states), _c(A_log), _c(dt_bias), _c(norm_weight), _c(state_indices),
        _c(query_start_loc), _c(num_accepted_tokens), float(eps), **_config())


def fused_gdn_gating(*, A_log, a, b, dt_bias):
    return _ext().ascendc_fused_gdn_gating(_c(A_log), _c(a), _c(b), _c(dt_bias), **_config())


def prefill_attention(*, query, key, value, cu_seqlens_q, key_cache=None, value_cache=None, block_tables=None,
                      context_lens=None, scale, k_scale=None, v_scale=None, causal=True) -> torch.Tensor:
    refusal = _attention_refusal("prefill_attention", query.shape[-1])
    if refusal is not None:
        raise BackendError(refusal)
    return _ext().ascendc_prefill_attention(
        _c(query), _c(key), _c(value), _c(cu_seqlens_q), float(scale), _c(key_cache), _c(value_cache),
        _c(block_tables), _c(context_lens), _c(k_scale), _c(v_scale), bool(causal), **_config())


def mixed_attention(*, query, key, value, key_cache, value_cache, block_tables, query_start_loc, seq_lens,
                    num_decodes, scale, k_scale=None, v_scale=None) -> torch.Tensor:
    # No prefill_units parameter, so dispatch() does not pass the engine's work
    # list: the kernel walks its prefill units on the device from the cu_seqlens.
    refusal = _attention_refusal("mixed_attention", query.shape[-1])
    if refusal is not None:
        raise BackendError(refusal)
    return _ext().ascendc_mixed_attention(
        _c(query), _c(key), _c(value), _c(key_cache), _c(value_cache), _c(block_tables), _c(query_start_loc),
        _c(seq_lens), int(num_decodes), float(scale), _c(k_scale), _c(v_scale), **_config())


def fused_experts(*, hidden_states, w13, w2, topk_weights, topk_ids) -> torch.Tensor:
    """The routed experts on the mixed AIC+AIV grouped-GEMM kernel (grouping and tiling planned on the host)."""
    return _ext().ascendc_fused_experts(_c(hidden_states), _c(w13), _c(w2), _c(topk_weights), _c(topk_ids),
                                        **_config())


def check_fused_experts(*, hidden: int, inter: int, dtype: torch.dtype) -> None:
    """Raise ``BackendError`` (naming the op and the limit) if the Ascend C ``fused_experts`` kernel cannot
    hold hidden size H = ``hidden`` and expert width I = ``inter`` in ``dtype``; an engine calls this when it
    is built, so that such a model is refused then and not in the middle of a generation."""
    try:
        _ext().ascendc_fused_experts_plan(int(hidden), int(inter), torch.empty(0, dtype=dtype))
    except ValueError as exc:
        raise BackendError(str(exc)) from exc
