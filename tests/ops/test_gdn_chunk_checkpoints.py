"""chunk_gated_delta_rule's checkpoint_boundaries: the state after 64 * j tokens, emitted at the kernel's chunk ends.

The meaning: the state a separate call over the first 64 * j tokens of the sequence
returns as its final state. Every backend that computes chunk states emits them
(torch, the reference form, Triton); the Ascend C backend has no such output and
the call runs on the next backend (logged).
"""
import logging

import pytest
import torch

from qwen_ops import ops
from qwen_ops.ops.gdn import reference_chunk
from tests.tolerances import KERNEL_VS_REFERENCE, tol


def _inputs(lengths, hk=2, hv=4, dk=16, dv=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    t = sum(lengths)
    q = torch.randn(1, t, hk, dk, generator=gen)
    k = torch.randn(1, t, hk, dk, generator=gen)
    v = torch.randn(1, t, hv, dv, generator=gen)
    g = -torch.rand(1, t, hv, generator=gen) * 0.2
    beta = torch.rand(1, t, hv, generator=gen)
    cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0).tolist()), dtype=torch.int32)
    pool = torch.randn(len(lengths) + 2, hv, dk, dv, generator=gen)
    return q, k, v, g, beta, cu, pool


def _prefix_state(q, k, v, g, beta, cu, pool, rows, r, tokens):
    """The golden: a separate call over sequence r's first ``tokens`` tokens, from its pool row."""
    start = int(cu[r])
    span = slice(start, start + tokens)
    _, final = ops.chunk_gated_delta_rule(q[:, span], k[:, span], v[:, span], g[:, span], beta[:, span],
                                          initial_state=pool[rows[r]][None].clone(), output_final_state=True,
                                          use_qk_l2norm_in_kernel=True, backend="torch")
    return final[0]


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_checkpoints_are_the_states_after_64j_tokens(backend):
    lengths = [150, 64, 200]
    q, k, v, g, beta, cu, pool = _inputs(lengths)
    rows = torch.tensor([3, 0, 1], dtype=torch.int32)
    boundaries = torch.tensor([[0, 2], [2, 3], [0, 1], [1, 1], [2, 1]], dtype=torch.int32)
    plain_pool = pool.clone()
    o_plain, final_plain = ops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=plain_pool,
                                                      output_final_state=True, cu_seqlens=cu,
                                                      ssm_state_indices=rows, use_qk_l2norm_in_kernel=True,
                                                      backend=backend)
    ck_pool = pool.clone()
    o, final, checkpoints = ops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=ck_pool,
                                                       output_final_state=True, cu_seqlens=cu,
                                                       ssm_state_indices=rows, use_qk_l2norm_in_kernel=True,
                                                       backend=backend, checkpoint_boundaries=boundaries)
    assert checkpoints.shape == (5, 4, 16, 8) and checkpoints.dtype == torch.float32
    # Asking for checkpoints changes nothing else.
    torch.testing.assert_close(o, o_plain, **tol(KERNEL_VS_REFERENCE, torch.float32))
    torch.testing.assert_close(final, final_plain, **tol(KERNEL_VS_REFERENCE, torch.float32))
    torch.testing.assert_close(ck_pool, plain_pool, **tol(KERNEL_VS_REFERENCE, torch.float32))
    for p, (r, j) in enumerate(boundaries.tolist()):
        want = _prefix_state(q, k, v, g, beta, cu, pool, rows, r, 64 * j)
        torch.testing.assert_close(checkpoints[p], want, **tol(KERNEL_VS_REFERENCE, torch.float32))
    # A boundary at the sequence's end is its final state.
    torch.testing.assert_close(checkpoints[3], final[1], **tol(KERNEL_VS_REFERENCE, torch.float32))


def test_the_reference_form_emits_them_too():
    q, k, v, g, beta, cu, pool = _inputs([130])
    boundaries = torch.tensor([[0, 2], [0, 1]])
    o, _, checkpoints = reference_chunk.chunk_gated_delta_rule(
        q=q, k=k, v=v, g=g, beta=beta, scale=16 ** -0.5, initial_state=None, output_final_state=False,
        cu_seqlens=cu, ssm_state_indices=None, has_initial_state=None, use_qk_l2norm_in_kernel=False,
        checkpoint_boundaries=boundaries)
    o_plain, _ = reference_chunk.chunk_gated_delta_rule(
        q=q, k=k, v=v, g=g, beta=beta, scale=16 ** -0.5, initial_state=None, output_final_state=False,
        cu_seqlens=cu, ssm_state_indices=None, has_initial_state=None, use_qk_l2norm_in_kernel=False)
    torch.testing.assert_close(o, o_plain, atol=0, rtol=0)  # the same 64-token chunks, the same arithmetic
    for p, j in enumerate((2, 1)):
        _, want = reference_chunk.chunk_gated_delta_rule(
            q=q[:, :64 * j], k=k[:, :64 * j], v=v[:, :64 * j], g=g[:, :64 * j], beta=beta[:, :64 * j],
            scale=16 ** -0.5, initial_state=None, output_final_state=True, cu_seqlens=None,
            ssm_state_indices=None, has_initial_state=None, use_qk_l2norm_in_kernel=False)
        torch.testing.assert_close(checkpoints[p], want[0], atol=0, rtol=0)


@pytest.mark.parametrize("rows, match", [
    ([[0, 0]], "chunk boundaries j >= 1"),
    ([[0, 3]], "chunk boundaries j >= 1"),  # 192 > 150 tokens
    ([[2, 1]], "sequences outside"),
    ([[0, 1], [0, 1]], "repeats"),
])
def test_bad_boundaries_are_refused(rows, match):
    q, k, v, g, beta, cu, _ = _inputs([150])
    with pytest.raises(ValueError, match=f"chunk_gated_delta_rule: .*{match}"):
        ops.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, backend="torch",
                                   checkpoint_boundaries=torch.tensor(rows))


def test_the_recurrent_op_refuses_them():
    q, k, v, g, beta, cu, _ = _inputs([10])
    with pytest.raises(TypeError):
        ops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, checkpoint_boundaries=torch.zeros(0, 2))


def test_ascendc_falls_back_with_a_reason(caplog):
    pytest.importorskip("qwen_ops._C")
    from qwen_ops.ops._backend import _can_serve
    if _can_serve("ascendc", torch.device("cpu")) is not None:
        pytest.skip(f"ascendc backend unavailable: {_can_serve('ascendc', torch.device('cpu'))}")
    q, k, v, g, beta, cu, _ = _inputs([128])
    with caplog.at_level(logging.WARNING, logger="qwen_ops.ops"):
        _, _, checkpoints = ops.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, backend="ascendc",
                                                       checkpoint_boundaries=torch.tensor([[0, 1]]))
    assert "instead of 'ascendc'" in caplog.text and "no output for chunk-boundary states" in caplog.text
    _, want = ops.chunk_gated_delta_rule(q[:, :64], k[:, :64], v[:, :64], g[:, :64], beta[:, :64],
                                         output_final_state=True, backend="torch")
    torch.testing.assert_close(checkpoints[0], want[0], **tol(KERNEL_VS_REFERENCE, torch.float32))
