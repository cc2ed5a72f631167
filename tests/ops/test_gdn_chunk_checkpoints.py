"""chunk_gated_delta_rule's checkpoint_boundaries: the state after 64 * j tokens, emitted at the kernel's chunk ends.

The meaning: the state a separate call over the first 64 * j tokens of the sequence
returns as its final state. Every backend that computes chunk states emits them: torch
(and the reference form), Triton (under its interpreter here) and Ascend C (the mixed
kernel, through the CPU stand-in here: AIV 0 writes a requested state, unpadded, while it
updates the state after the whole chunk that ends on the boundary).

Tolerance: ``KERNEL_VS_REFERENCE`` for float32 (1e-4) against the torch backend, the
golden here. Every backend keeps the state in float32; they differ only in summation order
(Triton's dots; the Ascend C kernel's cube products and its forward-substitution inverse),
float32 rounding grown over a few chunks: measured at most 2e-6 on these inputs (Triton),
under 1e-6 for Ascend C. On Ascend C, asking for checkpoints is compared exactly with not
asking: it adds writes, no arithmetic.
"""
import pytest
import torch

from qwen_ops import ops
from qwen_ops.ops import _backend
from qwen_ops.ops.gdn import reference_chunk
from tests.tolerances import KERNEL_VS_REFERENCE, tol

F32 = tol(KERNEL_VS_REFERENCE, torch.float32)


def _backend_param(name):
    reason = _backend._can_serve(name, torch.device("cpu"))
    return pytest.param(name, marks=pytest.mark.skipif(reason is not None, reason=f"{name}: {reason}"))


BACKENDS = [_backend_param(b) for b in ("torch", "triton", "ascendc")]


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


@pytest.mark.parametrize("backend", BACKENDS)
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
    torch.testing.assert_close(o, o_plain, **F32)
    torch.testing.assert_close(final, final_plain, **F32)
    torch.testing.assert_close(ck_pool, plain_pool, **F32)
    for p, (r, j) in enumerate(boundaries.tolist()):
        want = _prefix_state(q, k, v, g, beta, cu, pool, rows, r, 64 * j)
        torch.testing.assert_close(checkpoints[p], want, **F32)
    # A boundary at the sequence's end is its final state.
    torch.testing.assert_close(checkpoints[3], final[1], **F32)


# The Ascend C kernel pads Dk and Dv to multiples of 16 (up to 256) inside: checkpoints come out at the
# caller's Dk x Dv. 24 and 40 are padded, 128 is Qwen3.5's, 256 the largest the kernel serves.
ASCENDC_DIMS = [(24, 24), (24, 40), (128, 128), (256, 24)]


@pytest.mark.parametrize("dk,dv", ASCENDC_DIMS, ids=[f"dk{a}_dv{b}" for a, b in ASCENDC_DIMS])
def test_ascendc_checkpoints_from_a_pool_equal_the_reference(dk, dv):
    from qwen_ops.ops import ascendc_backend as ab
    if _backend._can_serve("ascendc", torch.device("cpu")) is not None:
        pytest.skip("ascendc backend unavailable")
    # Sequences starting from a cached pool row, from zeros (has_initial_state False), empty, padding (-1),
    # with boundaries in several sequences, at a sequence's end, and given out of order.
    lengths = [130, 64, 0, 192, 70]
    q, k, v, g, beta, cu, pool = _inputs(lengths, hk=1, hv=2, dk=dk, dv=dv, seed=dk + dv)
    rows = torch.tensor([5, 0, 2, -1, 3])
    has_initial = torch.tensor([True, False, True, True, True])
    boundaries = torch.tensor([[3, 3], [0, 2], [4, 1], [1, 1], [0, 1], [3, 1]])
    padding_rows = [0, 5]  # sequence 3's

    def run(backend, **extra):
        state = pool.clone()
        result = ops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=state, output_final_state=True,
                                            cu_seqlens=cu, ssm_state_indices=rows, has_initial_state=has_initial,
                                            use_qk_l2norm_in_kernel=True, backend=backend, **extra)
        return (*result, state)

    o, final, checkpoints, state = run("ascendc", checkpoint_boundaries=boundaries)
    launch = ab.last_launch()
    assert launch["kernel"] == "chunk_gated_delta_rule" and launch["tiling"]["num_checkpoints"] == 6
    assert launch["ub_high_water"] == launch["tiling"]["ub_planned"], "checkpoints take no unified buffer of their own"
    assert checkpoints.shape == (6, 2, dk, dv) and checkpoints.dtype == torch.float32
    assert not checkpoints[padding_rows].any(), "a padding sequence's checkpoints are zeros"
    want = run("torch", checkpoint_boundaries=boundaries)
    for got, expected in zip((o, final, checkpoints, state), want):
        torch.testing.assert_close(got, expected, **F32)
    # The same launch without checkpoints: bit for bit the same outputs, final states and pool.
    for got, plain in zip((o, final, state), run("ascendc")):
        assert torch.equal(got, plain)


