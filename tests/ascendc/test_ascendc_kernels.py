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


# Odd and mixed head dims (the chunk kernel's list): the state rows are DataCopyPad'ed, no tile of 16 is needed.
RECURRENT_DIMS = [(8, 8), (24, 40), (40, 24), (72, 136), (136, 72), (256, 24)]


@pytest.mark.parametrize("dk,dv", RECURRENT_DIMS, ids=[f"dk{a}_dv{b}" for a, b in RECURRENT_DIMS])
def test_gdn_odd_head_dims_with_state_pool_and_gqa(gen, dk, dv):
    lens = [1, 3, 1]
    args = _gdn_inputs(gen, b=1, t=sum(lens), hk=1, hv=2, dk=dk, dv=dv, dtype=torch.bfloat16)
    args.update(scale=dk ** -0.5, initial_state=torch.randn(4, 2, dk, dv, generator=gen) * 0.1,
                output_final_state=True, cu_seqlens=offsets(lens), ssm_state_indices=torch.tensor([3, -1, 0]),
                has_initial_state=torch.tensor([True, True, False]), use_qk_l2norm_in_kernel=True)
    res = _gdn_both(args, num_cores=3)
    _gdn_check(res, torch.bfloat16)
    assert not res["ascendc"][0][0, 1:4].any(), "padding outputs zeros"
    assert torch.equal(res["ascendc"][2][1], args["initial_state"][1]), "untouched pool rows stay as they were"


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


# ----------------------------------------------------------------------------- causal_conv1d_fn

def _conv_fn_case(gen, *, lens, channels, width, dtype=torch.float32, state_dtype=None, weight_dtype=None,
                  bias_dtype=None, with_bias=True, slots=None, has_init=None, index_dtype=torch.int32, pool=None):
    n = len(lens)
    qsl = torch.tensor([0] + torch.tensor(lens, dtype=torch.int64).cumsum(0).tolist(), dtype=index_dtype)
    pool = pool or n + 3
    slots = list(range(n)) if slots is None else slots
    has_init = [True] * n if has_init is None else has_init
    return dict(
        x=torch.randn(sum(lens), channels, generator=gen).to(dtype),
        weight=torch.randn(channels, width, generator=gen).to(weight_dtype or dtype),
        bias=torch.randn(channels, generator=gen).to(bias_dtype or dtype) if with_bias else None,
        conv_states=torch.randn(pool, width - 1, channels, generator=gen).to(state_dtype or dtype),
        query_start_loc=qsl, cache_indices=torch.tensor(slots, dtype=index_dtype),
        has_initial_state=torch.tensor(has_init, dtype=torch.bool))


def _conv_fn_both(case, activation="silu", **config):
    res = {}
    for backend in ("torch", "ascendc"):
        states = case["conv_states"].clone()
        with ab.launch_config(**config):
            out = ops.causal_conv1d_fn(case["x"], case["weight"], case["bias"], conv_states=states,
                                       query_start_loc=case["query_start_loc"], cache_indices=case["cache_indices"],
                                       has_initial_state=case["has_initial_state"], activation=activation,
                                       backend=backend)
            info = ab.last_launch() if backend == "ascendc" else None
        res[backend] = (out, states, info)
    return res


def _conv_fn_check(res, dtype):
    (o_t, s_t, _), (o_a, s_a, info) = res["torch"], res["ascendc"]
    assert o_a.dtype == o_t.dtype
    _close(o_a, o_t, dtype)
    # The state is a copy of inputs (saved ones or x), converted to the pool's dtype once: exact.
    assert torch.equal(s_a, s_t), "conv states differ from the reference"
    return info


# Lengths around K-1 = 3: shorter than the state (keeps saved inputs), empty
# (state carried over, or zeroed without an initial state), exactly K-1, longer.
EDGE_LENS = [5, 0, 1, 3, 2, 0, 9]
EDGE_SLOTS = [3, 1, -1, 0, 6, 8, 4]          # -1: padding, nothing read or written
EDGE_INIT = [True, False, True, True, False, True, False]


@pytest.mark.parametrize("dtype", FLOATS, ids=_dt)
@pytest.mark.parametrize("width,channels", [(4, 64), (2, 100), (3, 33)])
@pytest.mark.parametrize("activation,with_bias", [("silu", True), (None, False)])
def test_causal_conv1d_fn(gen, dtype, width, channels, activation, with_bias):
    case = _conv_fn_case(gen, lens=EDGE_LENS, channels=channels, width=width, dtype=dtype, with_bias=with_bias,
                         slots=EDGE_SLOTS, has_init=EDGE_INIT, pool=9)
    res = _conv_fn_both(case, activation)
    _conv_fn_check(res, dtype)
    states = res["ascendc"][1]
    assert not states[1].any(), "an empty sequence without an initial state leaves a zero state"
    for untouched in (2, 5, 7):  # pool rows no sequence owns
        assert torch.equal(states[untouched], case["conv_states"][untouched])


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=_dt)
def test_causal_conv1d_fn_mixed_dtypes(gen, index_dtype):
    # half inputs, float32 states, bfloat16 weights, float32 bias; int64 metadata.
    case = _conv_fn_case(gen, lens=[4, 1, 7], channels=96, width=4, dtype=torch.float16,
                         state_dtype=torch.float32, weight_dtype=torch.bfloat16, bias_dtype=torch.float32,
                         slots=[2, 0, 4], has_init=[True, True, False], index_dtype=index_dtype)
    _conv_fn_check(_conv_fn_both(case), torch.float16)


