"""The vectorised torch-backend forms against the references they stand in for.

``ops/gdn/vectorized_recurrent.py`` and ``ops/conv/vectorized_update.py`` are
what ``backend="torch"`` runs (so tests/ops/test_gdn_reference.py and
test_conv_reference.py check them against float64 loops through the public
ops); here they are called side by side with the readable references on the
same inputs, over every mode of the contract: state pools with padding and
fresh sequences, plain initial states, packed sequences of unequal (and zero)
length, several tokens per sequence, grouped heads, low-precision inputs.
"""
from __future__ import annotations

import pytest
import torch
from cpu_kernel_paths import ALL_ISAS, cpu_kernel_or_skip, isa_or_skip, kernel_or_torch_path
from tolerances import VECTORIZED_VS_REFERENCE, tol

from qwen_ops.ops._backend import resolve
from qwen_ops.ops.cache import reference as cache_reference
from qwen_ops.ops.cache import cpu_write_kernel, vectorized_write
from qwen_ops.ops.conv import reference as conv_reference
from qwen_ops.ops.conv import cpu_update_kernel, vectorized_fn, vectorized_update
from qwen_ops.ops.gdn import cpu_decode_kernel, reference_chunk, reference_recurrent, vectorized_chunk, vectorized_recurrent
from qwen_ops.testing import Draw, cache_write_call, conv_fn_call, conv_update_call, gdn_inputs, offsets, pool_indices, state_pool


F32 = torch.float32


def _copies(arguments: dict) -> dict:
    return {name: value.clone() if torch.is_tensor(value) else value for name, value in arguments.items()}


def _both(reference_fn, vectorized_fn, arguments: dict):
    """(reference result, its arguments after the call), (vectorised result, its arguments after the call)."""
    ref_args, vec_args = _copies(arguments), _copies(arguments)
    return (reference_fn(**ref_args), ref_args), (vectorized_fn(**vec_args), vec_args)


def _gdn_arguments(gen, *, batch, tokens, hk, hv, dtype=F32, l2norm=True, **modes) -> dict:
    draw = Draw(gen)
    q, k, v, g, beta = gdn_inputs(draw, batch=batch, tokens=tokens, hk=hk, hv=hv, dk=16, dv=8, dtype=dtype,
                                  l2norm_in_kernel=l2norm)
    arguments = dict(q=q, k=k, v=v, g=g, beta=beta, scale=16 ** -0.5, initial_state=None, output_final_state=True,
                     cu_seqlens=None, ssm_state_indices=None, has_initial_state=None,
                     use_qk_l2norm_in_kernel=l2norm)
    arguments.update(modes)
    return arguments


def _assert_gdn_match(arguments, dtype=F32):
    ((o_ref, final_ref), ref_args), ((o_vec, final_vec), vec_args) = _both(
        reference_recurrent.fused_recurrent_gated_delta_rule,
        vectorized_recurrent.fused_recurrent_gated_delta_rule, arguments)
    assert o_vec.dtype == o_ref.dtype and o_vec.shape == o_ref.shape
    torch.testing.assert_close(o_vec, o_ref, **tol(VECTORIZED_VS_REFERENCE, dtype))
    if final_ref is None:
        assert final_vec is None
    else:
        torch.testing.assert_close(final_vec, final_ref, **tol(VECTORIZED_VS_REFERENCE, F32))
    if arguments["initial_state"] is not None:  # pool rows written (or a plain state left alone) alike
        torch.testing.assert_close(vec_args["initial_state"], ref_args["initial_state"],
                                   **tol(VECTORIZED_VS_REFERENCE, F32))
    for name in ("q", "k", "v", "g", "beta"):
        assert torch.equal(vec_args[name], arguments[name]), f"{name} was modified"


@pytest.fixture(params=["kernel", "torch"])
def decode_path(request, monkeypatch):
    """Run the decode step through the C++ kernel, and again with it hidden (the torch form's path)."""
    if request.param == "kernel":
        cpu_kernel_or_skip(cpu_decode_kernel)
    else:
        monkeypatch.setattr(cpu_decode_kernel, "_kernel", lambda: None)
    return request.param


