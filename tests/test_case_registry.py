"""The case registry (``qwen_ops.testing``) builds what its docstrings promise.

Every backend's tests, the benchmarks and the device check trust these
builders for the premises of their cases (distinct blocks, -1 past a
request's blocks, padding where asked, bounded GDN inputs), so the premises
are checked here once.
"""
import torch

from qwen_ops import ops
from qwen_ops.testing import (SHAPES, Draw, block_tables, cache_write_call, conv_fn_call, decode_call, gdn_inputs,
                              mixed_call, offsets, paged_cache, pool_indices, slot_mapping)
from qwen_ops.testing.poisoned_memory import poisoned_allocations


def test_offsets():
    assert offsets([3, 0, 2]).tolist() == [0, 3, 3, 5] and offsets([3]).dtype == torch.int32
    assert offsets([]).tolist() == [0]


def test_block_tables_hold_distinct_blocks_and_minus_one_past_them(gen):
    lengths, bs = [37, 0, 16, 1], 16
    tables, nb = block_tables(Draw(gen), lengths, bs, spare_blocks=3)
    need = [3, 0, 1, 1]
    assert nb == sum(need) + 3 and tables.dtype == torch.int32 and tables.shape == (4, max(need) + 1)
    used = torch.cat([tables[r, :n] for r, n in enumerate(need)])
    assert used.unique().numel() == used.numel() and int(used.min()) >= 0 and int(used.max()) < nb
    for r, n in enumerate(need):
        assert bool((tables[r, n:] == -1).all())
    assert block_tables(Draw(gen), [5], 4, width=6)[0].shape == (1, 6)


def test_slot_mapping_and_pool_indices(gen):
    slots = slot_mapping(Draw(gen), 40, 9, padding=slice(1, None, 3))
    assert slots.tolist()[1::3] == [-1, -1, -1]
    real = slots[slots >= 0]
    assert real.numel() == 6 and real.unique().numel() == 6 and int(real.max()) < 40
    idx = pool_indices(Draw(gen), 5, 11, padding=2, dtype=torch.int64)
    assert idx.dtype == torch.int64 and int(idx[2]) == -1
    assert idx[idx >= 0].unique().numel() == 4 and int(idx.max()) < 11


def test_paged_caches(gen):
    calibrated = paged_cache(Draw(gen), 3, 2, 16, 64, torch.int8)
    assert calibrated["key_cache"].dtype == torch.int8 and calibrated["k_scale"].shape == (2, 64)
    # Calibrated: each channel's absmax maps to +-127.
    peak = calibrated["key_cache"].abs().amax(dim=(0, 2)).float()
    assert bool((peak == 127).all())
    garbage = paged_cache(Draw(gen), 3, 2, 16, 64, torch.int8, int8="random")
    assert int(garbage["key_cache"].min()) == -128 and int(garbage["key_cache"].max()) == 127
    assert 0.004 <= float(garbage["v_scale"].min()) and float(garbage["v_scale"].max()) < 0.016
    floats = paged_cache(Draw(gen), 3, 2, 16, 64, torch.float16)
    assert floats["value_cache"].dtype == torch.float16 and floats["k_scale"] is None


def test_op_calls_are_valid_calls(gen):
    """Each call builder's output is accepted by its op (the ops validate every argument)."""
    draw = Draw(gen)
    write = cache_write_call(draw, tokens=6, hkv=2, head_dim=64, block_size=16, num_blocks=2, dtype=torch.float32,
                             cache_dtype=torch.int8, padding=0)
    ops.reshape_and_cache(**write)
    assert ops.paged_decode_attention(**decode_call(draw, torch.float32, torch.int8, 4, 2, 64, 16, [20, 0])).shape == (
        2, 4, 64)
    mixed = mixed_call(draw, torch.float32, torch.float32, 4, 2, 64, 16, [1, 5], [9, 7], 1)
    assert mixed["block_tables"].shape[0] == 2 and ops.mixed_attention(**mixed).shape == (6, 4, 64)
    conv = conv_fn_call(draw, [3, 2], 8, 4, torch.float32, pool_rows=3, cache_indices=[2, -1],
                        has_initial_state=[True, False])
    assert ops.causal_conv1d_fn(**conv).shape == (5, 8)


def test_gdn_inputs_keep_the_recurrence_bounded(gen):
    q, k, v, g, beta = gdn_inputs(Draw(gen), batch=2, tokens=7, hk=1, hv=2, dk=16, dv=8, dtype=torch.float16)
    assert q.dtype == k.dtype == v.dtype == beta.dtype == torch.float16 and g.dtype == torch.float32
    torch.testing.assert_close(k.float().norm(dim=-1), torch.ones(2, 7, 1), atol=2e-3, rtol=0)
    assert bool((g < 0).all()) and bool(((beta > 0) & (beta < 1)).all())
    _, k_raw, *_ = gdn_inputs(Draw(gen), batch=1, tokens=4, hk=1, hv=1, dk=16, dv=8, l2norm_in_kernel=True)
    assert not torch.allclose(k_raw.norm(dim=-1), torch.ones(1, 4, 1))  # left for the kernel to normalise


def test_qwen35_shapes_are_transformers_defaults():
    from transformers import Qwen3_5TextConfig

    config, shapes = Qwen3_5TextConfig(), SHAPES["qwen3.5"]
    assert (shapes.hq, shapes.hkv, shapes.head_dim) == (config.num_attention_heads, config.num_key_value_heads,
                                                          config.head_dim)
    assert (shapes.hk, shapes.hv, shapes.dk, shapes.dv) == (config.linear_num_key_heads, config.linear_num_value_heads,
                                                            config.linear_key_head_dim, config.linear_value_head_dim)
    assert shapes.conv_width == config.linear_conv_kernel_dim and shapes.conv_channels == 8192


def test_poisoned_allocations_fill_fresh_memory():
    with poisoned_allocations():
        fresh = torch.empty(1 << 18)  # 1 MiB: otherwise zero pages straight from the OS
    assert bool((fresh == fresh[0]).all()) and float(fresh[0]) > 1e38
