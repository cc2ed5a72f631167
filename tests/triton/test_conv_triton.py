"""Triton causal conv1d kernels against the torch reference.

``causal_conv1d_fn`` and ``causal_conv1d_update`` with ``backend="triton"``
are compared with ``backend="torch"`` through the public ops, on copies of
the same state pool: outputs in x's dtype and the pool after the call.
Edge cases as in the reference tests: empty and shorter-than-K-1 sequences
(the saved state is shifted, not replaced), sequences longer than one token
tile, padding (-1) rows, has_initial_state False, bias or none, silu or no
activation, K = 2, 3 and 4, pool dtype different from x's.

Under Triton's interpreter (``tests/conftest.py``) every tile op runs in
numpy, so shapes are small: C = 200 (two channel blocks of 128, the second
one masked) or 96, sequences of at most 70 tokens (three token tiles of 32).

Float32 x with a bfloat16 pool: the interpreter converts float32 -> bfloat16
by truncation instead of rounding to nearest even (``tests/tolerances.py``,
``INTERPRETER_FP32_TO_BF16``), so under it those states are compared within
one bfloat16 ulp; compiled kernels round like torch and are compared exactly.
The kernels keep the plain ``.to()`` conversion: it is already
round-to-nearest-even on every compiled target.
"""
from __future__ import annotations

import os

import pytest
import torch
from tolerances import INTERPRETER_FP32_TO_BF16, KERNEL_VS_REFERENCE, tol

from qwen_ops import ops
from qwen_ops.testing import Draw, conv_fn_call, conv_update_call, offsets

DEVICE = torch.device("cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu")
F32 = torch.float32
BF16 = torch.bfloat16
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def run_both(fn, pool, device=DEVICE, **kwargs):
    """The op with each backend on its own copy of the pool; returns [(out, pool after)] on the CPU."""
    results = []
    for backend in ("torch", "triton"):
        states = pool.clone().to(device)
        args = {name: (value.to(device) if isinstance(value, torch.Tensor) else value)
                for name, value in kwargs.items()}
        before = {name: value.clone() for name, value in args.items() if isinstance(value, torch.Tensor)}
        out = fn(conv_states=states, backend=backend, **args)
        for name, old in before.items():
            assert torch.equal(old, args[name]), f"{backend}: {name} was modified"
        results.append((out.cpu(), states.cpu()))
    return results


def assert_matches(results, dtype, pool, touched_rows):
    (ref_out, ref_pool), (tri_out, tri_pool) = results
    assert tri_out.dtype == ref_out.dtype and tri_out.shape == ref_out.shape
    torch.testing.assert_close(tri_out, ref_out, **tol(KERNEL_VS_REFERENCE, dtype))
    # States are copies of inputs (no arithmetic): exact, except the
    # interpreter's truncating float32 -> bfloat16 conversion (module doc).
    if INTERPRETED and dtype == F32 and pool.dtype == BF16:
        torch.testing.assert_close(tri_pool, ref_pool, **tol(INTERPRETER_FP32_TO_BF16, BF16))
    else:
        assert torch.equal(tri_pool, ref_pool)
    for row in range(pool.shape[0]):
        if row not in touched_rows:
            assert torch.equal(tri_pool[row], pool[row]), f"unused pool row {row} changed"


# (x dtype, pool dtype, K, bias, activation, lengths, cache indices, has_initial_state): why each case.
FN_CASES = [
    # float32, K = 4 with bias and silu: lengths 5, 0 (empty, state carried), 70 (three token tiles),
    # 2 (shorter than K-1: state shifted), 1; one padding row (-1) and one fresh start.
    pytest.param(F32, F32, 4, True, "silu", [5, 0, 70, 2, 1], [3, 0, -1, 5, 6],
                 [True, True, True, False, True], id="fp32-k4"),
    # float16 x with a float32 pool, K = 3, no bias, no activation; an empty fresh sequence zeroes its row.
    pytest.param(torch.float16, F32, 3, False, None, [1, 40, 0, 3], [2, 1, 4, 0],
                 [True, False, False, True], id="fp16-k3-f32pool"),
    # float16 everywhere, K = 2 (a one-row state, the smallest K), int64 indices below.
    pytest.param(torch.float16, torch.float16, 2, True, "silu", [33, 1, 2], [1, -1, 0],
                 [True, True, False], id="fp16-k2"),
    # float32 x with a bfloat16 pool: the saved inputs are rounded to bfloat16 on the way.
    pytest.param(F32, BF16, 4, True, "silu", [6, 2, 40], [1, 0, 3],
                 [True, True, False], id="fp32-k4-bf16pool"),
]