@pytest.fixture(params=["kernel", "torch"])
def conv_update_path(request, monkeypatch):
    """Run the conv update through the C++ kernel, and again with it hidden (the torch form's path)."""
    if request.param == "kernel":
        cpu_kernel_or_skip(cpu_update_kernel)
    else:
        monkeypatch.setattr(cpu_update_kernel, "_kernel", lambda: None)
    return request.param


@pytest.mark.parametrize("hk,hv", [(2, 4), (1, 3), (2, 2)])
# Without a final state is the engine's decode (the C++ kernel's case); with one, the torch form runs.
@pytest.mark.parametrize("final", [False, True])
def test_gdn_decode_step_on_pool_with_padding_and_fresh_rows(gen, hk, hv, final, decode_path):
    draw = Draw(gen)
    pool = state_pool(draw, 9, hv, 16, 8, scale=0.1)
    indices = pool_indices(draw, 6, 9, padding=[1, 4])
    _assert_gdn_match(_gdn_arguments(gen, batch=6, tokens=1, hk=hk, hv=hv, initial_state=pool,
                                     ssm_state_indices=indices, output_final_state=final,
                                     has_initial_state=torch.tensor([True, True, False, True, True, False])))


def test_gdn_several_tokens_from_plain_initial_states(gen):
    initial = state_pool(Draw(gen), 3, 4, 16, 8, scale=0.1)
    _assert_gdn_match(_gdn_arguments(gen, batch=3, tokens=5, hk=2, hv=4, initial_state=initial,
                                     has_initial_state=torch.tensor([True, False, True])))


@pytest.mark.parametrize("with_pool", [True, False])
def test_gdn_packed_sequences_of_unequal_and_zero_length(gen, with_pool):
    lengths = [3, 0, 12, 1, 5]
    modes = dict(cu_seqlens=offsets(lengths))
    if with_pool:
        draw = Draw(gen)
        modes.update(initial_state=state_pool(draw, 7, 4, 16, 8, scale=0.1),
                     ssm_state_indices=pool_indices(draw, len(lengths), 7, padding=[3]),
                     has_initial_state=torch.tensor([True, True, False, True, True]))
    _assert_gdn_match(_gdn_arguments(gen, batch=1, tokens=sum(lengths), hk=2, hv=4, **modes))


def test_gdn_no_state_no_l2norm_no_final(gen):
    _assert_gdn_match(_gdn_arguments(gen, batch=2, tokens=4, hk=1, hv=2, l2norm=False, output_final_state=False))


def test_gdn_bfloat16_inputs(gen):
    _assert_gdn_match(_gdn_arguments(gen, batch=3, tokens=2, hk=2, hv=4, dtype=torch.bfloat16),
                      dtype=torch.bfloat16)


def test_gdn_decode_kernel_takes_the_pool_decode_step(gen):
    cpu_kernel_or_skip(cpu_decode_kernel)
    draw = Draw(gen)
    arguments = _gdn_arguments(gen, batch=3, tokens=1, hk=1, hv=2, initial_state=state_pool(draw, 4, 2, 16, 8),
                               ssm_state_indices=pool_indices(draw, 3, 4), output_final_state=False)
    assert cpu_decode_kernel.decode_step(**_copies(arguments)) is not None
    arguments["output_final_state"] = True  # outside the kernel's case: the torch form runs
    assert cpu_decode_kernel.decode_step(**_copies(arguments)) is None


