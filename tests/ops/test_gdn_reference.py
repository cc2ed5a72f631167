"""The torch references of the gated delta rule against a float64 loop, and against each other.

Both references (``fused_recurrent_gated_delta_rule``: token by token, the
golden; ``chunk_gated_delta_rule``: the chunked WY form of the kernels) are
called through the public ops with ``backend="torch"`` and compared with
``delta_rule_float64`` below, written from the contract alone: Python loops
over value heads and tokens on float64 tensors.

Inputs keep the recurrence bounded: g < 0, beta in (0, 1), and k of unit
norm (drawn normalised, or normalised by ``use_qk_l2norm_in_kernel``).
"""
from __future__ import annotations

import math

import pytest
import torch
from tolerances import REFERENCE_VS_FLOAT64, tol

from qwen_ops.ops import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
from qwen_ops.testing import Draw, gdn_inputs, offsets

IMPLEMENTATIONS = {
    "recurrent": fused_recurrent_gated_delta_rule,
    "chunked": chunk_gated_delta_rule,
}
F32 = torch.float32
F64 = torch.float64


# ----------------------------------------------------------------------------- float64 golden


def delta_rule_float64(q, k, v, g, beta, scale, state, l2norm):
    """One sequence. q, k [L, Hk, Dk]; v [L, Hv, Dv]; g, beta [L, Hv]; state [Hv, Dk, Dv] or None (zeros).

    Returns (o [L, Hv, Dv], final state [Hv, Dk, Dv]), float64.
    """
    q, k, v, g, beta = (x.to(F64) for x in (q, k, v, g, beta))
    length, num_k_heads, dk = q.shape
    num_v_heads, dv = v.shape[1], v.shape[2]
    o = torch.zeros(length, num_v_heads, dv, dtype=F64)
    final = torch.zeros(num_v_heads, dk, dv, dtype=F64) if state is None else state.to(F64).clone()
    for h in range(num_v_heads):
        key_head = h * num_k_heads // num_v_heads
        s = final[h].clone()
        for t in range(length):
            qt, kt = q[t, key_head], k[t, key_head]
            if l2norm:
                qt = qt / math.sqrt(float((qt * qt).sum()) + 1e-6)
                kt = kt / math.sqrt(float((kt * kt).sum()) + 1e-6)
            s = s * math.exp(float(g[t, h]))
            s = s + torch.outer(kt, float(beta[t, h]) * (v[t, h] - s.T @ kt))
            o[t, h] = s.T @ (scale * qt)
        final[h] = s
    return o, final


def expected_outputs(inputs, spans, starts, scale, l2norm):
    """Golden over all sequences. spans: (batch row, start, end); starts: initial state per sequence,
    None for zeros, or "skip" for a padding sequence. Returns (o [B, T, Hv, Dv], finals [N, Hv, Dk, Dv])."""
    q, k, v, g, beta = inputs
    o = torch.zeros(v.shape, dtype=F64)
    finals = torch.zeros(len(spans), v.shape[2], q.shape[3], v.shape[3], dtype=F64)
    for r, ((b, start, end), start_state) in enumerate(zip(spans, starts)):
        if isinstance(start_state, str):
            continue
        o[b, start:end], finals[r] = delta_rule_float64(q[b, start:end], k[b, start:end], v[b, start:end],
                                                        g[b, start:end], beta[b, start:end], scale, start_state,
                                                        l2norm)
    return o, finals


# ----------------------------------------------------------------------------- inputs


def spans_of(lengths):
    starts = offsets(lengths).tolist()
    return [(0, starts[r], starts[r + 1]) for r in range(len(lengths))]


def call_unchanged(fn, inputs, **kwargs):
    """Call ``fn`` and check it left q, k, v, g, beta exactly as they were."""
    before = [x.clone() for x in inputs]
    result = fn(*inputs, backend="torch", **kwargs)
    for name, old, new in zip("q k v g beta".split(), before, inputs):
        assert torch.equal(old, new), f"{name} was modified"
    return result


def assert_close_to(actual, expected, dtype):
    torch.testing.assert_close(actual.to(F64), expected, **tol(REFERENCE_VS_FLOAT64, dtype))


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("l2norm", [False, True])
@pytest.mark.parametrize("hk,hv", [(2, 2), (2, 4)])
def test_packed_sequences_from_zero_state(gen, impl, l2norm, hk, hv):
    lengths = [1, 37, 0, 64, 65, 150]  # shorter than, equal to, longer than a chunk; one empty
    inputs = gdn_inputs(Draw(gen), batch=1, tokens=sum(lengths), hk=hk, hv=hv, dk=16, dv=32, l2norm_in_kernel=l2norm)
    o, final = call_unchanged(IMPLEMENTATIONS[impl], inputs, output_final_state=True,
                              cu_seqlens=offsets(lengths), use_qk_l2norm_in_kernel=l2norm)
    want_o, want_final = expected_outputs(inputs, spans_of(lengths), [None] * len(lengths), 16 ** -0.5, l2norm)
    assert o.dtype == F32 and o.shape == inputs[2].shape
    assert final.dtype == F32 and final.shape == (len(lengths), hv, 16, 32)
    assert_close_to(o, want_o, F32)
    assert_close_to(final, want_final, F32)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("mixed_start", [False, True])
