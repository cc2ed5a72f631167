"""The Ascend C kernels against the torch references, through ``qwen_ops.ops``.

On machines without CANN the kernels run on CPU tensors through the stand-in
(``ops_ascendc/sim``), which enforces the device's unified-buffer size,
alignment and queue rules. Each kernel is tested on the edge cases of the
foundation (sizes trimmed for CI), on a stress case that needs several tiles
per core and several cores, and on a case whose tiling fills the unified
buffer close to its 184 KB limit.
"""
from __future__ import annotations

import pytest
import torch

import qwen_ops.ops as ops
from qwen_ops.ops import _backend
from qwen_ops.testing import Draw, cache_write_call, conv_update_call, decode_call, gdn_inputs, offsets

from tolerances import KERNEL_VS_REFERENCE, tol

if "ascendc" not in _backend.available_backends():  # pragma: no cover - the extension is part of the build
    pytest.skip("qwen_ops._C was built without the Ascend C kernels", allow_module_level=True)

from qwen_ops.ops import ascendc_backend as ab  # noqa: E402

UB_USABLE = 184 * 1024
FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _dt(dtype):
    return str(dtype).replace("torch.", "")


def _close(got, want, dtype):
    torch.testing.assert_close(got.float(), want.float(), **tol(KERNEL_VS_REFERENCE, dtype))


# ----------------------------------------------------------------------------- reshape_and_cache

def _cache_case(gen, *, t, hkv, d, nb, bs, dtype, int8, slot_dtype=torch.int64, pad=True):
    """(key, value, key_cache, value_cache, slots, k_scale, v_scale): zeroed caches, every third slot padding."""
    call = cache_write_call(Draw(gen), tokens=t, hkv=hkv, head_dim=d, block_size=bs, num_blocks=nb, dtype=dtype,
                            cache_dtype=torch.int8 if int8 else dtype, cache_fill="zeros", slot_dtype=slot_dtype,
                            padding=slice(1, None, 3) if pad and t > 1 else None, scale_range=(0.004, 0.024))
    return tuple(call[name] for name in ("key", "value", "key_cache", "value_cache", "slot_mapping", "k_scale",
                                         "v_scale"))


def _run_cache(key, value, kc, vc, slots, ks, vs):
    out = {}
    for backend in ("torch", "ascendc"):
        k2, v2 = kc.clone(), vc.clone()
        ops.reshape_and_cache(key, value, k2, v2, slots, ks, vs, backend=backend)
        out[backend] = (k2, v2)
    return out


@pytest.mark.parametrize("dtype", FLOATS, ids=_dt)
@pytest.mark.parametrize("int8", [False, True], ids=["float-cache", "int8-cache"])
@pytest.mark.parametrize("d,slot_dtype", [(64, torch.int32), (128, torch.int64), (40, torch.int64)])
def test_reshape_and_cache(gen, dtype, int8, d, slot_dtype):
    case = _cache_case(gen, t=9, hkv=2, d=d, nb=6, bs=16, dtype=dtype, int8=int8, slot_dtype=slot_dtype)
    out = _run_cache(*case)
    # Copies and int8 quantization are exact: same values, same round-half-to-even.
    assert torch.equal(out["ascendc"][0], out["torch"][0])
    assert torch.equal(out["ascendc"][1], out["torch"][1])


def test_reshape_and_cache_rounds_half_to_even_and_saturates(gen):
    hkv, d = 2, 64
    scale = torch.full((hkv, d), 0.25)
    q = torch.arange(-128, 128, 0.5)  # 512 values, every other one a tie
    q[:5] = -300.0  # past int8's range
    q[-5:] = 300.0
    key = (q * 0.25).reshape(4, hkv, d).float()
    slots = torch.tensor([0, 5, 17, 31])
    kc = torch.zeros(2, hkv, 16, d, dtype=torch.int8)
    out = _run_cache(key, key.clone(), kc, kc.clone(), slots, scale, scale)
    assert torch.equal(out["ascendc"][0], out["torch"][0])
    assert int(out["ascendc"][0].max()) == 127 and int(out["ascendc"][0].min()) == -128


