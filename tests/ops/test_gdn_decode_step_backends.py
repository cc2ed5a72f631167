"""``gdn_decode_step`` on every backend that serves it in one launch, against the separate ops and the reference.

The fused kernels (Triton under its CPU interpreter here, Ascend C on the CPU stand-in) must equal what the
same backend's separate ops give when composed as the model composes them at decode (``causal_conv1d_update``
+ SiLU, ``fused_gdn_gating``, the L2-normalised ``fused_recurrent_gated_delta_rule``, the gated RMSNorm), and
the reference (``ops/gdn/decode_step/reference.py``): outputs and both pools, over pools with holes and
padding rows, GQA head ratios, head dims that are not powers of two, and the speculative-decoding form over
several steps of random accept patterns. Bad input is refused with the op's and the argument's name before
any pool is written.
"""
from __future__ import annotations

import pytest
import torch
from tolerances import KERNEL_VS_REFERENCE, tol

from qwen_ops import ops, testing
from qwen_ops.ops._backend import IMPLEMENTATIONS, BackendError
from qwen_ops.ops.gdn.decode_step import op as decode_step_op, reference
from qwen_ops.ops.gdn.decode_step.composed import composed_decode_step

F32 = torch.float32
FUSED_BACKENDS = [b for b in ("triton", "ascendc")
                  if b in IMPLEMENTATIONS["gdn_decode_step"] and b in ops.available_backends()]
if not FUSED_BACKENDS:
    pytest.skip("neither triton nor the ascendc kernels are installed", allow_module_level=True)
T = tol(KERNEL_VS_REFERENCE, F32)


def make_case(gen, tokens=3, hk=2, hv=4, dk=16, dv=8, width=4, slots=8, rows=None, index_dtype=torch.int64):
    """The op's arguments for ``tokens`` decode tokens; ``rows``: state_indices ([B] or [B, W]) or a random [B]."""
    draw = testing.Draw(gen)
    if rows is None:
        rows = draw.randperm(slots)[:tokens]
    return testing.decode_step_call(draw, tokens=tokens, hk=hk, hv=hv, dk=dk, dv=dv, width=width, pool_rows=slots,
                                    state_indices=torch.as_tensor(rows).to(index_dtype))


def clone(args):
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in args.items()}


def assert_fused_matches(backend, args, **spec):
    """Fused (one launch) == the separate ops of the same backend == the reference: outputs and both pools."""
    fused, separate, ref = clone(args), clone(args), clone(args)
    out = decode_step_op.gdn_decode_step(**fused, backend=backend, **spec)
    # The separate Ascend C ops have no speculative form (BackendError): there the torch ones stand in.
    separate_backend = "torch" if spec and backend == "ascendc" else backend
    want_separate = composed_decode_step(separate_backend, **separate, **spec)
    want_ref = reference.gdn_decode_step(**ref, **spec)
    for want, pools in ((want_separate, separate), (want_ref, ref)):
        torch.testing.assert_close(out, want, **T)
        torch.testing.assert_close(fused["conv_states"], pools["conv_states"], atol=0, rtol=0)  # copies: exact
        torch.testing.assert_close(fused["ssm_states"], pools["ssm_states"], **T)
    return out, fused


@pytest.mark.parametrize("backend", FUSED_BACKENDS)
@pytest.mark.parametrize("hk,hv", [(2, 2), (2, 4), (1, 3)])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_decode_rows_on_a_pool_with_holes_and_padding(gen, backend, hk, hv, index_dtype):
    """Rows 1, 4, 6 of the pool are never named (holes); two sequences are padding (-1)."""
    args = make_case(gen, tokens=5, hk=hk, hv=hv, rows=[5, -1, 0, 7, -1], index_dtype=index_dtype)
    out, after = assert_fused_matches(backend, args)
    assert not out[1].any() and not out[4].any()
    assert out[0].abs().sum() > 0
    for untouched in (1, 2, 3, 4, 6):
        assert torch.equal(after["conv_states"][untouched], args["conv_states"][untouched])
        assert torch.equal(after["ssm_states"][untouched], args["ssm_states"][untouched])


@pytest.mark.parametrize("backend", FUSED_BACKENDS)
def test_head_dims_that_are_not_powers_of_two(gen, backend):
    """Dk = 24, Dv = 40 (masked tiles; Dv > the Triton kernel's 32 state columns: two column tiles), conv K = 3."""
    assert_fused_matches(backend, make_case(gen, tokens=2, hk=1, hv=2, dk=24, dv=40, width=3))