def test_causal_conv1d_fn_rounds_into_a_narrower_state(gen):
    # float32 inputs saved into a float16 pool: rounded to nearest even, as torch's .to().
    case = _conv_fn_case(gen, lens=[6, 2], channels=64, width=4, state_dtype=torch.float16, slots=[1, 0])
    _conv_fn_check(_conv_fn_both(case), torch.float32)


def test_causal_conv1d_fn_long_sequences_tiles_chunks_and_cores(gen):
    # Several channel tiles (1000 channels in tiles of 64), several token chunks
    # per sequence (64 tokens each) and more units than cores.
    lens = [300, 17, 0, 129, 64, 1, 250]
    case = _conv_fn_case(gen, lens=lens, channels=1000, width=4, slots=[7, 1, 3, -1, 0, 5, 2],
                         has_init=[True, False, True, True, False, True, True], pool=8)
    info = _conv_fn_check(_conv_fn_both(case, num_cores=5, max_tile=64), torch.float32)
    tiling = info["tiling"]
    assert info["block_dim"] == 5
    assert tiling["tile_channels"] == 64 and tiling["num_tiles"] == 16 and tiling["tile_tokens"] == 64
    assert tiling["units_per_core"] >= 2


def test_causal_conv1d_fn_only_empty_sequences(gen):
    # No tokens at all: states are carried over, or zeroed where there is no initial state.
    case = _conv_fn_case(gen, lens=[0, 0, 0], channels=40, width=4, slots=[2, 0, -1], has_init=[True, False, False])
    res = _conv_fn_both(case)
    _conv_fn_check(res, torch.float32)
    assert res["ascendc"][0].shape == (0, 40)
    assert not res["ascendc"][1][0].any() and torch.equal(res["ascendc"][1][2], case["conv_states"][2])


def test_causal_conv1d_fn_fills_unified_buffer(gen):
    case = _conv_fn_case(gen, lens=[400, 300], channels=2048, width=4, slots=[1, 0])
    info = _conv_fn_check(_conv_fn_both(case, num_cores=2), torch.float32)
    assert info["tiling"]["num_tiles"] > 1 and info["tiling"]["tile_tokens"] < 400
    assert 0.9 * UB_USABLE < info["ub_high_water"] <= UB_USABLE
    assert info["ub_high_water"] == info["tiling"]["ub_planned"], "the planner mirrors the kernel's buffers"


# ----------------------------------------------------------------------------- fused_gdn_gating

def _gating_both(A_log, a, b, dt_bias, **config):
    want = ops.fused_gdn_gating(A_log, a, b, dt_bias, backend="torch")
    with ab.launch_config(**config):
        got = ops.fused_gdn_gating(A_log, a, b, dt_bias, backend="ascendc")
        info = ab.last_launch()
    assert got[0].dtype == torch.float32 and got[1].dtype == b.dtype
    return got, want, info


def _gating_inputs(gen, t, hv, dtype, param_dtype=torch.float32, spread=3.0):
    return (torch.randn(hv, generator=gen).to(param_dtype), (torch.randn(t, hv, generator=gen) * spread).to(dtype),
            (torch.randn(t, hv, generator=gen) * spread).to(dtype), torch.randn(hv, generator=gen).to(param_dtype))


@pytest.mark.parametrize("dtype", FLOATS, ids=_dt)
@pytest.mark.parametrize("param_dtype", [torch.float32, torch.bfloat16], ids=_dt)
@pytest.mark.parametrize("t,hv", [(1, 4), (37, 6), (5, 32)])
def test_fused_gdn_gating(gen, dtype, param_dtype, t, hv):
    got, want, _ = _gating_both(*_gating_inputs(gen, t, hv, dtype, param_dtype))
    # g is float32 from float32 arithmetic whatever the inputs: float32 tolerance.
    _close(got[0], want[0], torch.float32)
    _close(got[1], want[1], dtype)