@pytest.mark.parametrize("dtype", FLOATS, ids=_dt)
@pytest.mark.parametrize("d", [64, 40], ids=["d64", "d40-padded-rows"])
def test_reshape_and_cache_int8_non_finite_values(gen, dtype, d):
    """NaN -> 0, +-inf and the dtype's largest finite values -> 127 / -128, as the
    reference defines; the kernel replaces NaN explicitly before its clamp and
    cast (module doc of the kernel), so this also covers that rare scalar pass.
    D = 40 leaves padding columns in the unified-buffer rows."""
    big = torch.finfo(dtype).max
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), big, -big, -float("nan")]).to(dtype)
    key, value, kc, vc, slots, ks, vs = _cache_case(gen, t=5, hkv=2, d=d, nb=2, bs=16, dtype=dtype, int8=True,
                                                    pad=False)
    key[0, 0, :6] = special
    key[3, 1, d - 6:] = special
    value[2, 1, :6] = special
    out = _run_cache(key, value, kc, vc, slots, ks, vs)
    assert torch.equal(out["ascendc"][0], out["torch"][0])
    assert torch.equal(out["ascendc"][1], out["torch"][1])
    blocks, rows = slots.long() // 16, slots.long() % 16
    want = [0, 127, -128, 127, -128, 0]
    assert out["ascendc"][0][blocks[0], 0, rows[0], :6].tolist() == want
    assert out["ascendc"][0][blocks[3], 1, rows[3], d - 6:].tolist() == want
    assert out["ascendc"][1][blocks[2], 1, rows[2], :6].tolist() == want


def test_reshape_and_cache_nothing_to_write(gen):
    case = list(_cache_case(gen, t=4, hkv=2, d=64, nb=2, bs=16, dtype=torch.float16, int8=True))
    case[4] = torch.full((4,), -1)
    out = _run_cache(*case)
    assert not out["ascendc"][0].any() and not out["ascendc"][1].any()


def test_reshape_and_cache_stress_tiles_and_cores(gen):
    # 64 heads of 256: the head tiles do not fit one unified buffer at a time.
    case = _cache_case(gen, t=37, hkv=64, d=256, nb=8, bs=16, dtype=torch.bfloat16, int8=True)
    with ab.launch_config(num_cores=5):
        out = _run_cache(*case)
        info = ab.last_launch()
    assert torch.equal(out["ascendc"][0], out["torch"][0])
    assert torch.equal(out["ascendc"][1], out["torch"][1])
    tiling = info["tiling"]
    assert info["block_dim"] == 5 and tiling["used_cores"] == 5
    assert tiling["heads_per_tile"] < 64 and tiling["tokens_per_core"] > 1
    assert info["ub_high_water"] <= UB_USABLE
    assert info["ub_high_water"] > 0.9 * UB_USABLE  # planned close to the limit


# ----------------------------------------------------------------------------- paged_decode_attention

def _attn_case(gen, *, n, hq, hkv, d, bs, dtype, int8, seq_lens):
    """(query, key_cache, value_cache, block_tables, seq_lens, k_scale, v_scale) for ``n`` requests:
    garbage-filled caches with 3 spare blocks, -1 past each request's blocks."""
    assert n == len(seq_lens)
    call = decode_call(Draw(gen), dtype, torch.int8 if int8 else dtype, hq, hkv, d, bs, seq_lens, spare_blocks=3,
                       int8="random")
    return tuple(call[name] for name in ("query", "key_cache", "value_cache", "block_tables", "seq_lens", "k_scale",
                                         "v_scale"))


def _attend(case, **config):
    query, kc, vc, tables, lens, ks, vs = case
    want = ops.paged_decode_attention(query, kc, vc, tables, lens, k_scale=ks, v_scale=vs, backend="torch")
    with ab.launch_config(**config):
        got = ops.paged_decode_attention(query, kc, vc, tables, lens, k_scale=ks, v_scale=vs, backend="ascendc")
        info = ab.last_launch()
    return got, want, info


