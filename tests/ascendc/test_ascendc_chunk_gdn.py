"""chunk_gated_delta_rule on the mixed AIC+AIV Ascend C kernel, through ``backend="ascendc"``.

On machines without CANN the kernel runs through the stand-in's mixed launch
(``ops_ascendc/sim``): one AIC and two AIVs per group on their own threads,
every GM hand-off between them checked for a missing cross-core flag.

Tolerance: ``KERNEL_VS_REFERENCE`` for the inputs' dtype (float32 1e-4,
float16 2e-3, bfloat16 2e-2, absolute and relative). The kernel keeps the
state and every product in float32 (cube float x float -> float, sums in k
order) and the reference computes in float32 too, in torch's summation order:
the difference is float32 rounding grown through the 64-row inverse and
carried across chunks (measured about 7e-7 on 200 tokens, Dk = Dv = 64), far
inside 1e-4; float16/bfloat16 outputs are rounded once from float32 on both
sides (by the Fixpipe here), so they differ by at most a unit in their last
place, which their tolerance covers.
"""
from __future__ import annotations

import pytest
import torch

import qwen_ops.ops as ops
from qwen_ops.ops import _backend

from tolerances import KERNEL_VS_REFERENCE, tol

if "ascendc" not in _backend.available_backends():  # pragma: no cover - the extension is part of the build
    pytest.skip("qwen_ops._C was built without the Ascend C kernels", allow_module_level=True)

from qwen_ops.ops import ascendc_backend as ab  # noqa: E402

FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _dt(dtype):
    return str(dtype).replace("torch.", "")


def _close(got, want, dtype):
    torch.testing.assert_close(got.float(), want.float(), **tol(KERNEL_VS_REFERENCE, dtype))


def _inputs(gen, *, b, t, hk, hv, dk, dv, dtype):
    q = torch.randn(b, t, hk, dk, generator=gen).to(dtype)
    k = torch.nn.functional.normalize(torch.randn(b, t, hk, dk, generator=gen), dim=-1).to(dtype)
    v = torch.randn(b, t, hv, dv, generator=gen).to(dtype)
    g = -torch.rand(b, t, hv, generator=gen) * 0.3
    beta = torch.rand(b, t, hv, generator=gen).to(dtype)
    return dict(q=q, k=k, v=v, g=g, beta=beta)


def _both(args, **config):
    res = {}
    for backend in ("torch", "ascendc"):
        kw = {name: (x.clone() if isinstance(x, torch.Tensor) else x) for name, x in args.items()}
        with ab.launch_config(**config):
            o, final = ops.chunk_gated_delta_rule(**kw, backend=backend)
            info = ab.last_launch() if backend == "ascendc" else None
        res[backend] = (o, final, kw.get("initial_state"), info)
    return res


def _check(res, dtype):
    (o_t, f_t, s_t, _), (o_a, f_a, s_a, info) = res["torch"], res["ascendc"]
    assert o_a.dtype == o_t.dtype and o_a.shape == o_t.shape
    _close(o_a, o_t, dtype)
    state_tol = torch.float32 if dtype == torch.float32 else dtype
    if f_t is not None:
        _close(f_a, f_t, state_tol)
    else:
        assert f_a is None
    if s_t is not None:
        _close(s_a, s_t, state_tol)
    return info


@pytest.mark.parametrize("dtype", FLOATS, ids=_dt)
@pytest.mark.parametrize("l2norm", [False, True], ids=["plain", "l2norm"])
def test_varlen_chunks_ragged_pool_padding(gen, dtype, l2norm):
    # Several chunks, ragged last chunks, an empty sequence, pool rows with -1 padding and fresh rows.
    lens = [130, 64, 0, 7, 65]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
    hk, hv, dk, dv = 1, 2, 32, 32
    args = _inputs(gen, b=1, t=sum(lens), hk=hk, hv=hv, dk=dk, dv=dv, dtype=dtype)
    args.update(scale=dk ** -0.5, initial_state=torch.randn(7, hv, dk, dv, generator=gen) * 0.1,
                output_final_state=True, cu_seqlens=cu, ssm_state_indices=torch.tensor([5, -1, 0, 3, 6]),
                has_initial_state=torch.tensor([True, True, True, False, True]), use_qk_l2norm_in_kernel=l2norm)
    res = _both(args, num_cores=3)
    _check(res, dtype)
    o_a, f_a = res["ascendc"][0], res["ascendc"][1]
    assert not o_a[0, 130:194].any() and not f_a[1].any(), "padding: zero outputs and final state"
    assert torch.equal(res["ascendc"][2][1], args["initial_state"][1]), "untouched pool rows stay as they were"


