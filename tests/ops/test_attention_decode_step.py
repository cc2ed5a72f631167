"""``attention_decode_step`` (ops/attention/decode_step_op.py; on the CPU the C++ operator of
bindings/cpu/attention_decode_step_cpu.cpp) against its definition: ``reshape_and_cache`` then
``paged_decode_attention``, bit for bit, caches included; every bad input refused before anything is
written; traceable (its fake); and the composed path (the operator hidden) giving the same answers.
"""
from __future__ import annotations

import pytest
import torch
from tolerances import VECTORIZED_VS_REFERENCE, tol

from qwen_ops import ops
from qwen_ops.ops.attention import decode_step_op
from qwen_ops.ops.attention import reference as attention_reference
from qwen_ops.ops.cache import reference as cache_reference
from qwen_ops.testing import Draw, decode_call

try:
    from qwen_ops import _C  # noqa: F401
except ImportError:  # a built extension without the operator fails test_the_built_extension_has_the_operator
    pytest.skip("qwen_ops._C is not built (QWEN_OPS_BUILD_EXT=0)", allow_module_level=True)
decode_step_op.attention_decode_step_available()  # looked up before any trace, as the model does when imported

F32, BF16, INT8 = torch.float32, torch.bfloat16, torch.int8


def test_the_built_extension_has_the_operator():
    assert decode_step_op.attention_decode_step_available(), "qwen_ops._C is built but has no attention_decode_step"


def _case(gen, dtype=F32, cache_dtype=F32, seq_lens=(5, 1, 40, 17), hq=8, hkv=2, d=32, bs=16, padded=()):
    """A decode step: request r's newest token (position seq_lens[r] - 1) goes to its slot, -1 for ``padded``."""
    draw = Draw(gen)
    args = decode_call(draw, dtype, cache_dtype, hq, hkv, d, bs, list(seq_lens), width=4, spare_blocks=2)
    n = len(seq_lens)
    newest = args["seq_lens"].long() - 1
    slots = args["block_tables"].long()[torch.arange(n), newest.clamp(min=0) // bs] * bs + newest % bs
    slots[list(padded)] = -1
    args.update(key=draw.randn(n, hkv, d, dtype=dtype), value=draw.randn(n, hkv, d, dtype=dtype),
                slot_mapping=slots.to(torch.int32))
    return args


def _clone(args):
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in args.items()}


def _composition(args):
    """The definition, through the public ops, on copies of the caches."""
    a = _clone(args)
    ops.reshape_and_cache(a["key"], a["value"], a["key_cache"], a["value_cache"], a["slot_mapping"], a["k_scale"],
                          a["v_scale"])
    out = ops.paged_decode_attention(a["query"], a["key_cache"], a["value_cache"], a["block_tables"], a["seq_lens"],
                                     k_scale=a["k_scale"], v_scale=a["v_scale"])
    return out, a


def _call(args, **kw):
    names = ("query", "key", "value", "key_cache", "value_cache", "slot_mapping", "block_tables", "seq_lens")
    return decode_step_op.attention_decode_step(*(args[n] for n in names), k_scale=args["k_scale"],
                                                v_scale=args["v_scale"], **kw)


@pytest.mark.parametrize("dtype,cache_dtype", [(F32, F32), (BF16, BF16), (F32, INT8), (BF16, INT8)])
def test_equals_the_composition_bit_for_bit(gen, dtype, cache_dtype):
    args = _case(gen, dtype, cache_dtype, padded=[1])
    expected, after = _composition(args)
    out = _call(args)
    assert out.dtype == dtype and torch.equal(out, expected)
    for cache in ("key_cache", "value_cache"):
        assert torch.equal(args[cache], after[cache]), f"{cache} differs from the composition's"


