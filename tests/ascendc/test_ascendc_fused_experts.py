"""fused_experts on the mixed AIC+AIV Ascend C kernel, through ``backend="ascendc"``.

On machines without CANN the kernel runs through the stand-in's mixed launch
(``ops_ascendc/sim``): one AIC and two AIVs per group on their own threads,
every GM hand-off between them checked for a missing cross-core flag or
barrier, every cube call for its shapes and layouts, every unified-buffer
access for its alignment and extent.

Routing patterns: random (K distinct experts per token), experts with no
token (NaN weights that must never be read), one expert taking every pair,
top-k 1, 2 and 8, repeated ids in a row, one decode token (the cube's m = 1
padded to 2), no tokens; odd hidden/intermediate sizes (k padding through
Nd2Nz, ragged column tiles, 2-byte rows that straddle words); tile caps that
force many units, column tiles and k steps; and sizes the planner refuses.

Tolerance: ``KERNEL_VS_REFERENCE`` for the dtype. Both sides multiply in the
inputs' dtype with float32 accumulation, round the SwiGLU product to that
dtype, scale by the weight and add the experts in ascending expert order in
float32; they differ only in the matmuls' summation order (the cube adds in k
order, torch in blocks), a float32 rounding, which a 16-bit SwiGLU product
can turn into one unit in its last place: inside the 16-bit tolerances.
"""
from __future__ import annotations

import os
import sys

import pytest
import torch

import qwen_ops.ops as ops
from qwen_ops.ops import _backend
from tolerances import KERNEL_VS_REFERENCE, tol

if "ascendc" not in _backend.available_backends():  # pragma: no cover - the extension is part of the build
    pytest.skip("qwen_ops._C was built without the Ascend C kernels", allow_module_level=True)

from qwen_ops.ops import ascendc_backend as ab  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ops"))
from moe_cases import draw, experts_without_tokens  # noqa: E402

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
FLOATS = (F32, F16, BF16)


def _dt(dtype):
    return str(dtype).replace("torch.", "")


def compare(call, dtype, **config):
    """The kernel against the torch reference; the inputs are left as they were. Returns the launch info."""
    before = {k: v.clone() for k, v in call.items()}
    ref = ops.fused_experts(**call, backend="torch")
    with ab.launch_config(**config):
        out = ops.fused_experts(**call, backend="ascendc")
        info = ab.last_launch()
    assert out.dtype == dtype and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref.float(), **tol(KERNEL_VS_REFERENCE, dtype))
    for k, v in before.items():
        assert torch.equal(call[k], v) or (k in ("w13", "w2") and torch.equal(call[k].isnan(), v.isnan())), k
    return info


@pytest.mark.parametrize("dtype", FLOATS, ids=_dt)
def test_random_routing(gen, dtype):
    info = compare(draw(gen, 37, 48, 40, 6, 3, dtype), dtype)
    assert info["tiling"]["units"] >= 6 and info["ub_high_water"] == info["tiling"]["ub_planned"]


@pytest.mark.parametrize("dtype", FLOATS, ids=_dt)
@pytest.mark.parametrize("hidden,inter", [(33, 19), (17, 40), (72, 3)])
def test_odd_hidden_and_intermediate_sizes(gen, dtype, hidden, inter):
    """k padding of both GEMMs (H and I not multiples of the 8/16-element blocks), ragged column tiles."""
    compare(draw(gen, 21, hidden, inter, 5, 2, dtype), dtype, max_tile=16)


@pytest.mark.parametrize("top_k,experts", [(1, 4), (2, 8), (8, 8)])
def test_top_k(gen, top_k, experts):
    compare(draw(gen, 19, 32, 24, experts, top_k), F32)


def test_experts_without_tokens_are_never_read(gen):
    info = compare(experts_without_tokens(gen), F32)
    assert info["tiling"]["units"] == 3  # one unit per expert with pairs, none for the others


@pytest.mark.parametrize("dtype", (F32, BF16), ids=_dt)
def test_one_expert_takes_every_pair(gen, dtype):
    """70 pairs on expert 2: with 16-row units, five units of one expert on three groups, the last partial."""
    info = compare(draw(gen, 70, 32, 24, 4, 1, dtype, ids=torch.full((70, 1), 2)), dtype, num_cores=3, max_tile=16)
    assert (info["tiling"]["units"], info["tiling"]["m_tile"], info["tiling"]["used_cores"]) == (5, 16, 3)


