"""Triton gated delta rule kernels against the torch references.

``chunk_gated_delta_rule(backend="triton")`` is compared with the torch
chunked reference and ``fused_recurrent_gated_delta_rule(backend="triton")``
with the torch recurrence (the golden), both through the public ops, on the
same edge cases as the references: packed sequences of 0, 1, 64 and > 64
tokens, a batch without ``cu_seqlens``, plain initial states with
``has_initial_state``, state pools with padding (-1), GQA (Hv = 2 Hk),
in-kernel l2norm, and Dk != Dv including a non-power-of-two Dv.

On a CPU-only machine the kernels run under Triton's interpreter (set by
``tests/conftest.py``), which executes every tile op in numpy: shapes are
small (Dk, Dv of 32 to 64, at most 4 value heads, ~150 tokens) and each case
says why it needs its size. D = 256 is covered once per kernel.

Inputs keep the recurrence bounded, as in the reference tests: g < 0,
beta in (0, 1), and k of unit norm (or normalised in the kernel).

bfloat16: the interpreter's bfloat16 ``tl.dot`` is wrong, so
``test_bf16_on_gpu`` runs on a GPU only; on the CPU the chunk kernels
multiply their rounded 16-bit operands as float32 (what a tensor core
computes) and are compared with ``tests/gdn_chunk_rounding.py``, the
reference with the same roundings.
"""
from __future__ import annotations

import os

import pytest
import torch
from gdn_chunk_rounding import rounded_chunk_gated_delta_rule
from tolerances import (CHUNK_16BIT_DOTS_STATE_VS_FLOAT32, CHUNK_KERNEL_VS_ROUNDING_MODEL, KERNEL_VS_REFERENCE,
                        tol)

from qwen_ops import ops
from qwen_ops.testing import Draw, gdn_inputs, offsets

DEVICE = torch.device("cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu")
NEEDS_GPU = pytest.mark.skipif(not torch.cuda.is_available(),
                               reason="bf16 tl.dot is wrong under the Triton interpreter; runs on a GPU/NPU only")
F32 = torch.float32
OPS = {"chunk": ops.chunk_gated_delta_rule, "recurrent": ops.fused_recurrent_gated_delta_rule}
# Sequence lengths per op. The chunk kernel needs 64 (one full chunk) and 70
# (a full and a partial chunk); the recurrent kernel has no chunks and steps
# token by token, which is slow under the interpreter, so it gets short ones.
PACKED_LENGTHS = {"chunk": [0, 1, 64, 70], "recurrent": [0, 1, 9, 6]}
BATCH_TOKENS = {"chunk": 70, "recurrent": 9}
POOL_LENGTHS = {"chunk": [3, 66, 5, 20], "recurrent": [3, 7, 5, 2]}


def run_both(op, inputs, *, initial_state=None, device=DEVICE, **kwargs):
    """The op with the torch and the triton backend on copies of the state; checks inputs stay intact.

    Returns [(o, final, state after the call)] for torch then triton, on the CPU.
    """
    results = []
    for backend in ("torch", "triton"):
        args = [x.to(device) for x in inputs]
        before = [x.clone() for x in args]
        state = None if initial_state is None else initial_state.clone().to(device)
        extra = {name: (value.to(device) if isinstance(value, torch.Tensor) else value)
                 for name, value in kwargs.items()}
        o, final = op(*args, initial_state=state, backend=backend, **extra)
        for name, old, new in zip("q k v g beta".split(), before, args):
            assert torch.equal(old, new), f"{backend}: {name} was modified"
        results.append((o.cpu(), None if final is None else final.cpu(), None if state is None else state.cpu()))
    return results