def test_matches_the_references(gen):
    args = _case(gen)
    ref = _clone(args)
    cache_reference.reshape_and_cache(key=ref["key"], value=ref["value"], key_cache=ref["key_cache"],
                                      value_cache=ref["value_cache"], slot_mapping=ref["slot_mapping"],
                                      k_scale=None, v_scale=None)
    expected = attention_reference.paged_decode_attention(
        query=ref["query"], key_cache=ref["key_cache"], value_cache=ref["value_cache"],
        block_tables=ref["block_tables"], seq_lens=ref["seq_lens"], scale=32 ** -0.5, k_scale=None, v_scale=None)
    torch.testing.assert_close(_call(args), expected, **tol(VECTORIZED_VS_REFERENCE, F32))
    assert torch.equal(args["key_cache"], ref["key_cache"]) and torch.equal(args["value_cache"], ref["value_cache"])


def test_float16_runs_the_two_ops(gen):
    """The C++ operator takes float32 and bfloat16; a float16 call on the CPU is the composition, not an error."""
    args = _case(gen, torch.float16, torch.float16)
    expected, after = _composition(args)
    assert torch.equal(_call(args), expected) and torch.equal(args["value_cache"], after["value_cache"])


def test_a_padded_row_writes_nothing_and_an_empty_request_gives_zeros(gen):
    args = _case(gen, seq_lens=(3, 0, 9), padded=[1])
    before = _clone(args)
    out = _call(args)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    changed = (args["key_cache"] != before["key_cache"]).any(dim=(1, 3)).nonzero().tolist()
    assert len(changed) <= 2 * 2  # the two written tokens' rows (block, head) at most


def _overlapping(a):
    buf = torch.zeros(a["key_cache"].shape[0] + 1, *a["key_cache"].shape[1:])
    return buf[:-1], buf[1:]


# (argument, how to break it, the message): each refused before anything is written.
BAD_INPUTS = [
    ("slot_mapping", lambda a: a["slot_mapping"] + 1, "slot_mapping\\[0\\] = .* must be -1 or the slot of request 0"),
    ("slot_mapping", lambda a: torch.tensor([a["slot_mapping"][0].item(), a["slot_mapping"][0].item(), -1, -1],
                                            dtype=torch.int32), "slot_mapping\\[1\\]"),
    ("slot_mapping", lambda a: a["slot_mapping"][:3], "argument 'slot_mapping'"),
    ("slot_mapping", lambda a: a["slot_mapping"].float(), "argument 'slot_mapping'"),
    ("block_tables", lambda a: torch.where(a["block_tables"] >= 0, a["block_tables"] + 1000, a["block_tables"]),
     "block_tables\\[0, 0\\] = .* is outside the cache"),
    ("block_tables", lambda a: a["block_tables"].long(), "argument 'block_tables' must be an int32"),
    ("seq_lens", lambda a: a["seq_lens"] + 1000, "seq_lens\\[0\\] = .* is outside"),
    ("key", lambda a: a["key"].to(BF16), "argument 'key' must be a float32"),
    ("value", lambda a: a["value"][:, :1], "argument 'value'"),
    ("query", lambda a: a["query"][..., :-1], "argument 'query'"),
    ("value_cache", lambda a: a["value_cache"].to(BF16), "argument 'value_cache'"),
]


@pytest.mark.parametrize("name,bad,message", BAD_INPUTS, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD_INPUTS)])
def test_bad_input_raises_before_anything_is_written(gen, name, bad, message):
    args = _case(gen)
    args[name] = bad(args)
    before = _clone(args)
    with pytest.raises(RuntimeError, match="attention_decode_step: .*" + message):
        _call(args)
    for cache in ("key_cache", "value_cache"):
        assert torch.equal(args[cache], before[cache]), f"{cache} was written by a rejected call"


def test_overlapping_caches_are_refused(gen):
    args = _case(gen)
    args["key_cache"], args["value_cache"] = _overlapping(args)
    with pytest.raises(RuntimeError, match="attention_decode_step: key_cache and value_cache must not overlap"):
        _call(args)


def test_int8_caches_need_their_scales(gen):
    args = _case(gen, F32, INT8)
    args["v_scale"] = None
    with pytest.raises(RuntimeError, match="attention_decode_step: v_scale .*required for an int8 cache"):
        _call(args)


