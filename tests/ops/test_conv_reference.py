"""The torch reference of the causal convolution against a float64 loop written from the contract.

Called through the public ops with ``backend="torch"``. The loop below walks
tokens and kernel taps (vectorised over channels) in float64.
"""
from __future__ import annotations

import pytest
import torch
from tolerances import REFERENCE_VS_FLOAT64, tol

from qwen_ops.ops import causal_conv1d_fn, causal_conv1d_update
from qwen_ops.testing import Draw, conv_fn_call, conv_update_call, offsets

F32 = torch.float32
F64 = torch.float64


def conv_float64(x, left, weight, bias, activation):
    """One sequence. x [L, C]; left [K-1, C] (inputs before x, oldest first); weight [C, K]; bias [C] or None.

    Returns (outputs [L, C], the last K-1 inputs [K-1, C]), float64.
    """
    x, left, weight = x.to(F64), left.to(F64), weight.to(F64)
    width = weight.shape[1]
    inputs = torch.cat([left, x])
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        acc = torch.zeros(x.shape[1], dtype=F64) if bias is None else bias.to(F64).clone()
        for tap in range(width):
            acc = acc + weight[:, tap] * inputs[t + tap]  # tap K-1 multiplies the current token
        out[t] = acc / (1 + torch.exp(-acc)) if activation == "silu" else acc
    return out, inputs[inputs.shape[0] - (width - 1):]


def draw(gen, *shape, dtype=F32):
    return torch.randn(*shape, generator=gen).to(dtype)


@pytest.mark.parametrize("width", [2, 4])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("activation", ["silu", None])
@pytest.mark.parametrize("dtype,state_dtype", [(F32, F32), (torch.float16, torch.float16),
                                               (torch.bfloat16, torch.bfloat16), (torch.bfloat16, F32)])
def test_fn_packed_sequences(gen, width, with_bias, activation, dtype, state_dtype):
    channels, pool_rows = 24, 9
    # Lengths 1 and 2 are shorter than K-1 = 3: their new state keeps older saved inputs.
    lengths = [5, 1, 2, 0, 17, 3, 2]
    call = conv_fn_call(Draw(gen), lengths, channels, width, dtype, pool_rows=pool_rows, pool_dtype=state_dtype,
                        cache_indices=[6, 2, 0, 8, -1, 4, 1],  # shuffled; -1 is padding
                        has_initial_state=[True, True, True, True, True, False, False], bias=with_bias,
                        index_dtype=torch.int64)
    x, weight, bias, states = call["x"], call["weight"], call["bias"], call["conv_states"]
    indices, has_initial = call["cache_indices"], call["has_initial_state"]
    x_before, states_before = x.clone(), states.clone()

    out = causal_conv1d_fn(x, weight, bias, conv_states=states, query_start_loc=offsets(lengths),
                           cache_indices=indices, has_initial_state=has_initial, activation=activation,
                           backend="torch")

    assert out.dtype == dtype and out.shape == x.shape
    assert torch.equal(x, x_before)
    start = 0
    for length, row, from_state in zip(lengths, indices.tolist(), has_initial.tolist()):
        if row >= 0 and from_state:
            left = states_before[row]
        else:
            left = torch.zeros(width - 1, channels)
        want, want_state = conv_float64(x[start:start + length], left, weight, bias, activation)
        torch.testing.assert_close(out[start:start + length].to(F64), want, **tol(REFERENCE_VS_FLOAT64, dtype))
        if row >= 0:
            # States are raw inputs: exact once rounded to the state dtype.
            assert torch.equal(states[row], want_state.to(state_dtype)), f"state of sequence at row {row}"
        start += length
    for row in (3, 5, 7):
        assert torch.equal(states[row], states_before[row]), f"pool row {row} is not referenced but changed"


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("activation", ["silu", None])
@pytest.mark.parametrize("dtype", [F32, torch.float16, torch.bfloat16])
def test_update_one_token(gen, with_bias, activation, dtype):
    channels, width, pool_rows = 40, 4, 8
    call = conv_update_call(Draw(gen), channels, width, dtype, pool_rows=pool_rows, cache_indices=[3, -1, 7, 0, 5],
                            bias=with_bias)
    x, weight, bias, states, indices = (call[name] for name in ("x", "weight", "bias", "conv_states", "cache_indices"))
    x_before, states_before = x.clone(), states.clone()

    out = causal_conv1d_update(x, states, weight, bias, cache_indices=indices, activation=activation,
                               backend="torch")

    assert out.dtype == dtype and out.shape == x.shape
    assert torch.equal(x, x_before)
    for b, row in enumerate(indices.tolist()):
        if row < 0:
            assert torch.equal(out[b], torch.zeros_like(out[b])), "padding outputs zeros"
            continue
        want, want_state = conv_float64(x[b:b + 1], states_before[row], weight, bias, activation)
        torch.testing.assert_close(out[b:b + 1].to(F64), want, **tol(REFERENCE_VS_FLOAT64, dtype))
        assert torch.equal(states[row], want_state.to(dtype))
    for row in (1, 2, 4, 6):
        assert torch.equal(states[row], states_before[row]), f"pool row {row} is not referenced but changed"


def test_update_continues_fn(gen):
    """A prefill of part of a sequence followed by one-token updates equals one prefill of all of it."""
    channels, width, prefix, steps = 16, 4, 2, 5
    x = draw(gen, prefix + steps, channels)
    weight, bias = draw(gen, channels, width), draw(gen, channels)
    saved = draw(gen, 1, width - 1, channels)
    whole_states, split_states = saved.clone(), saved.clone()
    common = dict(cache_indices=torch.tensor([0]), has_initial_state=torch.tensor([True]), backend="torch")
    whole = causal_conv1d_fn(x, weight, bias, conv_states=whole_states,
                             query_start_loc=offsets([prefix + steps]), **common)
    pieces = [causal_conv1d_fn(x[:prefix], weight, bias, conv_states=split_states,
                               query_start_loc=offsets([prefix]), **common)]
    for t in range(prefix, prefix + steps):
        pieces.append(causal_conv1d_update(x[t:t + 1], split_states, weight, bias, cache_indices=torch.tensor([0]),
                                           backend="torch"))
    torch.testing.assert_close(torch.cat(pieces), whole, **tol(REFERENCE_VS_FLOAT64, F32))
    assert torch.equal(split_states, whole_states)