def assert_matches(results, dtype, op="recurrent"):
    """Triton against torch: outputs in their dtype's tolerance; float32 states in float32's, except the chunk
    kernels' with 16-bit inputs, whose dots round operands to that dtype (CHUNK_16BIT_DOTS_STATE_VS_FLOAT32)."""
    (ref_o, ref_final, ref_state), (tri_o, tri_final, tri_state) = results
    assert tri_o.dtype == ref_o.dtype and tri_o.shape == ref_o.shape
    torch.testing.assert_close(tri_o, ref_o, **tol(KERNEL_VS_REFERENCE, dtype))
    assert (tri_final is None) == (ref_final is None)
    state_tol = (tol(CHUNK_16BIT_DOTS_STATE_VS_FLOAT32, dtype) if op == "chunk" and dtype != F32
                 else tol(KERNEL_VS_REFERENCE, F32))
    # States are float32 whatever the input dtype: both sides accumulate in float32.
    if ref_final is not None:
        assert tri_final.dtype == F32 and tri_final.shape == ref_final.shape
        torch.testing.assert_close(tri_final, ref_final, **state_tol)
    if ref_state is not None:
        torch.testing.assert_close(tri_state, ref_state, **state_tol)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [F32, torch.float16])
def test_packed_sequences_with_initial_states(gen, op, dtype):
    """An empty sequence, a single token and longer ones (PACKED_LENGTHS).

    GQA (Hk 1, Hv 2), Dk 32 != Dv 48 (not a power of two: masked columns,
    two v-blocks of 32), a plain initial state that must stay unmodified, and
    one sequence told to start from zeros.
    """
    lengths = PACKED_LENGTHS[op]
    hk, hv, dk, dv = 1, 2, 32, 48
    inputs = gdn_inputs(Draw(gen), batch=1, tokens=sum(lengths), hk=hk, hv=hv, dk=dk, dv=dv,
                        dtype=dtype, l2norm_in_kernel=False)
    initial = torch.randn(len(lengths), hv, dk, dv, generator=gen)
    has_initial = torch.tensor([True, True, False, True])
    results = run_both(OPS[op], inputs, initial_state=initial, output_final_state=True,
                       cu_seqlens=offsets(lengths), has_initial_state=has_initial, scale=0.3)
    assert_matches(results, dtype, op)
    assert torch.equal(results[1][2], initial), "a plain initial_state must not be modified"


@pytest.mark.parametrize("op", OPS)
def test_batch_with_l2norm_and_no_final_state(gen, op):
    """B = 2 without cu_seqlens, in-kernel l2norm of unnormalised q, k, float16, default scale.

    Rows of 70 tokens cross a chunk boundary (chunk op); no initial and no final state.
    """
    inputs = gdn_inputs(Draw(gen), batch=2, tokens=BATCH_TOKENS[op], hk=2, hv=2, dk=64, dv=32,
                        dtype=torch.float16, l2norm_in_kernel=True)
    results = run_both(OPS[op], inputs, use_qk_l2norm_in_kernel=True)
    assert results[1][1] is None
    assert_matches(results, torch.float16, op)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("output_final_state", [False, True])