def test_batch_with_initial_state(gen, impl, mixed_start):
    batch, tokens, hk, hv, dk, dv = 3, 70, 1, 2, 16, 16
    inputs = gdn_inputs(Draw(gen), batch=batch, tokens=tokens, hk=hk, hv=hv, dk=dk, dv=dv)
    initial = torch.randn(batch, hv, dk, dv, generator=gen)
    initial_before = initial.clone()
    has_initial = torch.tensor([True, False, True]) if mixed_start else None
    scale = 0.37
    o, final = call_unchanged(IMPLEMENTATIONS[impl], inputs, scale=scale, initial_state=initial,
                              output_final_state=True, has_initial_state=has_initial)
    starts = [None if mixed_start and not has_initial[r] else initial[r] for r in range(batch)]
    want_o, want_final = expected_outputs(inputs, [(b, 0, tokens) for b in range(batch)], starts, scale, False)
    assert_close_to(o, want_o, F32)
    assert_close_to(final, want_final, F32)
    assert torch.equal(initial, initial_before), "a plain initial_state must not be modified"


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("output_final_state", [False, True])
def test_state_pool_with_padding(gen, impl, output_final_state):
    lengths = [3, 64, 0, 80, 1, 20]
    indices = torch.tensor([5, 0, 3, -1, 7, 2], dtype=torch.int32)  # shuffled; -1 is padding
    has_initial = torch.tensor([True, False, True, True, True, False])
    hk, hv, dk, dv, pool_rows = 2, 4, 16, 16, 9
    inputs = gdn_inputs(Draw(gen), batch=1, tokens=sum(lengths), hk=hk, hv=hv, dk=dk, dv=dv, l2norm_in_kernel=True)
    pool = torch.randn(pool_rows, hv, dk, dv, generator=gen)
    pool_before = pool.clone()

    o, final = call_unchanged(IMPLEMENTATIONS[impl], inputs, initial_state=pool,
                              output_final_state=output_final_state, cu_seqlens=offsets(lengths),
                              ssm_state_indices=indices, has_initial_state=has_initial,
                              use_qk_l2norm_in_kernel=True)

    starts = ["skip" if i < 0 else (pool_before[i] if h else None) for i, h in zip(indices.tolist(), has_initial)]
    want_o, want_final = expected_outputs(inputs, spans_of(lengths), starts, dk ** -0.5, True)
    assert_close_to(o, want_o, F32)
    padded = spans_of(lengths)[3]
    assert torch.equal(o[0, padded[1]:padded[2]], torch.zeros_like(o[0, padded[1]:padded[2]]))
    if output_final_state:
        assert_close_to(final, want_final, F32)
        assert torch.equal(final[3], torch.zeros_like(final[3])), "padding has no final state"
    else:
        assert final is None
    used = [i for i in indices.tolist() if i >= 0]
    for r, row in enumerate(indices.tolist()):
        if row >= 0:
            assert_close_to(pool[row], want_final[r], F32)
    for row in range(pool_rows):
        if row not in used:
            assert torch.equal(pool[row], pool_before[row]), f"pool row {row} is not referenced but changed"


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("packed", [True, False])
def test_decode_step_on_state_pool(gen, impl, packed):
    """The engine's decode call: one token per sequence, states read from and written to a pool."""
    num_seqs, hk, hv, dk, dv = 5, 2, 4, 32, 16
    indices = torch.tensor([4, -1, 0, 6, 2], dtype=torch.int64)
    if packed:
        inputs = gdn_inputs(Draw(gen), batch=1, tokens=num_seqs, hk=hk, hv=hv, dk=dk, dv=dv, l2norm_in_kernel=True)
        cu_seqlens, spans = offsets([1] * num_seqs), spans_of([1] * num_seqs)
    else:
        inputs = gdn_inputs(Draw(gen), batch=num_seqs, tokens=1, hk=hk, hv=hv, dk=dk, dv=dv, l2norm_in_kernel=True)
        cu_seqlens, spans = None, [(b, 0, 1) for b in range(num_seqs)]
    pool = torch.randn(7, hv, dk, dv, generator=gen)
    pool_before = pool.clone()
    o, _ = call_unchanged(IMPLEMENTATIONS[impl], inputs, initial_state=pool, cu_seqlens=cu_seqlens,
                          ssm_state_indices=indices, use_qk_l2norm_in_kernel=True)
    starts = ["skip" if i < 0 else pool_before[i] for i in indices.tolist()]
    want_o, want_final = expected_outputs(inputs, spans, starts, dk ** -0.5, True)
    assert_close_to(o, want_o, F32)
    for r, row in enumerate(indices.tolist()):
        if row >= 0:
            assert_close_to(pool[row], want_final[r], F32)
    for row in (1, 3, 5):
        assert torch.equal(pool[row], pool_before[row])


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_inputs(gen, impl, dtype):
    """Arithmetic is float32 whatever the input dtype; o comes back in v's dtype, states in float32."""
    lengths = [37, 100]
    hk, hv, dk, dv = 1, 2, 32, 16
    inputs = gdn_inputs(Draw(gen), batch=1, tokens=sum(lengths), hk=hk, hv=hv, dk=dk, dv=dv,
                        dtype=dtype, l2norm_in_kernel=True)
    initial = torch.randn(len(lengths), hv, dk, dv, generator=gen)
    o, final = call_unchanged(IMPLEMENTATIONS[impl], inputs, initial_state=initial, output_final_state=True,
                              cu_seqlens=offsets(lengths), use_qk_l2norm_in_kernel=True)
    want_o, want_final = expected_outputs(inputs, spans_of(lengths), list(initial), dk ** -0.5, True)
    assert o.dtype == dtype and final.dtype == F32
    assert_close_to(o, want_o, dtype)
    # The inputs are exact in float64 too, so only float32 arithmetic separates the states.
    assert_close_to(final, want_final, F32)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("dk,dv", [(64, 64), (128, 128)])