def test_fused_gdn_gating_extremes(gen):
    """softplus above torch's threshold of 20 (x itself), far below it (exp(x) ~ 0), and
    sigmoid saturating at both ends: no inf or NaN, and the reference's values."""
    hv = 8
    A_log = torch.linspace(-2.0, 2.0, hv)
    dt_bias = torch.zeros(hv)
    a = torch.tensor([[-100.0, -30.0, -5.0, 0.0, 5.0, 19.9, 20.1, 100.0]]).repeat(3, 1)
    b = torch.tensor([[-100.0, -30.0, -5.0, 0.0, 5.0, 20.0, 30.0, 100.0]]).repeat(3, 1)
    got, want, _ = _gating_both(A_log, a, b, dt_bias)
    assert torch.isfinite(got[0]).all() and torch.isfinite(got[1]).all()
    # |softplus difference| <= 1.2e-7 where exp(x) is below a float32 ulp of 1 (kernel doc).
    torch.testing.assert_close(got[0], want[0], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(got[1], want[1], atol=1e-7, rtol=1e-6)
    assert torch.equal(got[0][:, 6:], want[0][:, 6:]), "above the threshold softplus(x) is x"


def test_fused_gdn_gating_long_tiles_and_cores(gen):
    got, want, info = _gating_both(*_gating_inputs(gen, 3000, 16, torch.bfloat16), num_cores=5, max_tile=64)
    _close(got[0], want[0], torch.float32)
    _close(got[1], want[1], torch.bfloat16)
    assert info["block_dim"] == 5 and info["tiling"]["tile_rows"] == 64 and info["tiling"]["units_per_core"] >= 2


def test_fused_gdn_gating_no_tokens(gen):
    got, _, _ = _gating_both(*_gating_inputs(gen, 0, 4, torch.float16))
    assert got[0].shape == (0, 4) and got[1].shape == (0, 4)


def test_fused_gdn_gating_fills_unified_buffer(gen):
    got, want, info = _gating_both(*_gating_inputs(gen, 4000, 64, torch.float32), num_cores=1)
    _close(got[0], want[0], torch.float32)
    assert info["tiling"]["num_tiles"] > 1
    assert 0.95 * UB_USABLE < info["ub_high_water"] <= UB_USABLE
    assert info["ub_high_water"] == info["tiling"]["ub_planned"], "the planner mirrors the kernel's buffers"


# ----------------------------------------------------------------------------- bad input, as on the other backends

def _bad_conv_fn(gen):
    case = _conv_fn_case(gen, lens=[2, 3], channels=6, width=4, slots=[2, 0], has_init=[True, False], pool=3)
    return ops.causal_conv1d_fn, dict(case, activation="silu")


def _bad_gating(gen):
    A_log, a, b, dt_bias = _gating_inputs(gen, 4, 3, torch.float32)
    return ops.fused_gdn_gating, dict(A_log=A_log, a=a, b=b, dt_bias=dt_bias)


def _set(name, make):
    def mutate(call):
        call[name] = make(call)
    return mutate


BAD_NEW_OPS = [
    (_bad_conv_fn, "x int32", _set("x", lambda c: c["x"].to(torch.int32))),
    (_bad_conv_fn, "weight channels", _set("weight", lambda c: c["weight"][:-1])),
    (_bad_conv_fn, "bias shape", _set("bias", lambda c: c["bias"][:-1])),
    (_bad_conv_fn, "conv_states width", _set("conv_states", lambda c: c["conv_states"][:, 1:])),
    (_bad_conv_fn, "conv_states not contiguous",
     _set("conv_states", lambda c: torch.stack([c["conv_states"]] * 2, dim=-1)[..., 0])),
    (_bad_conv_fn, "activation relu", _set("activation", lambda c: "relu")),
    (_bad_conv_fn, "query_start_loc not ending at T", _set("query_start_loc", lambda c: torch.tensor([0, 2, 4]))),
    (_bad_conv_fn, "query_start_loc decreasing", _set("query_start_loc", lambda c: torch.tensor([0, 6, 5]))),
    (_bad_conv_fn, "cache_indices out of range", _set("cache_indices", lambda c: torch.tensor([3, 0]))),
    (_bad_conv_fn, "duplicate cache_indices", _set("cache_indices", lambda c: torch.tensor([2, 2]))),
    (_bad_conv_fn, "cache_indices -2", _set("cache_indices", lambda c: torch.tensor([2, -2]))),
    (_bad_conv_fn, "has_initial_state length", _set("has_initial_state", lambda c: c["has_initial_state"][:1])),
    (_bad_gating, "a int32", _set("a", lambda c: c["a"].to(torch.int32))),
    (_bad_gating, "b shape", _set("b", lambda c: c["b"][:, :2])),
    (_bad_gating, "A_log shape", _set("A_log", lambda c: c["A_log"][:2])),
    (_bad_gating, "dt_bias on another device", _set("dt_bias", lambda c: c["dt_bias"].to("meta"))),
]


@pytest.mark.parametrize("build,what,mutate", BAD_NEW_OPS, ids=[f"{b.__name__[5:]}:{w}" for b, w, _ in BAD_NEW_OPS])
def test_new_ops_reject_bad_input_as_the_torch_backend_does(gen, build, what, mutate):
    errors = {}
    for backend in ("torch", "ascendc"):
        fn, call = build(torch.Generator().manual_seed(7))
        mutate(call)
        before = {k: v.clone() for k, v in call.items() if isinstance(v, torch.Tensor) and not v.is_meta}
        with pytest.raises((ValueError, TypeError)) as raised:
            fn(**call, backend=backend)
        errors[backend] = (type(raised.value), str(raised.value))
        for name, old in before.items():
            assert torch.equal(call[name], old), f"{what}: '{name}' was written on backend {backend}"
    assert errors["ascendc"] == errors["torch"]


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