def test_state_pool_with_padding(gen, op, output_final_state):
    """Prefill into a state pool: shuffled rows, a padding sequence (-1), mixed has_initial_state.

    The padding sequence (third, 5 tokens) must output zeros; pool rows no
    sequence uses must stay bit-exact.
    """
    lengths = POOL_LENGTHS[op]
    indices = torch.tensor([5, 0, -1, 2], dtype=torch.int32)
    has_initial = torch.tensor([True, False, True, True])
    hk, hv, dk, dv, rows = 2, 4, 32, 32, 7
    inputs = gdn_inputs(Draw(gen), batch=1, tokens=sum(lengths), hk=hk, hv=hv, dk=dk, dv=dv,
                        dtype=F32, l2norm_in_kernel=True)
    pool = torch.randn(rows, hv, dk, dv, generator=gen)
    results = run_both(OPS[op], inputs, initial_state=pool, output_final_state=output_final_state,
                       cu_seqlens=offsets(lengths), ssm_state_indices=indices, has_initial_state=has_initial,
                       use_qk_l2norm_in_kernel=True)
    assert_matches(results, F32)
    tri_o, tri_final, tri_pool = results[1]
    pad = slice(sum(lengths[:2]), sum(lengths[:3]))
    assert torch.equal(tri_o[0, pad], torch.zeros_like(tri_o[0, pad])), "padding outputs must be zero"
    if output_final_state:
        assert torch.equal(tri_final[2], torch.zeros_like(tri_final[2])), "padding has no final state"
    for row in (1, 3, 4, 6):
        assert torch.equal(tri_pool[row], pool[row]), f"unused pool row {row} changed"
    assert not torch.equal(tri_pool[0], pool[0]), "the pool row of a real sequence must be written"


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype, index_dtype", [(F32, torch.int32), (torch.float16, torch.int64)])
def test_decode_step_on_state_pool(gen, op, dtype, index_dtype):
    """The engine's decode call: B = 5 sequences of one token each, no cu_seqlens, pool with padding."""
    hk, hv, dk, dv = 2, 4, 32, 32
    inputs = gdn_inputs(Draw(gen), batch=5, tokens=1, hk=hk, hv=hv, dk=dk, dv=dv, dtype=dtype, l2norm_in_kernel=True)
    indices = torch.tensor([4, -1, 0, 6, 2], dtype=index_dtype)
    pool = torch.randn(7, hv, dk, dv, generator=gen)
    results = run_both(OPS[op], inputs, initial_state=pool, ssm_state_indices=indices, use_qk_l2norm_in_kernel=True)
    assert_matches(results, dtype, op)
    assert torch.equal(results[1][0][1], torch.zeros_like(results[1][0][1]))
    for row in (1, 3, 5):
        assert torch.equal(results[1][2][row], pool[row])


@pytest.mark.parametrize("op", OPS)
def test_head_dim_256(gen, op):
    """Dk = Dv = 256, the largest head dim: 4 Dk blocks in the chunk prep, a 256-row state tile.

    One head and 20 tokens (one partial chunk) keep the interpreter within seconds.
    """
    inputs = gdn_inputs(Draw(gen), batch=1, tokens=20, hk=1, hv=1, dk=256, dv=256, dtype=F32, l2norm_in_kernel=False)
    initial = torch.randn(1, 1, 256, 256, generator=gen) * 0.1
    assert_matches(run_both(OPS[op], inputs, initial_state=initial, output_final_state=True), F32)


def test_chunk_kernel_crosses_several_chunks(gen):
    """One 200-token sequence: four chunks (64, 64, 64, 8), so the state passes three chunk boundaries.

    Checked against the recurrence too, so the kernel's inverse and WY terms
    are tested beyond agreeing with the chunked reference that shares its algorithm.
    """
    inputs = gdn_inputs(Draw(gen), batch=1, tokens=200, hk=1, hv=1, dk=32, dv=32, dtype=F32, l2norm_in_kernel=False)
    initial = torch.randn(1, 1, 32, 32, generator=gen)
    (_, _, _), (tri_o, tri_final, _) = run_both(ops.chunk_gated_delta_rule, inputs, initial_state=initial,
                                                output_final_state=True)
    golden_o, golden_final = ops.fused_recurrent_gated_delta_rule(*inputs, initial_state=initial.clone(),
                                                                  output_final_state=True, backend="torch")
    torch.testing.assert_close(tri_o, golden_o, **tol(KERNEL_VS_REFERENCE, F32))
    torch.testing.assert_close(tri_final, golden_final, **tol(KERNEL_VS_REFERENCE, F32))