@pytest.mark.parametrize("dtype", FLOATS, ids=_dt)
@pytest.mark.parametrize("int8", [False, True], ids=["half-cache", "int8-cache"])
@pytest.mark.parametrize("d,bs,group", [(64, 16, 4), (128, 64, 1), (256, 128, 2)])
def test_paged_decode_attention(gen, dtype, int8, d, bs, group):
    # lengths: empty row, one token, exactly one block, a partial block after several
    case = _attn_case(gen, n=4, hq=2 * group, hkv=2, d=d, bs=bs, dtype=dtype, int8=int8,
                      seq_lens=[0, 1, bs, 2 * bs + 5])
    got, want, _ = _attend(case)
    assert got.dtype == dtype
    assert not got[0].any(), "a row with no tokens outputs zeros"
    _close(got, want, dtype)


def test_paged_decode_attention_stress_tiles_and_cores(gen):
    case = _attn_case(gen, n=7, hq=8, hkv=2, d=128, bs=16, dtype=torch.float16, int8=True,
                      seq_lens=[300, 17, 0, 129, 64, 250, 33])  # 14 units: 3 per core on 5 cores
    got, want, info = _attend(case, num_cores=5, max_tile=8)
    _close(got, want, torch.float16)
    assert info["block_dim"] == 5 and info["tiling"]["units_per_core"] >= 2
    assert info["tiling"]["tile_tokens"] == 8  # 2 tiles per block, dozens per unit


def test_paged_decode_attention_fills_unified_buffer(gen):
    # float32 cache, D = 256, blocks of 128, 8 query heads per KV head: the tile
    # planner takes as many tokens per tile as fit in the 184 KB.
    case = _attn_case(gen, n=2, hq=16, hkv=2, d=256, bs=128, dtype=torch.float32, int8=False,
                      seq_lens=[200, 77])
    got, want, info = _attend(case, num_cores=3)
    _close(got, want, torch.float32)
    assert 0.95 * UB_USABLE < info["ub_high_water"] <= UB_USABLE
    assert info["tiling"]["tile_tokens"] < 128


# ----------------------------------------------------------------------------- fused_recurrent_gated_delta_rule

def _gdn_inputs(gen, *, b, t, hk, hv, dk, dv, dtype):
    q, k, v, g, beta = gdn_inputs(Draw(gen), batch=b, tokens=t, hk=hk, hv=hv, dk=dk, dv=dv, dtype=dtype)
    return dict(q=q, k=k, v=v, g=g, beta=beta)


def _gdn_both(args, **config):
    res = {}
    for backend in ("torch", "ascendc"):
        kw = {name: (x.clone() if isinstance(x, torch.Tensor) else x) for name, x in args.items()}
        with ab.launch_config(**config):
            o, final = ops.fused_recurrent_gated_delta_rule(**kw, backend=backend)
            info = ab.last_launch() if backend == "ascendc" else None
        res[backend] = (o, final, kw.get("initial_state"), info)
    return res


def _gdn_check(res, dtype):
    (o_t, f_t, s_t, _), (o_a, f_a, s_a, info) = res["torch"], res["ascendc"]
    assert o_a.dtype == o_t.dtype
    _close(o_a, o_t, dtype)
    if f_t is not None:
        _close(f_a, f_t, torch.float32 if dtype == torch.float32 else dtype)
    if s_t is not None:
        _close(s_a, s_t, torch.float32 if dtype == torch.float32 else dtype)
    return info