def test_the_operator_serves_only_cpu_calls_the_torch_backend_serves():
    """The model asks per op (its backend chooser); an op on another backend, or another device, runs the ops."""
    cpu = torch.device("cpu")
    assert decode_step_op.takes_cpu_kernel(cpu, {})
    assert decode_step_op.takes_cpu_kernel(cpu, dict.fromkeys(decode_step_op.COMPOSED_OPS, "torch"))
    assert not decode_step_op.takes_cpu_kernel(torch.device("meta"), {})
    assert "ascendc" in ops.available_backends()  # qwen_ops._C's Ascend C stand-in serves CPU tensors
    assert not decode_step_op.takes_cpu_kernel(cpu, {"paged_decode_attention": "ascendc"})
    assert not decode_step_op.takes_cpu_kernel(cpu, {"reshape_and_cache": "ascendc"})


@pytest.fixture
def composed(monkeypatch):
    """The path off the C++ operator: the two public ops one after the other."""
    monkeypatch.setattr(decode_step_op, "takes_cpu_kernel", lambda device, backends: False)


@pytest.mark.parametrize("cache_dtype", [F32, INT8])
def test_the_composed_path_gives_the_same_bits(gen, composed, cache_dtype):
    args = _case(gen, F32, cache_dtype, padded=[2])
    expected, after = _composition(args)
    assert torch.equal(_call(args), expected)
    assert torch.equal(args["key_cache"], after["key_cache"])


def test_the_composed_path_refuses_a_slot_that_is_not_the_newest(gen, composed):
    args = _case(gen)
    args["slot_mapping"] = args["slot_mapping"] + 1
    before = _clone(args)
    with pytest.raises(ValueError, match="attention_decode_step: slot_mapping\\[0\\] = .* must be -1 or the slot"):
        _call(args)
    assert torch.equal(args["key_cache"], before["key_cache"])


@pytest.mark.parametrize("path", ["operator", "composed"])
def test_a_slot_without_blocks_or_tokens_is_refused(gen, monkeypatch, path):
    """A slot given to a request with no block table columns, or with no tokens, cannot be its newest token's."""
    if path == "composed":
        monkeypatch.setattr(decode_step_op, "takes_cpu_kernel", lambda device, backends: False)
    error = ValueError if path == "composed" else RuntimeError
    args = _case(gen, seq_lens=(3, 5))
    args.update(block_tables=args["block_tables"][:, :0], seq_lens=torch.zeros(2, dtype=torch.int32),
                slot_mapping=torch.tensor([-1, 7], dtype=torch.int32))
    before = _clone(args)
    with pytest.raises(error, match="attention_decode_step: slot_mapping\\[1\\] = 7 must be -1 or the slot"):
        _call(args)
    assert torch.equal(args["key_cache"], before["key_cache"])
    args["slot_mapping"] = torch.tensor([-1, -1], dtype=torch.int32)  # nothing written: zero rows
    assert torch.equal(_call(args), torch.zeros_like(args["query"]))


def test_fake_checks_shapes_and_gives_the_output_shape(gen):
    from torch._subclasses.fake_tensor import FakeTensorMode

    args = _case(gen)
    short_value = args["value"][:, :1]
    with FakeTensorMode() as mode:
        fake = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
        assert _call(fake).shape == args["query"].shape
        fake["value"] = mode.from_tensor(short_value)
        with pytest.raises(ValueError, match="attention_decode_step: argument 'value'"):
            _call(fake)


def test_traceable_by_torch_compile(gen):
    args = _case(gen)
    eager, compiled_args = _clone(args), _clone(args)

    def step(**kw):
        return _call(kw) * 2.0

    got = torch.compile(step, fullgraph=True, backend="aot_eager")(**compiled_args)
    assert torch.equal(got, step(**eager))
    for cache in ("key_cache", "value_cache"):  # the in-place writes survive functionalization
        assert torch.equal(compiled_args[cache], eager[cache])