@pytest.mark.gpu
@NEEDS_GPU
@pytest.mark.parametrize("op", OPS)
def test_bf16_on_gpu(gen, op):
    """bfloat16 inputs at Qwen3.5-like head dims (Dk = Dv = 128, Hv = 2 Hk), packed with a pool."""
    lengths = [1, 130, 17]
    inputs = gdn_inputs(Draw(gen), batch=1, tokens=sum(lengths), hk=2, hv=4, dk=128, dv=128, dtype=torch.bfloat16,
                  l2norm_in_kernel=True)
    pool = torch.randn(4, 4, 128, 128, generator=gen)
    results = run_both(OPS[op], inputs, initial_state=pool, output_final_state=True, cu_seqlens=offsets(lengths),
                       ssm_state_indices=torch.tensor([3, 0, 1], dtype=torch.int32), use_qk_l2norm_in_kernel=True,
                       device=torch.device("cuda"))
    assert_matches(results, torch.bfloat16, op)


def _rounding_case(gen, dtype):
    """Four packed sequences (1 to 130 tokens: partial, full and several chunks), GQA, Dk 32 != Dv 48, initial states."""
    lengths = [1, 64, 70, 130]
    inputs = gdn_inputs(Draw(gen), batch=1, tokens=sum(lengths), hk=1, hv=2, dk=32, dv=48, dtype=dtype,
                        l2norm_in_kernel=False)
    initial = torch.randn(len(lengths), 2, 32, 48, generator=gen)
    return inputs, dict(initial_state=initial, output_final_state=True, cu_seqlens=offsets(lengths), scale=0.3)


def _rounding_model(dtype, inputs, call, truncate=False):
    q, k, v, g, beta = inputs
    return rounded_chunk_gated_delta_rule(dtype, truncate, q=q, k=k, v=v, g=g, beta=beta, ssm_state_indices=None,
                                          has_initial_state=None, use_qk_l2norm_in_kernel=False, **call)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_chunk_kernel_16bit_dots_follow_the_rounding_model(gen, dtype):
    """The kernels' 16-bit path on the CPU: under the interpreter they multiply the rounded operands as float32
    (dot_f32_acc's UPCAST; what a tensor core computes), so their difference from the float32 reference is their
    operand roundings, as tests/gdn_chunk_rounding.py models them (truncating to bfloat16, as the interpreter
    converts; a device rounds to nearest)."""
    inputs, call = _rounding_case(gen, dtype)
    tri_o, tri_final = ops.chunk_gated_delta_rule(*inputs, backend="triton", **call)
    model_o, model_final = _rounding_model(dtype, inputs, call, truncate=dtype == torch.bfloat16)
    ref_o, ref_final = ops.chunk_gated_delta_rule(*inputs, backend="torch", **call)
    torch.testing.assert_close(tri_o, model_o, **tol(KERNEL_VS_REFERENCE, dtype))
    torch.testing.assert_close(tri_final, model_final, **tol(CHUNK_KERNEL_VS_ROUNDING_MODEL, dtype))
    # The model is not the float32 reference: the roundings are visible, so the check above has teeth.
    assert not torch.allclose(model_final, ref_final, **tol(KERNEL_VS_REFERENCE, F32))
    # And the kernel is within the bound the GPU test holds it to.
    torch.testing.assert_close(tri_o, ref_o, **tol(KERNEL_VS_REFERENCE, dtype))
    torch.testing.assert_close(tri_final, ref_final, **tol(CHUNK_16BIT_DOTS_STATE_VS_FLOAT32, dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_chunk_16bit_rounding_model_within_its_tolerance(gen, dtype):
    """The bfloat16 algorithm on the CPU (inputs in bfloat16, float32 math, the kernels' roundings) against the
    float32 reference: within CHUNK_16BIT_DOTS_STATE_VS_FLOAT32, the bound the GPU test holds the kernel to."""
    inputs, call = _rounding_case(gen, dtype)
    model_o, model_final = _rounding_model(dtype, inputs, call)
    ref_o, ref_final = ops.chunk_gated_delta_rule(*inputs, backend="torch", **call)
    torch.testing.assert_close(model_o, ref_o, **tol(KERNEL_VS_REFERENCE, dtype))
    torch.testing.assert_close(model_final, ref_final, **tol(CHUNK_16BIT_DOTS_STATE_VS_FLOAT32, dtype))