@pytest.mark.parametrize("backend", FUSED_BACKENDS)
def test_qwen35_head_shape_at_batch_1(gen, backend):
    """Qwen3.5's GDN heads (Dk = Dv = 128), two key heads and a ratio of 2 to keep the interpreter quick."""
    assert_fused_matches(backend, make_case(gen, tokens=1, hk=2, hv=4, dk=128, dv=128))


@pytest.mark.parametrize("backend", FUSED_BACKENDS)
def test_column_views_of_one_stacked_projection(gen, backend):
    args = make_case(gen, tokens=2)
    parts = [args["mixed_qkv"], args["z"], args["b"], args["a"]]
    views = torch.cat(parts, dim=1).split([p.shape[1] for p in parts], dim=1)
    assert not views[1].is_contiguous()
    expected, _ = assert_fused_matches(backend, args)
    strided = clone(args)
    strided.update(mixed_qkv=views[0], z=views[1], b=views[2], a=views[3])
    torch.testing.assert_close(decode_step_op.gdn_decode_step(**strided, backend=backend), expected, atol=0, rtol=0)


def spec_step(gen, lengths, accepted, width, rows, **case):
    """One speculative step: sequence r has lengths[r] tokens (0: a padding row of all -1)."""
    offsets = torch.tensor([0] + lengths).cumsum(0)
    step_rows = rows.clone()
    for r, n in enumerate(lengths):
        if n == 0:
            step_rows[r] = -1
    args = make_case(gen, tokens=int(offsets[-1]), rows=step_rows, **case)
    return args, dict(query_start_loc=offsets, num_accepted_tokens=torch.tensor(accepted))


@pytest.mark.parametrize("backend", FUSED_BACKENDS)
@pytest.mark.parametrize("hk,hv", [(2, 4), (1, 3)])
def test_speculative_steps_with_random_accept_patterns(gen, backend, hk, hv):
    """Three steps over one pool pair: each request owns W = 3 rows; a step of L <= W tokens writes row t after
    token t and the next starts from row num_accepted - 1. Pools carry over from step to step."""
    requests, width, slots = 3, 3, 12
    rows = torch.randperm(slots, generator=gen)[: requests * width].view(requests, width)
    pools = None
    accepted = [1] * requests
    for step in range(3):
        lengths = [int(torch.randint(1, width + 1, (1,), generator=gen)) for _ in range(requests)]
        if step == 1:
            lengths[1] = 0  # a padding row in the middle of the batch
        args, spec = spec_step(gen, lengths, accepted, width, rows, hk=hk, hv=hv, slots=slots)
        if pools is not None:
            args.update(pools)
        out, after = assert_fused_matches(backend, args, **spec)
        if step == 1:
            assert all(torch.equal(after[p][r], args[p][r]) for p in ("conv_states", "ssm_states")
                       for r in rows[1].tolist()), "a padding row's pool rows were written"
        pools = {p: after[p] for p in ("conv_states", "ssm_states")}
        accepted = [int(torch.randint(1, max(n, 1) + 1, (1,), generator=gen)) for n in lengths]


@pytest.mark.parametrize("backend", FUSED_BACKENDS)
def test_traceable_by_torch_compile(gen, backend):
    args = make_case(gen, tokens=2)
    eager, compiled_args = clone(args), clone(args)

    def step(**kw):
        return decode_step_op.gdn_decode_step(**kw, backend=backend) * 2.0

    got = torch.compile(step, fullgraph=True, backend="aot_eager")(**compiled_args)
    torch.testing.assert_close(got, step(**eager), atol=0, rtol=0)
    for pool in ("conv_states", "ssm_states"):
        torch.testing.assert_close(compiled_args[pool], eager[pool], atol=0, rtol=0)