@pytest.mark.parametrize("isa", ALL_ISAS)
@pytest.mark.parametrize("hk,hv,dk,dv", [(2, 4, 16, 20), (1, 1, 128, 128), (1, 2, 7, 33)])
def test_gdn_decode_kernel_every_isa_gives_the_portable_bits(gen, isa, hk, hv, dk, dv):
    """The state update is built per instruction set (bindings/cpu/gdn_head_update_*.cpp) with no fused
    multiply-adds: each variant must give the portable variant's output and pool bit for bit, also where Dv
    leaves a tail past every vector width (20, 33), and write only the used pool rows."""
    isa_or_skip(isa)
    kernel = cpu_kernel_or_skip(cpu_decode_kernel)
    draw = Draw(gen)
    batch, rows = 4, 6
    q = torch.nn.functional.normalize(draw.randn(batch, hk, dk), dim=-1)
    k = torch.nn.functional.normalize(draw.randn(batch, hk, dk), dim=-1)
    v, g, beta = draw.randn(batch, hv, dv), -draw.uniform(batch, hv), draw.uniform(batch, hv)
    pool = state_pool(draw, rows, hv, dk, dv, scale=0.3)
    slots = torch.tensor([3, -1, 0, 5])
    fresh = torch.tensor([False, False, True, False])

    def run(name):
        out, states = torch.full((batch, hv, dv), float("nan")), pool.clone()
        kernel(q, k, v, g, beta, states, slots, fresh, out, name)
        return out, states

    want_out, want_pool = run("portable")
    got_out, got_pool = run(isa)
    assert torch.equal(got_out, want_out) and torch.equal(got_pool, want_pool)
    assert torch.equal(got_out[1], torch.zeros(hv, dv))  # the padding row: zero output
    untouched = [1, 2, 4]
    assert torch.equal(got_pool[untouched], pool[untouched])
    assert not torch.equal(got_pool[3], pool[3])


def test_gdn_decode_kernel_rejects_a_slot_outside_the_pool(gen):
    kernel = cpu_kernel_or_skip(cpu_decode_kernel)
    pool = torch.zeros(2, 2, 4, 4)
    before = pool.clone()
    q = torch.zeros(1, 1, 4)
    args = (q, q.clone(), torch.zeros(1, 2, 4), torch.zeros(1, 2), torch.zeros(1, 2), pool)
    with pytest.raises(RuntimeError, match="outside the pool"):
        kernel(*args, torch.tensor([2]), torch.tensor([False]), torch.empty(1, 2, 4))
    with pytest.raises(RuntimeError, match="float32"):
        kernel(q.double(), *args[1:], torch.tensor([0]), torch.tensor([False]), torch.empty(1, 2, 4))
    assert torch.equal(pool, before)


@pytest.mark.parametrize("shape", [(2, 3, 4, 4), (2, 2, 5, 4), (2, 2, 4, 3), (2, 2, 4)])
def test_gdn_decode_kernel_rejects_a_pool_of_another_head_shape(gen, shape):
    """The pool must be [S, Hv, Dk, Dv] of q's and v's heads: each dimension checked (the Python op checks it
    too, but the C++ kernel is also called directly), nothing written."""
    kernel = cpu_kernel_or_skip(cpu_decode_kernel)
    pool = torch.zeros(shape)
    before = pool.clone()
    q = torch.zeros(1, 1, 4)
    with pytest.raises(RuntimeError, match=r"pool must be \[S, Hv, Dk, Dv\]"):
        kernel(q, q.clone(), torch.zeros(1, 2, 4), torch.zeros(1, 2), torch.zeros(1, 2), pool, torch.tensor([0]),
               torch.tensor([False]), torch.empty(1, 2, 4))
    assert torch.equal(pool, before)