@pytest.mark.parametrize("dtype", FLOATS, ids=_dt)
@pytest.mark.parametrize("l2norm", [False, True], ids=["plain", "l2norm"])
def test_gdn_decode_with_state_pool(gen, dtype, l2norm):
    # The engine's decode step: N sequences of one token, state pool, padding, fresh rows.
    n, hk, hv, dk, dv = 5, 2, 4, 64, 64
    args = _gdn_inputs(gen, b=1, t=n, hk=hk, hv=hv, dk=dk, dv=dv, dtype=dtype)
    args.update(scale=dk ** -0.5, initial_state=torch.randn(8, hv, dk, dv, generator=gen) * 0.1,
                output_final_state=True, cu_seqlens=torch.arange(n + 1, dtype=torch.int32),
                ssm_state_indices=torch.tensor([6, -1, 0, 3, 7], dtype=torch.int32),
                has_initial_state=torch.tensor([True, True, False, True, True]), use_qk_l2norm_in_kernel=l2norm)
    res = _gdn_both(args)
    _gdn_check(res, dtype)
    assert not res["ascendc"][0][0, 1].any(), "padding outputs zeros"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=_dt)
def test_gdn_varlen_prefill(gen, dtype):
    lens = [3, 0, 7, 1]
    cu = offsets(lens).long()
    args = _gdn_inputs(gen, b=1, t=sum(lens), hk=1, hv=2, dk=32, dv=48, dtype=dtype)
    args.update(scale=0.3, initial_state=torch.randn(len(lens), 2, 32, 48, generator=gen) * 0.1,
                output_final_state=True, cu_seqlens=cu, use_qk_l2norm_in_kernel=True)
    _gdn_check(_gdn_both(args), dtype)


def test_gdn_batch_without_state(gen):
    args = _gdn_inputs(gen, b=3, t=4, hk=2, hv=2, dk=16, dv=24, dtype=torch.bfloat16)
    args.update(scale=0.25, output_final_state=False)
    res = _gdn_both(args)
    _gdn_check(res, torch.bfloat16)
    assert res["ascendc"][1] is None


def test_gdn_stress_tiles_and_cores(gen):
    n, hk, hv, dk, dv = 6, 2, 4, 128, 128
    lens = [1, 2, 1, 3, 1, 1]
    cu = offsets(lens)
    args = _gdn_inputs(gen, b=1, t=sum(lens), hk=hk, hv=hv, dk=dk, dv=dv, dtype=torch.float16)
    args.update(scale=dk ** -0.5, initial_state=torch.randn(9, hv, dk, dv, generator=gen) * 0.05,
                output_final_state=True, cu_seqlens=cu,
                ssm_state_indices=torch.tensor([4, 0, 8, -1, 2, 5]), use_qk_l2norm_in_kernel=True)
    info = _gdn_check(_gdn_both(args, num_cores=7, max_tile=32), torch.float16)
    assert info["block_dim"] == 7
    assert info["tiling"]["num_dv_tiles"] == 4 and info["tiling"]["units_per_core"] >= 2


def test_gdn_fills_unified_buffer(gen):
    # Dk = Dv = 256: a whole float32 state (256 KB) cannot fit; the planner takes
    # the widest column tile that does.
    args = _gdn_inputs(gen, b=1, t=2, hk=1, hv=1, dk=256, dv=256, dtype=torch.float32)
    args.update(scale=0.0625, initial_state=torch.randn(3, 1, 256, 256, generator=gen) * 0.05,
                output_final_state=True, cu_seqlens=torch.tensor([0, 1, 2]),
                ssm_state_indices=torch.tensor([2, 0]))
    info = _gdn_check(_gdn_both(args, num_cores=2), torch.float32)
    assert info["tiling"]["num_dv_tiles"] == 2
    assert 0.9 * UB_USABLE < info["ub_high_water"] <= UB_USABLE


# ----------------------------------------------------------------------------- causal_conv1d_update

def _conv_args(call):
    return call["x"], call["conv_states"], call["weight"], call["bias"], call["cache_indices"]


def _conv_both(x, states, weight, bias, idx, activation, **config):
    res = {}
    for backend in ("torch", "ascendc"):
        s = states.clone()
        with ab.launch_config(**config):
            out = ops.causal_conv1d_update(x, s, weight, bias, cache_indices=idx, activation=activation,
                                           backend=backend)
            info = ab.last_launch() if backend == "ascendc" else None
        res[backend] = (out, s, info)
    return res


