"""Public causal-conv ops: argument checks, backend dispatch, torch.library entries.

x is token-major [T, C]; weight [C, K]; the saved state of a sequence is its
last K-1 inputs, ``conv_states[slot]`` of shape [K-1, C] (oldest first).
"""
from __future__ import annotations

from typing import Optional

import torch

from .. import _validate as check
from .._backend import dispatch
from .._library import custom_op

ACTIVATIONS = ("silu", None)


def _check_common(op, x, weight, bias, conv_states, activation):
    check.tensor(op, "x", x, dtypes=check.FLOAT_DTYPES, ndim=2, layout="[T, C]")
    c = x.shape[1]
    check.tensor(op, "weight", weight, dtypes=check.FLOAT_DTYPES, ndim=2, layout="[C, K]")
    check.tensor(op, "weight", weight, shape=(c, None), layout=f"[C, K] with C = {c}")
    kw = weight.shape[1]
    if kw < 2:
        raise ValueError(f"{op}: argument 'weight' must have a kernel width K >= 2, got {kw}")
    check.optional(op, "bias", bias, dtypes=check.FLOAT_DTYPES, shape=(c,), layout=f"[C] = [{c}]")
    check.tensor(op, "conv_states", conv_states, dtypes=check.FLOAT_DTYPES, shape=(None, kw - 1, c),
                 layout=f"[S, K-1, C] = [S, {kw - 1}, {c}]")
    if not conv_states.is_contiguous():
        raise ValueError(f"{op}: argument 'conv_states' must be contiguous")
    if activation not in ACTIVATIONS:
        raise ValueError(f"{op}: argument 'activation' must be one of {ACTIVATIONS}, got {activation!r}")


# ----------------------------------------------------------------------------- prefill form

FN = "causal_conv1d_fn"


def _check_fn(x, weight, bias, conv_states, query_start_loc, cache_indices, has_initial_state, activation, *, values):
    _check_common(FN, x, weight, bias, conv_states, activation)
    check.tensor(FN, "query_start_loc", query_start_loc, dtypes=check.INDEX_DTYPES, ndim=1, layout="[N+1]")
    n = query_start_loc.shape[0] - 1
    check.cumulative(FN, "query_start_loc", query_start_loc, x.shape[0], values=values)
    check.tensor(FN, "cache_indices", cache_indices, dtypes=check.INDEX_DTYPES, shape=(n,), layout=f"[N] = [{n}]")
    check.tensor(FN, "has_initial_state", has_initial_state, dtypes=(torch.bool,), shape=(n,),
                 layout=f"[N] = [{n}] bool")
    check.same_device(FN, x=x, weight=weight, bias=bias, conv_states=conv_states, query_start_loc=query_start_loc,
                      cache_indices=cache_indices, has_initial_state=has_initial_state)
    check.indices(FN, "cache_indices", cache_indices, conv_states.shape[0], allow_padding=True, values=values)


@custom_op(FN, mutates_args=("conv_states",))
def _fn_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], conv_states: torch.Tensor,
           query_start_loc: torch.Tensor, cache_indices: torch.Tensor, has_initial_state: torch.Tensor,
           activation: Optional[str], backend: Optional[str]) -> torch.Tensor:
    _check_fn(x, weight, bias, conv_states, query_start_loc, cache_indices, has_initial_state, activation,
              values=check.values_checked(x.device))
    return dispatch(FN, backend, x.device, x=x, weight=weight, bias=bias, conv_states=conv_states,
                    query_start_loc=query_start_loc, cache_indices=cache_indices,
                    has_initial_state=has_initial_state, activation=activation)


@_fn_op.register_fake
def _fn_fake(x, weight, bias, conv_states, query_start_loc, cache_indices, has_initial_state, activation, backend):
    _check_fn(x, weight, bias, conv_states, query_start_loc, cache_indices, has_initial_state, activation,
              values=False)
    return torch.empty_like(x)