def test_repeated_expert_in_a_row_counts_per_slot(gen):
    ids = torch.tensor([[1, 1], [0, 1], [1, 0], [0, 0], [1, 1]])
    compare(draw(gen, 5, 24, 16, 2, 2, ids=ids), F32)


@pytest.mark.parametrize("dtype", FLOATS, ids=_dt)
def test_one_decode_token(gen, dtype):
    """A unit of one row: the cube's m = 1 (GEMV mode) is padded to 2, and the tile to 16 rows."""
    info = compare(draw(gen, 1, 48, 40, 8, 2, dtype), dtype)
    assert info["tiling"]["m_tile"] == 16 and info["tiling"]["units"] == 2


def test_no_tokens():
    out = ops.fused_experts(torch.zeros(0, 16), torch.zeros(2, 8, 16), torch.zeros(2, 16, 4), torch.zeros(0, 1),
                            torch.zeros(0, 1, dtype=torch.long), backend="ascendc")
    assert out.shape == (0, 16)


def test_tiles_follow_the_routing_counts(gen):
    """The unit rows are planned from the busiest expert: 16 for a decode batch, 128 for a long prefill."""
    decode = draw(gen, 4, 32, 24, 8, 2)
    compare(decode, F32)
    assert ab.last_launch()["tiling"]["m_tile"] == 16
    prefill = draw(gen, 300, 32, 24, 4, 2)
    info = compare(prefill, F32)
    assert info["tiling"]["m_tile"] == 128 and info["tiling"]["units"] >= 4


@pytest.mark.parametrize("dtype", (F32, F16), ids=_dt)
def test_many_column_and_k_tiles(gen, dtype):
    """Caps of 16 force 16-column output tiles, 16-wide k steps (accumulated in L0C) and 16-float vector steps."""
    info = compare(draw(gen, 40, 100, 52, 6, 3, dtype), dtype, max_tile=16, num_cores=2)
    t = info["tiling"]
    assert (t["n_tile"], t["k_tile"], t["col_tile"]) == (16, 16, 16) and t["used_cores"] == 2


def test_result_does_not_depend_on_the_core_count(gen):
    """No atomics: each token's sum runs in ascending expert order on one AIV, whoever computed its rows."""
    call = draw(gen, 50, 40, 24, 7, 3, F16)
    outs = []
    for cores in (1, 3, 8):
        with ab.launch_config(num_cores=cores, max_tile=16):
            outs.append(ops.fused_experts(**call, backend="ascendc"))
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


def test_strided_inputs(gen):
    call = draw(gen, 12, 32, 24, 4, 2)
    ref = ops.fused_experts(**call, backend="torch")
    wide = torch.stack([call["hidden_states"], call["hidden_states"]], dim=-1)[..., 0]
    out = ops.fused_experts(wide, call["w13"], call["w2"], call["topk_weights"], call["topk_ids"], backend="ascendc")
    torch.testing.assert_close(out, ref, **tol(KERNEL_VS_REFERENCE, F32))


def test_expert_id_out_of_range_raises_and_leaves_inputs(gen):
    call = draw(gen, 6, 16, 8, 3, 2)
    call["topk_ids"][4, 1] = 3
    before = {k: v.clone() for k, v in call.items()}
    with pytest.raises(ValueError, match=r"fused_experts: argument 'topk_ids' has expert id 3 outside \[0, 3\)"):
        ops.fused_experts(**call, backend="ascendc")
    assert all(torch.equal(call[k], v) for k, v in before.items())


def test_wrong_shape_raises(gen):
    call = draw(gen, 6, 16, 8, 3, 2)
    call["w2"] = call["w2"][:, :, :-1]
    with pytest.raises(ValueError, match=r"fused_experts: argument 'w2'.*\[E, H, I\] = \[3, 16, 8\]"):
        ops.fused_experts(**call, backend="ascendc")


def test_sizes_the_kernel_cannot_hold_are_refused(gen):
    """A hidden size whose 16 rows do not fit L1, and a unified buffer that holds no vector step."""
    call = draw(gen, 3, 16, 8, 2, 1)
    big = dict(call, hidden_states=torch.zeros(3, 9000), w13=torch.zeros(2, 16, 9000), w2=torch.zeros(2, 9000, 8))
    with pytest.raises(ValueError, match=r"fused_experts: backend 'ascendc' keeps 16 rows .* max\(H, I\) = 9000"):
        ops.fused_experts(**big, backend="ascendc")
    with ab.launch_config(ub_bytes=96), pytest.raises(ValueError, match=r"fused_experts: a vector step of 8 floats"):
        ops.fused_experts(**call, backend="ascendc")