@pytest.mark.parametrize("group", [1, 2, 4, 8])
def test_gqa_ratios_with_plain_initial_state(gen, group):
    hk = 2 if group < 8 else 1
    args = _inputs(gen, b=2, t=70, hk=hk, hv=hk * group, dk=16, dv=32, dtype=torch.float32)
    init = torch.randn(2, hk * group, 16, 32, generator=gen) * 0.1
    args.update(scale=0.25, initial_state=init, output_final_state=True)
    res = _both(args)
    _check(res, torch.float32)
    assert torch.equal(res["ascendc"][2], init), "a plain initial_state is only read"


def test_qwen_head_dims_long_sequence(gen):
    # Qwen3.5's Dk = Dv = 128, four chunks and a ragged fifth, more units than cores.
    args = _inputs(gen, b=1, t=300, hk=1, hv=3, dk=128, dv=128, dtype=torch.bfloat16)
    args.update(scale=128 ** -0.5, initial_state=torch.randn(1, 3, 128, 128, generator=gen) * 0.05,
                output_final_state=True, use_qk_l2norm_in_kernel=True)
    info = _check(_both(args, num_cores=2), torch.bfloat16)
    assert info["block_dim"] == 2
    assert info["ub_high_water"] == info["tiling"]["ub_planned"], "the planner mirrors the AIV's buffers"


def test_without_state_and_without_final(gen):
    args = _inputs(gen, b=3, t=20, hk=2, hv=2, dk=64, dv=16, dtype=torch.float16)
    args.update(scale=0.125, output_final_state=False)
    res = _both(args)
    _check(res, torch.float16)
    assert res["ascendc"][1] is None


# Head dims the Qwen3.5 family and odd shapes use: Dk, Dv padded to the cube tile of 16 inside the kernel.
# float32 checks the padding to 1e-4; bfloat16 rows of 24/72 elements are not whole 32-byte blocks in GM.
ODD_DIMS = [(8, 8, torch.float32), (24, 24, torch.bfloat16), (40, 72, torch.float32), (72, 40, torch.bfloat16),
            (24, 136, torch.bfloat16), (136, 128, torch.float32), (256, 24, torch.float32)]