def causal_conv1d_fn(x, weight, bias=None, *, conv_states, query_start_loc, cache_indices, has_initial_state,
                     activation="silu", backend: str | None = None) -> torch.Tensor:
    """Depthwise causal convolution over packed sequences, saving each one's tail.

    Args:
        x: [T, C] float, N sequences packed along T.
        weight: [C, K]; bias: [C] or None.
        conv_states: [S, K-1, C] state pool, updated in place.
        query_start_loc: [N+1] int32/int64 offsets 0..T.
        cache_indices: [N]; sequence r uses pool row ``cache_indices[r]``
            (-1: padding, no state read or written).
        has_initial_state: [N] bool; the left context is the saved state
            where True, zeros otherwise.
        activation: "silu" or None.
    Returns:
        [T, C] in x's dtype: ``act(sum_k window[k] * weight[:, k] + bias)``
        where the window ends at the current token. Afterwards each sequence's
        last K-1 inputs (before activation, including saved ones for short
        sequences) are written to ``conv_states[cache_indices[r]]``.
    """
    return torch.ops.qwen_ops.causal_conv1d_fn(x, weight, bias, conv_states, query_start_loc, cache_indices,
                                               has_initial_state, activation, backend)


# ----------------------------------------------------------------------------- decode form

UPDATE = "causal_conv1d_update"


def _check_update(x, conv_states, weight, bias, cache_indices, activation, *, values, query_start_loc=None,
                  num_accepted_tokens=None):
    _check_common(UPDATE, x, weight, bias, conv_states, activation)
    if query_start_loc is not None or num_accepted_tokens is not None:
        check_spec_decode_form(x, conv_states, cache_indices, query_start_loc, num_accepted_tokens,
                                  values=values)
        return
    b = x.shape[0]
    check.tensor(UPDATE, "cache_indices", cache_indices, dtypes=check.INDEX_DTYPES, shape=(b,), layout=f"[B] = [{b}]")
    check.same_device(UPDATE, x=x, weight=weight, bias=bias, conv_states=conv_states, cache_indices=cache_indices)
    check.indices(UPDATE, "cache_indices", cache_indices, conv_states.shape[0], allow_padding=True, values=values)


def check_spec_decode_form(x, conv_states, cache_indices, query_start_loc, num_accepted_tokens, *, values, op=UPDATE,
                           index_name="cache_indices"):
    """The speculative-decoding form: x [T, C] packed by query_start_loc [N+1], cache_indices [N, W].

    Shared with ``gdn_decode_step`` (``op``, and ``index_name`` for its 'state_indices'), whose conv part it is.
    """
    if query_start_loc is None or num_accepted_tokens is None:
        raise ValueError(f"{op}: speculative decoding needs both 'query_start_loc' [N+1] and "
                         f"'num_accepted_tokens' [N] (with '{index_name}' [N, 1 + k])")
    check.tensor(op, "query_start_loc", query_start_loc, dtypes=check.INDEX_DTYPES, ndim=1, layout="[N+1]")
    n = query_start_loc.shape[0] - 1
    check.cumulative(op, "query_start_loc", query_start_loc, x.shape[0], values=values)
    check.tensor(op, index_name, cache_indices, dtypes=check.INDEX_DTYPES, shape=(n, None),
                 layout=f"[N, 1 + k] = [{n}, W] (a state row per token of the step)")
    width = cache_indices.shape[1]
    if width < 1:
        raise ValueError(f"{op}: argument '{index_name}' must have W = 1 + k >= 1 columns, got "
                         f"{tuple(cache_indices.shape)}")
    check.tensor(op, "num_accepted_tokens", num_accepted_tokens, dtypes=check.INDEX_DTYPES, shape=(n,),
                 layout=f"[N] = [{n}]")
    check.same_device(op, x=x, conv_states=conv_states, cache_indices=cache_indices,
                      query_start_loc=query_start_loc, num_accepted_tokens=num_accepted_tokens)
    check.indices(op, index_name, cache_indices, conv_states.shape[0], allow_padding=True, values=values)
    if not values or n == 0:
        return
    accepted = num_accepted_tokens.to(torch.int64)
    if int(accepted.min()) < 1 or int(accepted.max()) > width:
        raise ValueError(f"{op}: argument 'num_accepted_tokens' must be in [1, {width}] (1 + k state rows per "
                         f"sequence), got {accepted.tolist()}")
    lengths = (query_start_loc[1:] - query_start_loc[:-1]).to(torch.int64)
    if int(lengths.max()) > width:
        raise ValueError(f"{op}: a sequence has {int(lengths.max())} tokens but '{index_name}' has only "
                         f"{width} state rows per sequence (one per token)")
    rows = cache_indices.to(torch.int64)
    padding = (rows < 0).all(dim=1)
    column = torch.arange(width, device=rows.device)[None, :]
    used = (column < lengths[:, None]) | (column == accepted[:, None] - 1)
    if bool(((rows < 0) & used & ~padding[:, None]).any()):
        raise ValueError(f"{op}: argument '{index_name}' has -1 where a sequence reads its state (column "
                         "num_accepted_tokens - 1) or writes one (its first L columns); only a row of all -1 is "
                         "padding")