@pytest.mark.parametrize("group_chunks", [vectorized_chunk.GROUP_CHUNKS, 1])
def test_gdn_chunked_form_matches_reference_chunk(gen, monkeypatch, group_chunks):
    monkeypatch.setattr(vectorized_chunk, "GROUP_CHUNKS", group_chunks)
    lengths = [130, 0, 5, 200]  # several chunks, a partial last one, an empty sequence
    draw = Draw(gen)
    arguments = _gdn_arguments(gen, batch=1, tokens=sum(lengths), hk=2, hv=4, cu_seqlens=offsets(lengths),
                               initial_state=state_pool(draw, 6, 4, 16, 8, scale=0.1),
                               ssm_state_indices=pool_indices(draw, 4, 6, padding=[2]),
                               has_initial_state=torch.tensor([True, True, True, False]))
    ((o_ref, final_ref), ref_args), ((o_vec, final_vec), vec_args) = _both(
        reference_chunk.chunk_gated_delta_rule, vectorized_chunk.chunk_gated_delta_rule, arguments)
    torch.testing.assert_close(o_vec, o_ref, **tol(VECTORIZED_VS_REFERENCE, F32))
    torch.testing.assert_close(final_vec, final_ref, **tol(VECTORIZED_VS_REFERENCE, F32))
    torch.testing.assert_close(vec_args["initial_state"], ref_args["initial_state"], **tol(VECTORIZED_VS_REFERENCE, F32))


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("activation", ["silu", None])
@pytest.mark.parametrize("dtype", [F32, torch.bfloat16])
def test_conv_update_matches_reference(gen, with_bias, activation, dtype, conv_update_path):
    draw = Draw(gen)
    arguments = conv_update_call(draw, 24, 4, dtype, pool_rows=8, bias=with_bias,
                                 cache_indices=pool_indices(draw, 5, 8, padding=[2]))
    arguments["activation"] = activation
    (out_ref, ref_args), (out_vec, vec_args) = _both(conv_reference.causal_conv1d_update,
                                                     vectorized_update.causal_conv1d_update, arguments)
    torch.testing.assert_close(out_vec, out_ref, **tol(VECTORIZED_VS_REFERENCE, dtype))
    # The state shift only moves stored values: bit-identical.
    assert torch.equal(vec_args["conv_states"], ref_args["conv_states"])
    assert torch.equal(vec_args["x"], arguments["x"]) and torch.equal(vec_args["weight"], arguments["weight"])


def test_conv_update_float32_pool_for_low_precision_x(gen, conv_update_path):
    draw = Draw(gen)  # the engine's case: bf16 activations, float32 states (the kernel's path)
    arguments = conv_update_call(draw, 24, 4, torch.bfloat16, pool_rows=6, pool_dtype=F32,
                                 cache_indices=pool_indices(draw, 4, 6, padding=[0]))
    arguments["activation"] = "silu"
    (out_ref, ref_args), (out_vec, vec_args) = _both(conv_reference.causal_conv1d_update,
                                                     vectorized_update.causal_conv1d_update, arguments)
    torch.testing.assert_close(out_vec, out_ref, **tol(VECTORIZED_VS_REFERENCE, torch.bfloat16))
    assert torch.equal(vec_args["conv_states"], ref_args["conv_states"])


@pytest.mark.parametrize("width", [2, 3, 5])  # the kernel's tap loop for a width other than Qwen3.5's 4
def test_conv_update_other_widths_match_reference(gen, width, conv_update_path):
    draw = Draw(gen)
    arguments = conv_update_call(draw, 20, width, F32, pool_rows=6, bias=True,
                                 cache_indices=pool_indices(draw, 4, 6, padding=[1]))
    arguments["activation"] = "silu"
    (out_ref, ref_args), (out_vec, vec_args) = _both(conv_reference.causal_conv1d_update,
                                                     vectorized_update.causal_conv1d_update, arguments)
    torch.testing.assert_close(out_vec, out_ref, **tol(VECTORIZED_VS_REFERENCE, F32))
    assert torch.equal(vec_args["conv_states"], ref_args["conv_states"])


def test_conv_update_kernel_rejects_a_slot_outside_the_pool():
    kernel = cpu_kernel_or_skip(cpu_update_kernel)
    states = torch.zeros(2, 3, 8)
    with pytest.raises(RuntimeError, match="outside the pool"):
        kernel(torch.zeros(1, 8), states, torch.zeros(8, 4), None, torch.tensor([5]), torch.empty(1, 8))
    with pytest.raises(RuntimeError, match=r"weight must be \[C, K\] with C = 8"):
        kernel(torch.zeros(1, 8), states, torch.zeros(7, 4), None, torch.tensor([0]), torch.empty(1, 8))
    with pytest.raises(RuntimeError, match=r"conv_states must be \[S, K-1, C\] = \[S, 2, 8\]"):
        kernel(torch.zeros(1, 8), states, torch.zeros(8, 3), None, torch.tensor([0]), torch.empty(1, 8))
    assert torch.equal(states, torch.zeros(2, 3, 8))