@pytest.mark.parametrize("form", ["dense_initial_state", "no_initial_state"])
def test_ascendc_checkpoints_without_a_pool_in_small_tiles(form):
    """Without a pool: dense initial states (read only) or zeros; B = 2 sequences without cu_seqlens. A tile
    cap of 8 makes the AIV write each state in 8-row pieces (Dk = 20: the third piece is 4 real rows, the
    fourth padding only) and the cube 16 columns at a time."""
    from qwen_ops.ops import ascendc_backend as ab
    if _backend._can_serve("ascendc", torch.device("cpu")) is not None:
        pytest.skip("ascendc backend unavailable")
    q, k, v, g, beta, _, _ = _inputs([130, 130], hk=2, hv=2, dk=20, dv=24, seed=5)
    q, k, v, g, beta = (x.reshape(2, 130, *x.shape[2:]) for x in (q, k, v, g, beta))
    init = torch.randn(2, 2, 20, 24, generator=torch.Generator().manual_seed(6)) if form == "dense_initial_state" \
        else None
    before = None if init is None else init.clone()
    boundaries = torch.tensor([[1, 2], [0, 1], [1, 1]], dtype=torch.int32)
    results = {}
    for backend in ("torch", "ascendc"):
        with ab.launch_config(max_tile=8):
            results[backend] = ops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=init,
                                                          output_final_state=True, use_qk_l2norm_in_kernel=True,
                                                          backend=backend, checkpoint_boundaries=boundaries)
    assert ab.last_launch()["tiling"]["row_tile"] == 8
    for got, want in zip(results["ascendc"], results["torch"]):
        torch.testing.assert_close(got, want, **F32)
    if init is not None:
        assert torch.equal(init, before), "a dense initial_state is only read"


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_checkpoints_requested(backend):
    q, k, v, g, beta, cu, pool = _inputs([150, 70])
    rows = torch.tensor([1, 3], dtype=torch.int32)
    o_plain, _ = ops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=pool.clone(), cu_seqlens=cu,
                                            ssm_state_indices=rows, backend=backend)
    o, final, checkpoints = ops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=pool.clone(), cu_seqlens=cu,
                                                       ssm_state_indices=rows, backend=backend,
                                                       checkpoint_boundaries=torch.zeros(0, 2, dtype=torch.int32))
    assert final is None and checkpoints.shape == (0, 4, 16, 8) and checkpoints.dtype == torch.float32
    assert torch.equal(o, o_plain)


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


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rows, match", [
    ([[0, 0]], "chunk boundaries j >= 1"),
    ([[0, 3]], "chunk boundaries j >= 1"),  # 192 > 150 tokens
    ([[1, 1]], "chunk boundaries j >= 1"),  # the second sequence has 40 tokens
    ([[2, 1]], "sequences outside"),
    ([[0, -1]], "chunk boundaries j >= 1"),
    ([[0, 1], [0, 1]], "repeats"),
], ids=["j0", "past_the_end", "short_sequence", "no_such_sequence", "negative_j", "repeated"])
def test_bad_boundaries_are_refused_before_anything_is_written(backend, rows, match):
    q, k, v, g, beta, cu, pool = _inputs([150, 40])
    before = pool.clone()
    with pytest.raises(ValueError, match=f"chunk_gated_delta_rule: .*{match}"):
        ops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=pool, cu_seqlens=cu,
                                   ssm_state_indices=torch.tensor([0, 1]), backend=backend,
                                   checkpoint_boundaries=torch.tensor(rows))
    assert torch.equal(pool, before), "the state pool was written"


def test_the_recurrent_op_refuses_them():
    q, k, v, g, beta, cu, _ = _inputs([10])
    with pytest.raises(TypeError):
        ops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, checkpoint_boundaries=torch.zeros(0, 2))