@custom_op(UPDATE, mutates_args=("conv_states",))
def _update_op(x: torch.Tensor, conv_states: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
               cache_indices: torch.Tensor, activation: Optional[str], backend: Optional[str],
               query_start_loc: Optional[torch.Tensor] = None,
               num_accepted_tokens: Optional[torch.Tensor] = None) -> torch.Tensor:
    _check_update(x, conv_states, weight, bias, cache_indices, activation, values=check.values_checked(x.device),
                  query_start_loc=query_start_loc, num_accepted_tokens=num_accepted_tokens)
    return dispatch(UPDATE, backend, x.device, x=x, conv_states=conv_states, weight=weight, bias=bias,
                    cache_indices=cache_indices, activation=activation, query_start_loc=query_start_loc,
                    num_accepted_tokens=num_accepted_tokens)


@_update_op.register_fake
def _update_fake(x, conv_states, weight, bias, cache_indices, activation, backend, query_start_loc=None,
                 num_accepted_tokens=None):
    _check_update(x, conv_states, weight, bias, cache_indices, activation, values=False,
                  query_start_loc=query_start_loc, num_accepted_tokens=num_accepted_tokens)
    return torch.empty_like(x)


def causal_conv1d_update(x, conv_states, weight, bias=None, *, cache_indices, activation="silu",
                         backend: str | None = None, query_start_loc=None, num_accepted_tokens=None) -> torch.Tensor:
    """One-token step of the causal convolution for B sequences (or a few tokens each, speculative decoding).

    Args:
        x: [B, C] float, one new input per sequence.
        conv_states: [S, K-1, C] pool; row ``cache_indices[b]`` holds the
            previous K-1 inputs (oldest first) and is shifted in place to end
            with x[b].
        weight: [C, K]; bias: [C] or None.
        cache_indices: [B] int32/int64; -1 marks padding (output zeros, no write).
        activation: "silu" or None.
        query_start_loc, num_accepted_tokens: speculative decoding, given
            together (the state rule of the GDN layers' spec-decode metadata,
            applied to the conv state): x is [T, C] with N sequences of
            L_r <= W tokens packed by query_start_loc [N+1]; cache_indices is
            [N, W = 1 + k], one state row per token of the step;
            num_accepted_tokens [N] in [1, W]. Sequence r's window starts from
            ``conv_states[cache_indices[r, num_accepted_tokens[r] - 1]]`` and
            the K-1 inputs ending at its t-th token are written to
            ``conv_states[cache_indices[r, t]]``. A row of all -1 is padding
            (zero outputs, no write). Not served by the ascendc backend. (vLLM
            keeps one wider conv state per request instead and slides it by
            num_accepted_tokens - 1; this form shares the GDN state's rows.)
    Returns:
        [B, C] (or [T, C]) in x's dtype.
    """
    return torch.ops.qwen_ops.causal_conv1d_update(x, conv_states, weight, bias, cache_indices, activation, backend,
                                                   query_start_loc, num_accepted_tokens)
