"""``qwen_ops::gdn_decode_step`` (bindings/cpu/gdn_decode_step_cpu.cpp) against the composition of the references.

The fused op must give what the model's op-by-op decode gives (``ops/gdn/reference_decode_step.py``: conv
update + SiLU, gates, L2-normalised delta rule, gated RMSNorm), update both pools as it does, reject bad
input before touching any pool, and stay traceable (its fake).
"""
from __future__ import annotations

import pytest
import torch

from qwen_ops.ops.gdn.decode_step import op as decode_step_op, reference as reference_decode_step
from tolerances import VECTORIZED_VS_REFERENCE, tol

try:
    from qwen_ops import _C  # noqa: F401
except ImportError:  # a built extension without the kernel fails test_the_built_extension_has_the_kernel instead
    pytest.skip("qwen_ops._C is not built (QWEN_OPS_BUILD_EXT=0)", allow_module_level=True)
decode_step_op.gdn_decode_step_available()  # looked up before any trace, as the model does when imported

F32 = torch.float32


def test_the_built_extension_has_the_kernel():
    assert decode_step_op.gdn_decode_step_available(), "qwen_ops._C is built but has no gdn_decode_step"


def _case(gen, batch=3, hk=2, hv=4, dk=16, dv=8, width=4, slots=6, index_dtype=torch.int64, indices=None):
    channels = 2 * hk * dk + hv * dv
    r = lambda *shape, s=1.0: torch.randn(*shape, generator=gen, dtype=F32) * s  # noqa: E731
    args = dict(
        mixed_qkv=r(batch, channels), z=r(batch, hv * dv), b=r(batch, hv), a=r(batch, hv),
        conv_states=r(slots, width - 1, channels), conv_taps=r(width, channels, s=0.5),
        ssm_states=r(slots, hv, dk, dv, s=0.3), A_log=r(hv, s=0.5), dt_bias=r(hv, s=0.5),
        norm_weight=1.0 + r(dv, s=0.1),
        state_indices=(torch.tensor(indices) if indices is not None else
                       torch.randperm(slots, generator=gen)[:batch]).to(index_dtype),
        eps=1e-6)
    return args


def _clone(args):
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in args.items()}


def _compare(args):
    ours, ref = _clone(args), _clone(args)
    out = decode_step_op.gdn_decode_step(**ours)
    expected = reference_decode_step.gdn_decode_step(**ref)
    t = tol(VECTORIZED_VS_REFERENCE, F32)
    torch.testing.assert_close(out, expected, **t)
    torch.testing.assert_close(ours["conv_states"], ref["conv_states"], atol=0, rtol=0)  # copies: exact
    torch.testing.assert_close(ours["ssm_states"], ref["ssm_states"], **t)
    return out, ours


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("hk,hv", [(2, 2), (2, 4), (1, 3)])
def test_matches_the_composition_of_the_references(gen, index_dtype, hk, hv):
    _compare(_case(gen, hk=hk, hv=hv, index_dtype=index_dtype))


def test_model_shapes_at_batch_1_and_4(gen):
    """Qwen3.5-0.8B's GDN layer: 16 key and value heads of 128, a 6144-channel conv of width 4."""
    for batch in (1, 4):
        _compare(_case(gen, batch=batch, hk=16, hv=16, dk=128, dv=128, slots=5))


def test_padding_rows_give_zeros_and_leave_the_pools(gen):
    args = _case(gen, batch=4, indices=[2, -1, 0, -1])
    out, after = _compare(args)
    assert not out[1].any() and not out[3].any()
    for untouched in (1, 3, 4, 5):
        assert torch.equal(after["conv_states"][untouched], args["conv_states"][untouched])
        assert torch.equal(after["ssm_states"][untouched], args["ssm_states"][untouched])


def test_column_views_of_one_stacked_projection(gen):
    """The model's stacked projections give [q k v | z | b | a] as column views of one output."""
    args = _case(gen, batch=2)
    parts = [args["mixed_qkv"], args["z"], args["b"], args["a"]]
    stacked = torch.cat(parts, dim=1)
    views = stacked.split([p.shape[1] for p in parts], dim=1)
    assert not views[1].is_contiguous()
    expected, _ = _compare(args)
    strided = _clone(args)
    strided.update(mixed_qkv=views[0], z=views[1], b=views[2], a=views[3])
    torch.testing.assert_close(decode_step_op.gdn_decode_step(**strided), expected, atol=0, rtol=0)