def test_conv_update_all_padding_writes_nothing(gen, conv_update_path):
    draw = Draw(gen)
    arguments = conv_update_call(draw, 8, 4, F32, pool_rows=3, cache_indices=[-1, -1])
    arguments["activation"] = "silu"
    before = arguments["conv_states"].clone()
    out = vectorized_update.causal_conv1d_update(**arguments)
    assert torch.equal(out, torch.zeros_like(out)) and torch.equal(arguments["conv_states"], before)


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("activation", ["silu", None])
@pytest.mark.parametrize("dtype", [F32, torch.bfloat16])
def test_conv_fn_matches_reference(gen, monkeypatch, with_bias, activation, dtype):
    # Sequences of 0, 1 and 2 tokens (shorter than K-1 = 3: part of the old state is kept), padding, a fresh
    # start, and tiles smaller than the packed tokens so that a sequence boundary falls inside a tile.
    monkeypatch.setattr(vectorized_fn, "TILE_ROWS", 16)
    arguments = conv_fn_call(Draw(gen), [5, 0, 1, 2, 70, 9], 24, 4, dtype, pool_rows=8, bias=with_bias,
                             cache_indices=[3, 1, -1, 0, 5, 7], has_initial_state=[True, True, True, False, True, True])
    arguments["activation"] = activation
    (out_ref, ref_args), (out_vec, vec_args) = _both(conv_reference.causal_conv1d_fn,
                                                     vectorized_fn.causal_conv1d_fn, arguments)
    torch.testing.assert_close(out_vec, out_ref, **tol(VECTORIZED_VS_REFERENCE, dtype))
    # New states are stored inputs, moved, not computed: bit-identical (and row 2, used by nobody, untouched).
    assert torch.equal(vec_args["conv_states"], ref_args["conv_states"])
    assert torch.equal(vec_args["x"], arguments["x"]) and torch.equal(vec_args["weight"], arguments["weight"])


def test_conv_fn_no_tokens_carries_or_clears_states(gen):
    arguments = conv_fn_call(Draw(gen), [0, 0], 8, 4, F32, pool_rows=3, cache_indices=[2, 0],
                             has_initial_state=[True, False])
    arguments["activation"] = "silu"
    (out_ref, ref_args), (out_vec, vec_args) = _both(conv_reference.causal_conv1d_fn,
                                                     vectorized_fn.causal_conv1d_fn, arguments)
    assert out_vec.shape == (0, 8) and torch.equal(vec_args["conv_states"], ref_args["conv_states"])


@pytest.fixture(params=["kernel", "torch"])
def cache_write_path(request, monkeypatch):
    """Run the cache write through the C++ kernel, and again with it hidden (the torch form's path)."""
    return kernel_or_torch_path(request, monkeypatch, cpu_write_kernel)


# Quotients the INT8 write must map exactly as the reference: NaN -> 0, +-inf and out-of-range values clamped,
# and ties of the rounding (half to even, both signs), just inside and outside the clamp.
INT8_EDGE_VALUES = [float("nan"), float("inf"), -float("inf"), 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5,
                    -127.5, -128.5, 1e30, -1e30, 0.49999997]


@pytest.mark.parametrize("cache_dtype,key_dtype", [(F32, F32), (torch.bfloat16, torch.bfloat16), (torch.int8, F32),
                                                   (torch.int8, torch.bfloat16)])
@pytest.mark.parametrize("padding", [None, slice(1, None, 3)])
def test_cache_write_is_bit_identical_to_reference(gen, monkeypatch, cache_dtype, padding, key_dtype,
                                                   cache_write_path):
    monkeypatch.setattr(vectorized_write, "TILE_TOKENS", 4)  # several quantization tiles, a partial last one
    dtype = key_dtype
    arguments = cache_write_call(Draw(gen), tokens=11, hkv=2, head_dim=16, block_size=4, num_blocks=6, dtype=dtype,
                                 cache_dtype=cache_dtype, padding=padding, key_scale=3.0)
    if cache_dtype == torch.int8:  # the defined non-finite cases and the rounding's ties (scale 1 on head 0)
        arguments["k_scale"][0] = 1.0
        arguments["key"][0, 0] = torch.tensor(INT8_EDGE_VALUES, dtype=dtype)
    (_, ref_args), (_, vec_args) = _both(cache_reference.reshape_and_cache, vectorized_write.reshape_and_cache,
                                         arguments)
    for name in ("key_cache", "value_cache"):  # written slots alike, every other slot left as it was
        assert torch.equal(vec_args[name], ref_args[name])
    assert not torch.equal(vec_args["key_cache"], arguments["key_cache"])  # something was written
    assert torch.equal(torch.nan_to_num(vec_args["key"]), torch.nan_to_num(arguments["key"]))  # input intact