@pytest.mark.parametrize("dtype", FLOATS, ids=_dt)
@pytest.mark.parametrize("width,channels", [(4, 64), (2, 100), (3, 33)])
@pytest.mark.parametrize("activation,with_bias", [("silu", True), (None, False)])
def test_causal_conv1d_update(gen, dtype, width, channels, activation, with_bias):
    call = conv_update_call(Draw(gen), channels, width, dtype, pool_rows=7, cache_indices=[3, -1, 0, 6, 2],
                            bias=with_bias)
    res = _conv_both(*_conv_args(call), activation)
    _close(res["ascendc"][0], res["torch"][0], dtype)
    assert not res["ascendc"][0][1].any(), "padding outputs zeros"
    assert torch.equal(res["ascendc"][1], res["torch"][1]), "state shift is exact"


def test_causal_conv1d_update_mixed_dtypes(gen):
    x = torch.randn(3, 96, generator=gen).to(torch.float16)
    states = torch.randn(4, 3, 96, generator=gen)  # float32 states, half inputs
    weight = torch.randn(96, 4, generator=gen).to(torch.bfloat16)
    bias = torch.randn(96, generator=gen)
    res = _conv_both(x, states, weight, bias, torch.tensor([1, 3, 0]), "silu")
    _close(res["ascendc"][0], res["torch"][0], torch.float16)
    assert torch.equal(res["ascendc"][1], res["torch"][1])


def test_causal_conv1d_update_stress_tiles_and_cores(gen):
    call = conv_update_call(Draw(gen), 1000, 4, torch.float32, pool_rows=8, cache_indices=[7, 1, -1, 0, 5, 2],
                            index_dtype=torch.int64)
    res = _conv_both(*_conv_args(call), "silu", num_cores=7, max_tile=128)
    _close(res["ascendc"][0], res["torch"][0], torch.float32)
    assert torch.equal(res["ascendc"][1], res["torch"][1])
    info = res["ascendc"][2]
    assert info["block_dim"] == 7 and info["tiling"]["num_tiles"] == 8 and info["tiling"]["units_per_core"] >= 2


def test_causal_conv1d_update_fills_unified_buffer(gen):
    call = conv_update_call(Draw(gen), 4096, 4, torch.float32, pool_rows=3, cache_indices=[2, 0], bias=False,
                            index_dtype=torch.int64)
    res = _conv_both(*_conv_args(call), "silu", num_cores=2)
    _close(res["ascendc"][0], res["torch"][0], torch.float32)
    assert torch.equal(res["ascendc"][1], res["torch"][1])
    info = res["ascendc"][2]
    assert info["tiling"]["num_tiles"] > 1
    assert 0.9 * UB_USABLE < info["ub_high_water"] <= UB_USABLE


# ----------------------------------------------------------------------------- failures surface as errors

def test_kernel_fault_raises_runtime_error(gen):
    """A tiling the device could not hold stops the kernel; Python gets RuntimeError, not a crash."""
    from qwen_ops import _C

    key, value, kc, vc, slots, ks, vs = _cache_case(gen, t=4, hkv=64, d=256, nb=2, bs=16, dtype=torch.float32,
                                                    int8=True)
    # ub_bytes above what the device has: the planner obeys it, the stand-in's TPipe refuses.
    with pytest.raises(RuntimeError, match=r"TPipe::InitBuffer: unified buffer overflow"):
        _C.ascendc_reshape_and_cache(key, value, kc, vc, slots, ks, vs, ub_bytes=1 << 20, num_cores=1)


def test_binding_checks_inputs(gen):
    from qwen_ops import _C

    key, value, kc, vc, slots, ks, vs = _cache_case(gen, t=4, hkv=2, d=64, nb=2, bs=16, dtype=torch.float32,
                                                    int8=False)
    with pytest.raises(RuntimeError, match="contiguous"):
        _C.ascendc_reshape_and_cache(key.transpose(0, 1), value, kc, vc, slots)
    with pytest.raises(RuntimeError, match="dtype|share"):
        _C.ascendc_reshape_and_cache(key.half(), value, kc, vc, slots)
