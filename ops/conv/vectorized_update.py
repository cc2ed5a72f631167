"""The one-token conv update as K fused multiply-adds over the whole batch: what the torch backend runs.

Same contract and semantics as ``reference.causal_conv1d_update`` (kept as the
readable definition); tested against it (``tests/ops/test_vectorized_cpu_forms.py``)
and against float64 loops through the public op. The reference concatenates
the saved inputs and x into a [B, K, C] history, unfolds it and reduces over K
(several [B, K, C] temporaries); this form accumulates
``bias + sum_k weight[:, k] * input_k`` in place into one [B, C] float32 tensor
(K addcmul passes over B * C, no [B, K, C] temporary besides the gathered state,
which is shifted in place) and writes the pool rows back with one index_copy_. Float32 sums taken in a
different order from the reference's, so the two agree to rounding (a few
ulps), not bit for bit.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .cpu_update_kernel import update_step

F32 = torch.float32


def causal_conv1d_update(*, x, conv_states, weight, bias, cache_indices, activation, query_start_loc=None,
                         num_accepted_tokens=None):
    """x [B, C], one new input per sequence; conv_states [S, K-1, C] shifted in place. Returns [B, C] in x's dtype.

    Pool index -1 is padding: output zeros, nothing written. On a float32 pool the C++
    kernel of ``cpu_update_kernel.py`` runs when the extension has it. The speculative-decoding
    form (``num_accepted_tokens``, x [T, C] packed by ``query_start_loc``) runs the reference.
    """
    if num_accepted_tokens is not None:
        from .reference import causal_conv1d_update_spec_decode

        return causal_conv1d_update_spec_decode(x=x, conv_states=conv_states, weight=weight, bias=bias,
                                                cache_indices=cache_indices, activation=activation,
                                                query_start_loc=query_start_loc,
                                                num_accepted_tokens=num_accepted_tokens)
    stepped = update_step(x=x, conv_states=conv_states, weight=weight, bias=bias, cache_indices=cache_indices,
                          activation=activation)
    if stepped is not None:  # the C++ kernel shifted the pool rows in place (cpu_update_kernel.py)
        return stepped
    valid = (cache_indices >= 0).nonzero().squeeze(-1)
    everyone = valid.numel() == x.shape[0]
    if valid.numel() == 0:
        return torch.zeros_like(x)
    slots = cache_indices[valid].to(torch.int64)
    saved = conv_states.index_select(0, slots)  # [b, K-1, C], oldest first: the one [b, K-1, C] temporary
    new = x if everyone else x.index_select(0, valid)
    context = weight.shape[1] - 1
    w = weight.to(F32)
    y = new.to(F32) * w[:, context]
    if bias is not None:
        y.add_(bias.to(F32))
    for tap in range(context):  # K-1 taps (3 for Qwen3.5): a fixed small loop, not one per row
        y.addcmul_(saved[:, tap].to(F32), w[:, tap])
    if activation == "silu":
        y = F.silu(y, inplace=True)
    # Shift the gathered rows in place (oldest tap first, so no copy reads what it overwrote), then write them
    # back: no further [b, K-1, C] tensor is allocated (on a loaded machine each fresh allocation's page
    # faults cost more than the copy itself).
    for tap in range(context - 1):
        saved[:, tap].copy_(saved[:, tap + 1])
    saved[:, context - 1].copy_(new)
    conv_states.index_copy_(0, slots, saved)
    if everyone:
        return y.to(x.dtype)
    out = torch.zeros_like(x)
    out.index_copy_(0, valid, y.to(x.dtype))
    return out