def test_cache_write_all_padding_writes_nothing(gen, cache_write_path):
    arguments = cache_write_call(Draw(gen), tokens=3, hkv=1, head_dim=8, block_size=4, num_blocks=2, dtype=F32,
                                 cache_dtype=torch.int8, padding=slice(None))
    before = arguments["key_cache"].clone()
    vectorized_write.reshape_and_cache(**arguments)
    assert torch.equal(arguments["key_cache"], before)


def test_torch_backend_runs_the_vectorised_forms_on_cpu():
    cpu = torch.device("cpu")
    assert resolve("fused_recurrent_gated_delta_rule", "torch", cpu) is \
        vectorized_recurrent.fused_recurrent_gated_delta_rule
    assert resolve("causal_conv1d_update", "torch", cpu) is vectorized_update.causal_conv1d_update
    assert resolve("causal_conv1d_fn", "torch", cpu) is vectorized_fn.causal_conv1d_fn
    assert resolve("reshape_and_cache", "torch", cpu) is vectorized_write.reshape_and_cache
    assert resolve("chunk_gated_delta_rule", "torch", cpu) is vectorized_chunk.chunk_gated_delta_rule


def test_cache_write_kernel_rejects_bad_input_and_writes_nothing(gen):
    kernel = cpu_kernel_or_skip(cpu_write_kernel)
    arguments = cache_write_call(Draw(gen), tokens=3, hkv=2, head_dim=8, block_size=4, num_blocks=2, dtype=F32,
                                 cache_dtype=torch.int8)
    key, value, kc, vc = (arguments[n] for n in ("key", "value", "key_cache", "value_cache"))
    ks, vs = arguments["k_scale"], arguments["v_scale"]
    before = kc.clone(), vc.clone()
    with pytest.raises(RuntimeError, match="slot 8 of token 2 is outside the cache's 8 slots"):
        kernel(key, value, kc, vc, torch.tensor([0, 1, 8]), ks, vs)
    with pytest.raises(RuntimeError, match="k_scale is required"):
        kernel(key, value, kc, vc, torch.tensor([0, 1, 2]), None, vs)
    with pytest.raises(RuntimeError, match=r"v_scale must be a contiguous float32 \[Hkv, D\]"):
        kernel(key, value, kc, vc, torch.tensor([0, 1, 2]), ks, vs[:, :4].contiguous())
    with pytest.raises(RuntimeError, match="float32 for an int8 cache"):
        kernel(key.double(), value.double(), kc, vc, torch.tensor([0, 1, 2]), ks, vs)
    with pytest.raises(RuntimeError, match="slot_mapping must be a contiguous int64"):
        kernel(key, value, kc, vc, torch.tensor([0, 1, 2], dtype=torch.int32), ks, vs)
    with pytest.raises(RuntimeError, match="key must be a contiguous"):
        kernel(key[:, :1], value, kc, vc, torch.tensor([0, 1, 2]), ks, vs)
    assert torch.equal(kc, before[0]) and torch.equal(vc, before[1])
    float_cache = torch.zeros(2, 2, 4, 8)
    with pytest.raises(RuntimeError, match="must have the float cache's dtype"):
        kernel(key.double(), value.double(), float_cache, float_cache.clone(), torch.tensor([0, 1, 2]), None, None)
    with pytest.raises(RuntimeError, match="for int8 caches only"):
        kernel(key, value, float_cache, float_cache.clone(), torch.tensor([0, 1, 2]), ks, vs)
    assert torch.equal(float_cache, torch.zeros(2, 2, 4, 8))