def test_a_large_gate_input_takes_softplus_threshold(gen):
    args = _case(gen)
    args["a"] = torch.full_like(args["a"], 30.0)  # a + dt_bias > 20: softplus(x) = x
    _compare(args)


BF16 = torch.bfloat16
ACTIVATIONS = ("mixed_qkv", "z", "b", "a", "conv_states", "conv_taps", "norm_weight")


def _in_bfloat16(args):
    """The model's bfloat16 call: activations, conv pool, taps and norm weight in bfloat16; the recurrent state,
    A_log and dt_bias float32."""
    return {k: v.to(BF16) if k in ACTIVATIONS else v for k, v in args.items()}


@pytest.mark.parametrize("batch,hk,hv,dk,dv", [(3, 2, 4, 16, 8), (2, 16, 16, 128, 128)], ids=["small", "0.8b"])
def test_bfloat16_rounds_where_the_composition_rounds(gen, batch, hk, hv, dk, dv):
    args = _in_bfloat16(_case(gen, batch=batch, hk=hk, hv=hv, dk=dk, dv=dv, slots=5))
    ours, ref = _clone(args), _clone(args)
    out = decode_step_op.gdn_decode_step(**ours)
    expected = reference_decode_step.gdn_decode_step(**ref)
    assert out.dtype == BF16
    torch.testing.assert_close(ours["conv_states"], ref["conv_states"], atol=0, rtol=0)  # copies: exact
    # One bfloat16 rounding the float32 sum order tips, and what follows from it. A kernel that rounded only
    # its result (float32 inside) would be more accurate than the model's op-by-op path, and unlike it: most
    # outputs would sit one bfloat16 ulp away. Rounding where the ops return, nearly all are equal bitwise.
    torch.testing.assert_close(out, expected, atol=2.0 ** -7, rtol=2.0 ** -6)
    torch.testing.assert_close(ours["ssm_states"], ref["ssm_states"], atol=2.0 ** -7, rtol=2.0 ** -6)
    equal = (out == expected).float().mean().item()
    assert equal > 0.95, f"only {equal:.1%} of the bfloat16 outputs equal the composition's"


def test_bfloat16_takes_one_dtype_for_the_activations(gen):
    for name in ACTIVATIONS[1:]:
        args = _in_bfloat16(_case(gen))
        args[name] = args[name].float()
        with pytest.raises(RuntimeError, match=f"gdn_decode_step: argument '{name}' must be a (contiguous )?bfloat16"):
            decode_step_op.gdn_decode_step(**args)
    args = _in_bfloat16(_case(gen))
    args["ssm_states"] = args["ssm_states"].to(BF16)
    with pytest.raises(RuntimeError, match="argument 'ssm_states' must be a contiguous float32"):
        decode_step_op.gdn_decode_step(**args)


BAD_INPUTS = [
    ("mixed_qkv", lambda a: a["mixed_qkv"][:, :-1], "argument 'mixed_qkv'"),
    ("mixed_qkv", lambda a: a["mixed_qkv"].double(), "argument 'mixed_qkv' must be float32 or bfloat16"),
    ("z", lambda a: a["z"].bfloat16(), "argument 'z' must be a float32 CPU tensor \\(mixed_qkv's dtype\\)"),
    ("z", lambda a: a["z"][:, :-1], "argument 'z' must be \\[B, 32\\]"),
    ("b", lambda a: a["b"][:1], "argument 'b' must be \\[B, 4\\] with B = 3"),
    ("a", lambda a: a["a"].t().contiguous().t(), "argument 'a' must have contiguous rows"),
    ("conv_states", lambda a: a["conv_states"][:, :2].contiguous(), "argument 'conv_states' must have shape"),
    ("conv_taps", lambda a: a["conv_taps"].t(), "argument 'conv_taps'"),
    ("ssm_states", lambda a: a["ssm_states"].transpose(2, 3), "argument 'ssm_states'"),
    ("A_log", lambda a: a["A_log"][:-1], "argument 'A_log' must have shape"),
    ("norm_weight", lambda a: a["norm_weight"].half(), "argument 'norm_weight' must be a contiguous float32"),
    ("state_indices", lambda a: torch.tensor([0, 6, 1]), "argument 'state_indices' has index 6"),
    ("state_indices", lambda a: torch.tensor([0, -2, 1]), "argument 'state_indices' has index -2"),
    ("state_indices", lambda a: a["state_indices"].float(), "argument 'state_indices' must be an int32 or int64"),
    ("eps", lambda a: 0.0, "argument 'eps' must be finite and > 0"),
]