@pytest.mark.parametrize("dtype, pool_dtype, width, with_bias, activation, lengths, indices, has_initial", FN_CASES)
def test_causal_conv1d_fn(gen, dtype, pool_dtype, width, with_bias, activation, lengths, indices, has_initial):
    call = conv_fn_call(Draw(gen), lengths, 200 if width == 4 else 96, width, dtype, pool_rows=8, pool_dtype=pool_dtype,
                        cache_indices=indices, has_initial_state=has_initial, bias=with_bias,
                        index_dtype=torch.int64 if width == 2 else torch.int32)
    pool = call.pop("conv_states")
    results = run_both(ops.causal_conv1d_fn, pool, activation=activation, **call)
    assert_matches(results, dtype, pool, {i for i in indices if i >= 0})


def test_causal_conv1d_fn_strided_input(gen):
    """x as a column slice of a wider projection (row stride != C), as the GDN layer passes it."""
    channels, width, lengths = 96, 4, [7, 12]
    wide = torch.randn(sum(lengths), channels + 32, generator=gen)
    x = wide[:, 16:16 + channels]
    assert not x.is_contiguous()
    pool = torch.randn(3, width - 1, channels, generator=gen)
    results = run_both(ops.causal_conv1d_fn, pool, x=x, weight=torch.randn(channels, width, generator=gen),
                       bias=None, query_start_loc=offsets(lengths), cache_indices=torch.tensor([2, 0]),
                       has_initial_state=torch.tensor([True, True]), activation="silu")
    assert_matches(results, F32, pool, {0, 2})


# (x dtype, pool dtype, K, bias, activation, cache indices): why each case.
UPDATE_CASES = [
    # float32, K = 4, bias and silu, padding in the middle: that row outputs zeros.
    pytest.param(F32, F32, 4, True, "silu", [2, -1, 4, 0], id="fp32-k4"),
    # float16 with a float32 pool, K = 3, no bias or activation, int64 indices.
    pytest.param(torch.float16, F32, 3, False, None, [1, 5, 3], id="fp16-k3-f32pool"),
    # K = 2: the state is a single row that x replaces.
    pytest.param(torch.float16, torch.float16, 2, True, "silu", [0, -1], id="fp16-k2"),
    # float32 x with a bfloat16 pool: x is rounded to bfloat16 as it enters the state.
    pytest.param(F32, BF16, 4, True, "silu", [3, 1, -1], id="fp32-k4-bf16pool"),
]


@pytest.mark.parametrize("dtype, pool_dtype, width, with_bias, activation, indices", UPDATE_CASES)
def test_causal_conv1d_update(gen, dtype, pool_dtype, width, with_bias, activation, indices):
    call = conv_update_call(Draw(gen), 200 if width == 4 else 96, width, dtype, pool_rows=6, pool_dtype=pool_dtype,
                            cache_indices=indices, bias=with_bias,
                            index_dtype=torch.int64 if width == 3 else torch.int32)
    pool = call.pop("conv_states")
    results = run_both(ops.causal_conv1d_update, pool, activation=activation, **call)
    assert_matches(results, dtype, pool, {i for i in indices if i >= 0})
    tri_out = results[1][0]
    for b, i in enumerate(indices):
        if i < 0:
            assert torch.equal(tri_out[b], torch.zeros_like(tri_out[b])), "a padding row outputs zeros"


def test_bf16(gen):
    """bf16 (no tl.dot here, so it also runs under the interpreter):
    bfloat16 x and pool at a Qwen3.5-like width (C = 1024, K = 4), prefill then one decode step."""
    channels, width, lengths = 1024, 4, [1, 130, 17]
    call = conv_fn_call(Draw(gen), lengths, channels, width, torch.bfloat16, pool_rows=4, cache_indices=[3, 0, 1],
                        has_initial_state=[True, False, True], bias=False)
    pool, weight, indices = call.pop("conv_states"), call["weight"], call["cache_indices"]
    results = run_both(ops.causal_conv1d_fn, pool, activation="silu", **call)
    assert_matches(results, torch.bfloat16, pool, {0, 1, 3})
    step = torch.randn(3, channels, generator=gen).to(torch.bfloat16)
    results = run_both(ops.causal_conv1d_update, pool, x=step, weight=weight, bias=None,
                       cache_indices=indices, activation="silu")
    assert_matches(results, torch.bfloat16, pool, {0, 1, 3})