@pytest.mark.parametrize("dk,dv,dtype", ODD_DIMS, ids=[f"dk{a}_dv{b}_{_dt(c)}" for a, b, c in ODD_DIMS])
def test_odd_head_dims_with_state_pool_and_gqa(gen, dk, dv, dtype):
    # Grouped key heads (Hv = 2 Hk), a pool with -1 padding and a fresh row, a ragged second chunk.
    lens = [70, 5, 9]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
    args = _inputs(gen, b=1, t=sum(lens), hk=1, hv=2, dk=dk, dv=dv, dtype=dtype)
    args.update(scale=dk ** -0.5, initial_state=torch.randn(5, 2, dk, dv, generator=gen) * 0.1,
                output_final_state=True, cu_seqlens=cu, ssm_state_indices=torch.tensor([4, -1, 1]),
                has_initial_state=torch.tensor([True, True, False]), use_qk_l2norm_in_kernel=True)
    res = _both(args, num_cores=2)
    info = _check(res, dtype)
    tiling = info["tiling"]
    assert (tiling["dk_pad"], tiling["dv_pad"]) == (-(-dk // 16) * 16, -(-dv // 16) * 16)
    assert info["ub_high_water"] == tiling["ub_planned"], "the planner mirrors the AIV's buffers"
    assert not res["ascendc"][0][0, 70:75].any() and not res["ascendc"][1][1].any(), "padding: zeros"
    assert torch.equal(res["ascendc"][2][0], args["initial_state"][0]), "untouched pool rows stay as they were"


def test_plain_initial_state_at_dk_dv_256(gen):
    # The largest head dims: 32-row AIV tiles (the unified buffer) and 64-column cube tiles (L0B).
    args = _inputs(gen, b=1, t=66, hk=1, hv=1, dk=256, dv=256, dtype=torch.float32)
    init = torch.randn(1, 1, 256, 256, generator=gen) * 0.05
    args.update(scale=256 ** -0.5, initial_state=init, output_final_state=True, use_qk_l2norm_in_kernel=True)
    res = _both(args)
    info = _check(res, torch.float32)
    assert (info["tiling"]["row_tile"], info["tiling"]["col_tile"]) == (32, 64)
    assert info["ub_high_water"] == info["tiling"]["ub_planned"] <= 184 * 1024
    assert torch.equal(res["ascendc"][2], init), "a plain initial_state is only read"


@pytest.mark.parametrize("dtype", FLOATS, ids=_dt)
def test_small_tiles_forced_on_odd_dims(gen, dtype):
    # A tile cap splits the AIV's rows (8 at a time) and the cube's columns (16 at a time) at small head dims.
    args = _inputs(gen, b=2, t=67, hk=2, hv=4, dk=40, dv=24, dtype=dtype)
    args.update(scale=0.2, initial_state=torch.randn(2, 4, 40, 24, generator=gen) * 0.1, output_final_state=True)
    info = _check(_both(args, max_tile=8), dtype)
    assert (info["tiling"]["row_tile"], info["tiling"]["col_tile"]) == (8, 16)


def test_head_dims_past_the_limit_are_refused(gen):
    for dk, dv in ((264, 16), (16, 257)):
        args = _inputs(gen, b=1, t=4, hk=1, hv=1, dk=dk, dv=dv, dtype=torch.float32)
        with pytest.raises(_backend.BackendError, match=rf"up to 256 .*Dk = {dk}, Dv = {dv}"):
            ops.chunk_gated_delta_rule(**args, backend="ascendc")


def _bad_call(gen):
    args = _inputs(gen, b=1, t=8, hk=1, hv=2, dk=16, dv=16, dtype=torch.float32)
    args.update(initial_state=torch.randn(3, 2, 16, 16, generator=gen), output_final_state=True,
                cu_seqlens=torch.tensor([0, 3, 8], dtype=torch.int32), ssm_state_indices=torch.tensor([2, 0]),
                has_initial_state=torch.tensor([True, False]))
    return args


def _set(name, make):
    def mutate(call):
        call[name] = make(call)
    return mutate


BAD = [
    ("q int32", _set("q", lambda c: c["q"].to(torch.int32))),
    ("k shape", _set("k", lambda c: c["k"][..., :8])),
    ("v float16", _set("v", lambda c: c["v"].half())),
    ("Hv not a multiple of Hk", lambda c: c.update(q=torch.zeros(1, 8, 2, 16), k=torch.zeros(1, 8, 2, 16),
                                                   v=torch.zeros(1, 8, 3, 16))),
    ("g bfloat16", _set("g", lambda c: c["g"].bfloat16())),
    ("beta shape", _set("beta", lambda c: c["beta"][..., :1])),
    ("cu_seqlens not ending at T", _set("cu_seqlens", lambda c: torch.tensor([0, 3, 7], dtype=torch.int32))),
    ("cu_seqlens decreasing", _set("cu_seqlens", lambda c: torch.tensor([0, 9, 8], dtype=torch.int32))),
    ("ssm_state_indices out of range", _set("ssm_state_indices", lambda c: torch.tensor([3, 0]))),
    ("ssm_state_indices -2", _set("ssm_state_indices", lambda c: torch.tensor([2, -2]))),
    ("pool head dim", _set("initial_state", lambda c: c["initial_state"][..., :8])),
    ("pool not contiguous", _set("initial_state", lambda c: torch.stack([c["initial_state"]] * 2, dim=-1)[..., 0])),
    ("has_initial_state int32", _set("has_initial_state", lambda c: c["has_initial_state"].int())),
]


@pytest.mark.parametrize("what,mutate", BAD, ids=[w for w, _ in BAD])
def test_bad_input_rejected_as_on_torch_and_nothing_written(gen, what, mutate):
    errors = {}
    for backend in ("torch", "ascendc"):
        call = _bad_call(torch.Generator().manual_seed(3))
        mutate(call)
        before = {k: v.clone() for k, v in call.items() if isinstance(v, torch.Tensor)}
        with pytest.raises((ValueError, TypeError)) as raised:
            ops.chunk_gated_delta_rule(**call, backend=backend)
        errors[backend] = (type(raised.value), str(raised.value))
        for name, old in before.items():
            assert torch.equal(call[name], old), f"{what}: '{name}' was written on backend {backend}"
    assert errors["ascendc"] == errors["torch"]