BAD_INPUTS = [
    ("mixed_qkv", lambda a: a["mixed_qkv"][:, :-1], "argument 'mixed_qkv' must be \\[T, 2 Hk Dk"),
    ("mixed_qkv", lambda a: a["mixed_qkv"].double(), "argument 'mixed_qkv' must have dtype in \\(float32, bfloat16\\)"),
    ("mixed_qkv", lambda a: {k: v.bfloat16() if k in ("mixed_qkv", "z", "b", "a", "conv_states", "conv_taps",
                                                      "norm_weight") else v for k, v in a.items()},
     "argument 'mixed_qkv' is torch.bfloat16, which only the torch backend serves"),
    ("z", lambda a: a["z"].bfloat16(), "argument 'z' must have dtype in \\(float32\\)"),
    ("z", lambda a: a["z"][:, :-1], "argument 'z'"),
    ("b", lambda a: a["b"][:1], "argument 'b'"),
    ("a", lambda a: a["a"].t().contiguous().t(), "argument 'a' must have contiguous rows"),
    ("conv_states", lambda a: a["conv_states"][:, :2].contiguous(), "argument 'conv_states'"),
    ("conv_taps", lambda a: a["conv_taps"].t(), "argument 'conv_taps'"),
    ("ssm_states", lambda a: a["ssm_states"].transpose(2, 3).contiguous().transpose(2, 3),
     "argument 'ssm_states' must be contiguous"),
    ("A_log", lambda a: a["A_log"][:-1], "argument 'A_log'"),
    ("norm_weight", lambda a: a["norm_weight"].half(), "argument 'norm_weight'"),
    ("state_indices", lambda a: torch.tensor([0, 8, 1]), "argument 'state_indices' has index 8"),
    ("state_indices", lambda a: torch.tensor([0, -2, 1]), "argument 'state_indices' has index -2"),
    ("state_indices", lambda a: torch.tensor([3, 1, 3]), "argument 'state_indices' repeats an index"),
    ("state_indices", lambda a: a["state_indices"].float(), "argument 'state_indices' must have dtype in \\(int32, int64\\)"),
    ("eps", lambda a: 0.0, "argument 'eps' must be finite and > 0"),
]


@pytest.mark.parametrize("backend", FUSED_BACKENDS)
@pytest.mark.parametrize("name,bad,message", BAD_INPUTS, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD_INPUTS)])
def test_bad_input_raises_before_any_pool_is_written(gen, backend, name, bad, message):
    args = make_case(gen, tokens=3)
    spoiled = bad(args)
    if isinstance(spoiled, dict):  # every argument changed at once
        args = spoiled
    else:
        args[name] = spoiled
    before = clone(args)
    with pytest.raises((ValueError, TypeError), match="gdn_decode_step: " + message):  # TypeError: a dtype
        decode_step_op.gdn_decode_step(**args, backend=backend)
    for pool in ("conv_states", "ssm_states"):
        assert torch.equal(args[pool], before[pool]), f"{pool} was written by a rejected call"


SPEC_BAD = [
    (lambda s: s.update(num_accepted_tokens=None), "speculative decoding needs both"),
    (lambda s: s.update(num_accepted_tokens=torch.tensor([0, 1])), "argument 'num_accepted_tokens' must be in \\[1, 3\\]"),
    (lambda s: s.update(num_accepted_tokens=torch.tensor([4, 1])), "argument 'num_accepted_tokens' must be in \\[1, 3\\]"),
    (lambda s: s.update(query_start_loc=torch.tensor([0, 2, 5])), "argument 'query_start_loc'"),
    (lambda s: s["rows"].__setitem__((0, 1), -1), "argument 'state_indices' has -1 where a sequence reads"),
]


@pytest.mark.parametrize("backend", FUSED_BACKENDS)
@pytest.mark.parametrize("spoil,message", SPEC_BAD, ids=range(len(SPEC_BAD)))
def test_bad_speculative_metadata_is_refused_before_any_pool_is_written(gen, backend, spoil, message):
    rows = torch.tensor([[0, 1, 2], [3, 4, 5]])
    args, spec = spec_step(gen, [2, 2], [2, 1], 3, rows)
    spoiled = dict(spec, rows=args["state_indices"])
    spoil(spoiled)
    args["state_indices"] = spoiled.pop("rows")
    before = clone(args)
    with pytest.raises(ValueError, match="gdn_decode_step: " + message):
        decode_step_op.gdn_decode_step(**args, backend=backend, **spoiled)
    for pool in ("conv_states", "ssm_states"):
        assert torch.equal(args[pool], before[pool]), f"{pool} was written by a rejected call"


def test_a_backend_without_the_op_is_refused():
    args = make_case(torch.Generator().manual_seed(0), tokens=1)
    with pytest.raises(BackendError, match="gdn_decode_step: unknown backend 'cuda'"):
        decode_step_op.gdn_decode_step(**args, backend="cuda")