@pytest.mark.parametrize("name,bad,message", BAD_INPUTS, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD_INPUTS)])
def test_bad_input_raises_before_any_pool_is_written(gen, name, bad, message):
    args = _case(gen)
    args[name] = bad(args)
    before = _clone(args)
    with pytest.raises(RuntimeError, match="gdn_decode_step: " + message):
        decode_step_op.gdn_decode_step(**args)
    for pool in ("conv_states", "ssm_states"):
        assert torch.equal(args[pool], before[pool]), f"{pool} was written by a rejected call"


def test_fake_checks_shapes_and_gives_the_output_shape(gen):
    from torch._subclasses.fake_tensor import FakeTensorMode

    args = _case(gen, batch=2)
    short_z = args["z"][:, :-1]
    with FakeTensorMode() as mode:
        fake = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
        assert decode_step_op.gdn_decode_step(**fake).shape == (2, 32)
        fake["z"] = mode.from_tensor(short_z)
        with pytest.raises(ValueError, match="gdn_decode_step: argument 'z'"):
            decode_step_op.gdn_decode_step(**fake)


def _without_key_channels(gen):
    args, channels = _case(gen), 4 * 8  # Hv Dv only: 2 Hk Dk = 0
    args.update(mixed_qkv=torch.randn(3, channels, generator=gen), conv_taps=torch.randn(4, channels, generator=gen),
                conv_states=torch.randn(6, 3, channels, generator=gen))
    return args


def _changed(**change):
    def build(gen):
        args = _case(gen)
        args.update({k: f(args) for k, f in change.items()})
        return args
    return build


# (why, a bad call, what the message names): the C++ kernel's check and the fake's must refuse it alike.
FAKE_AND_KERNEL_REFUSE = [
    ("mixed_qkv short", _changed(mixed_qkv=lambda a: a["mixed_qkv"][:, :-1]), "argument 'mixed_qkv'"),
    ("no key channels", _without_key_channels, "argument 'mixed_qkv'"),
    ("Hv not a multiple of Hk", lambda gen: _case(gen, hk=3, hv=4), "multiple of the key heads Hk = 3"),
    ("z short", _changed(z=lambda a: a["z"][:, :-1]), "argument 'z'"),
    ("b rows", _changed(b=lambda a: a["b"][:1]), "argument 'b'"),
    ("kernel width 1", _changed(conv_taps=lambda a: a["conv_taps"][:1].contiguous(),
                                conv_states=lambda a: a["conv_states"][:, :0].contiguous()), "argument 'conv_taps'"),
    ("A_log short", _changed(A_log=lambda a: a["A_log"][:-1]), "argument 'A_log'"),
    ("norm_weight half", _changed(norm_weight=lambda a: a["norm_weight"].half()), "argument 'norm_weight'"),
    ("state_indices float", _changed(state_indices=lambda a: a["state_indices"].float()), "argument 'state_indices'"),
]


@pytest.mark.parametrize("build,names", [c[1:] for c in FAKE_AND_KERNEL_REFUSE], ids=[c[0] for c in FAKE_AND_KERNEL_REFUSE])
def test_the_fake_refuses_what_the_kernel_refuses(gen, build, names):
    """The fake (torch.compile's shape pass) has the kernel's conditions: a call one refuses, the other does too."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    args = build(gen)
    with pytest.raises(RuntimeError, match="gdn_decode_step: .*" + names):
        decode_step_op.gdn_decode_step(**args)
    with FakeTensorMode() as mode:
        fake = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
        with pytest.raises((ValueError, TypeError), match="gdn_decode_step: .*" + names):
            decode_step_op.gdn_decode_step(**fake)


def test_traceable_by_torch_compile(gen):
    args = _case(gen, batch=2)
    eager, compiled_args = _clone(args), _clone(args)

    def step(**kw):
        return decode_step_op.gdn_decode_step(**kw) * 2.0

    got = torch.compile(step, fullgraph=True, backend="aot_eager")(**compiled_args)
    torch.testing.assert_close(got, step(**eager), atol=0, rtol=0)
    for pool in ("conv_states", "ssm_states"):  # the in-place updates survive functionalization
        torch.testing.assert_close(compiled_args[pool], eager[pool], atol=0, rtol=0)
