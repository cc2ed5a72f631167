"""Torch reference of the depthwise causal convolution (defines the semantics).

Channel c of output token t of a sequence is

    act(bias[c] + sum_{k<K} weight[c, k] * window[k, c]),

where ``window`` is the K inputs ending at token t (oldest first). Inputs
before the sequence's first token come from its saved state: the K-1 inputs
that preceded it, ``conv_states[slot]`` [K-1, C] oldest first, or zeros.
After a call the state holds the last K-1 inputs seen (before activation),
so a sequence shorter than K-1 keeps some of the older saved inputs.

Arithmetic is float32; outputs are cast to x's dtype and states are stored in
conv_states' dtype. Pool index -1 marks padding: zero left context, nothing
written, and (for the one-token update) zero outputs.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

F32 = torch.float32


def _activate(y: torch.Tensor, activation: str | None) -> torch.Tensor:
    return F.silu(y) if activation == "silu" else y


def _convolve(history: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """history [..., L + K - 1, C] float32 -> pre-activation outputs [..., L, C] (one per full window)."""
    kernel_width = weight.shape[1]
    windows = history.unfold(-2, kernel_width, 1)  # [..., L, C, K]
    y = (windows * weight.to(F32)).sum(dim=-1)
    return y if bias is None else y + bias.to(F32)


def causal_conv1d_fn(*, x, weight, bias, conv_states, query_start_loc, cache_indices, has_initial_state,
                     activation):
    """x [T, C] with N sequences packed by query_start_loc [N+1]; conv_states [S, K-1, C] updated in place.

    Returns [T, C] in x's dtype. See the module docstring for the meaning.
    """
    context = weight.shape[1] - 1
    out = torch.empty_like(x)
    offsets = query_start_loc.tolist()
    slots = cache_indices.tolist()
    starts_from_state = has_initial_state.tolist()
    for r, slot in enumerate(slots):
        start, end = offsets[r], offsets[r + 1]
        if slot >= 0 and starts_from_state[r]:
            left = conv_states[slot].to(F32)
        else:
            left = x.new_zeros(context, x.shape[1], dtype=F32)
        history = torch.cat([left, x[start:end].to(F32)])  # [K-1 + L, C]
        if end > start:  # an empty sequence has no window; its state is just carried over
            out[start:end] = _activate(_convolve(history, weight, bias), activation).to(x.dtype)
        if slot >= 0:
            conv_states[slot] = history[-context:].to(conv_states.dtype)
    return out


def causal_conv1d_update(*, x, conv_states, weight, bias, cache_indices, activation, query_start_loc=None,
                         num_accepted_tokens=None):
    """x [B, C], one new input per sequence; conv_states [S, K-1, C] shifted in place. Returns [B, C] in x's dtype.

    With ``num_accepted_tokens`` the speculative-decoding form (``causal_conv1d_update_spec_decode``).
    """
    if num_accepted_tokens is not None:
        return causal_conv1d_update_spec_decode(x=x, conv_states=conv_states, weight=weight, bias=bias,
                                                cache_indices=cache_indices, activation=activation,
                                                query_start_loc=query_start_loc,
                                                num_accepted_tokens=num_accepted_tokens)
    out = torch.zeros_like(x)
    valid = (cache_indices >= 0).nonzero().squeeze(-1)
    if valid.numel() == 0:
        return out
    slots = cache_indices[valid].to(torch.int64)
    history = torch.cat([conv_states[slots].to(F32), x[valid, None, :].to(F32)], dim=1)  # [b, K, C]
    y = _convolve(history, weight, bias).squeeze(1)  # one window per sequence
    out[valid] = _activate(y, activation).to(x.dtype)
    conv_states[slots] = history[:, 1:].to(conv_states.dtype)
    return out


def causal_conv1d_update_spec_decode(*, x, conv_states, weight, bias, cache_indices, activation, query_start_loc,
                                     num_accepted_tokens):
    """x [T, C] packed by query_start_loc [N+1]; cache_indices [N, W]: one state row per token.

    Sequence r starts from row ``cache_indices[r, num_accepted_tokens[r] - 1]``;
    the K-1 inputs ending at its t-th token go to row ``cache_indices[r, t]``.
    A row of all -1 is padding. Returns [T, C] in x's dtype.
    """
    context = weight.shape[1] - 1
    out = torch.zeros_like(x)
    offsets = query_start_loc.tolist()
    for r, (rows, accepted) in enumerate(zip(cache_indices.tolist(), num_accepted_tokens.tolist())):
        if all(row < 0 for row in rows):
            continue  # padding
        start, end = offsets[r], offsets[r + 1]
        history = torch.cat([conv_states[rows[accepted - 1]].to(F32), x[start:end].to(F32)])  # [K-1 + L, C]
        if end > start:
            out[start:end] = _activate(_convolve(history, weight, bias), activation).to(x.dtype)
        for t in range(end - start):
            conv_states[rows[t]] = history[t + 1: t + 1 + context].to(conv_states.dtype)
    return out