def test_model_head_dims(gen, impl, dk, dv):
    lengths = [150]
    inputs = gdn_inputs(Draw(gen), batch=1, tokens=150, hk=1, hv=2, dk=dk, dv=dv, l2norm_in_kernel=True)
    initial = torch.randn(1, 2, dk, dv, generator=gen) * 0.1
    o, final = call_unchanged(IMPLEMENTATIONS[impl], inputs, initial_state=initial, output_final_state=True,
                              cu_seqlens=offsets(lengths), use_qk_l2norm_in_kernel=True)
    want_o, want_final = expected_outputs(inputs, spans_of(lengths), list(initial), dk ** -0.5, True)
    assert_close_to(o, want_o, F32)
    assert_close_to(final, want_final, F32)


@pytest.mark.parametrize("log_decay_spread", [1.0, 4.0])
def test_chunked_matches_recurrent(gen, log_decay_spread):
    """The two references on long sequences over several chunks, pool mode, explicit scale.

    A spread of 4 mixes near-zero and very strong decays (exp(gc) underflows within a chunk).
    """
    lengths = [200, 129, 63, 128]
    hk, hv, dk, dv = 2, 4, 32, 32
    inputs = gdn_inputs(Draw(gen), batch=1, tokens=sum(lengths), hk=hk, hv=hv, dk=dk, dv=dv, l2norm_in_kernel=True,
                         decay_spread=log_decay_spread)
    pool = torch.randn(6, hv, dk, dv, generator=gen)
    indices = torch.tensor([3, 0, 5, 1], dtype=torch.int32)
    kwargs = dict(scale=0.21, output_final_state=True, cu_seqlens=offsets(lengths), ssm_state_indices=indices,
                  use_qk_l2norm_in_kernel=True)
    recurrent_pool, chunked_pool = pool.clone(), pool.clone()
    o_rec, final_rec = call_unchanged(fused_recurrent_gated_delta_rule, inputs, initial_state=recurrent_pool, **kwargs)
    o_chunk, final_chunk = call_unchanged(chunk_gated_delta_rule, inputs, initial_state=chunked_pool, **kwargs)
    torch.testing.assert_close(o_chunk, o_rec, **tol(REFERENCE_VS_FLOAT64, F32))
    torch.testing.assert_close(final_chunk, final_rec, **tol(REFERENCE_VS_FLOAT64, F32))
    torch.testing.assert_close(chunked_pool, recurrent_pool, **tol(REFERENCE_VS_FLOAT64, F32))
    assert torch.equal(chunked_pool[[2, 4]], pool[[2, 4]])


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_zero_key_head_dim_is_rejected(gen, impl):
    """Dk = 0 has no default scale (Dk ** -0.5): a clear ValueError, not a ZeroDivisionError."""
    q, k, v, g, beta = gdn_inputs(Draw(gen), batch=1, tokens=3, hk=2, hv=2, dk=4, dv=4)
    empty = q[..., :0]
    with pytest.raises(ValueError, match="'q'.*Dk"):
        IMPLEMENTATIONS[impl](empty, empty, v, g, beta, backend="torch")
