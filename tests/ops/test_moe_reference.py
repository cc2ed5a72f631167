"""``fused_experts`` (torch reference) against a float64 loop; its checks, backends, fake and compile.

Edge cases of the routing: experts that receive no token, every token on one
expert, top-k equal to the expert count, a repeated expert in a row, no
tokens. Bad input (expert ids out of range, mismatched shapes, dtypes) is
rejected naming the argument, with no argument modified.
"""
from __future__ import annotations

import os
import sys

import pytest
import torch
from tolerances import KERNEL_VS_REFERENCE, REFERENCE_VS_FLOAT64, tol

from qwen_ops import ops
from qwen_ops.ops import _backend, ascendc_backend

sys.path.insert(0, os.path.dirname(__file__))
from moe_cases import draw, naive_float64  # noqa: E402

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


def check_against_loop(call, dtype):
    out = ops.fused_experts(**call, backend="torch")
    assert out.dtype == dtype and out.shape == call["hidden_states"].shape
    torch.testing.assert_close(out.double(), naive_float64(**call), **tol(REFERENCE_VS_FLOAT64, dtype))


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_random_routing(gen, dtype):
    check_against_loop(draw(gen, 37, 48, 40, 6, 2, dtype), dtype)


def test_experts_without_tokens_are_never_read(gen):
    """Experts 1 and 4 get no token: their weights are NaN, and the output stays finite and right."""
    used = torch.tensor([0, 2, 3, 5])
    ids = used[torch.stack([torch.randperm(4, generator=gen)[:2] for _ in range(20)])]
    call = draw(gen, 20, 32, 24, 6, 2, ids=ids)
    expected = naive_float64(**call)
    for e in (1, 4):
        call["w13"][e] = float("nan")
        call["w2"][e] = float("nan")
    out = ops.fused_experts(**call, backend="torch")
    torch.testing.assert_close(out.double(), expected, **tol(REFERENCE_VS_FLOAT64, F32))


def test_all_tokens_on_one_expert(gen):
    call = draw(gen, 50, 32, 24, 5, 1, ids=torch.full((50, 1), 3))
    check_against_loop(call, F32)


def test_top_k_equal_to_expert_count(gen):
    check_against_loop(draw(gen, 9, 32, 16, 4, 4), F32)


def test_repeated_expert_in_a_row_counts_per_slot(gen):
    call = draw(gen, 4, 16, 16, 3, 2, ids=torch.tensor([[1, 1], [0, 2], [2, 2], [0, 0]]))
    check_against_loop(call, F32)


def test_intermediate_size_one(gen):
    """I = 1 (w13 with 2 rows) is the smallest valid expert, not a shape error."""
    check_against_loop(draw(gen, 9, 16, 1, 4, 2), F32)


def test_a_single_expert(gen):
    """E = 1 (every token's one choice is expert 0) is the smallest valid layer, not a shape error."""
    check_against_loop(draw(gen, 5, 16, 8, 1, 1), F32)


def test_a_single_bad_id_is_named(gen):
    """Exactly one id out of range: the message names that id (not another entry, not an IndexError)."""
    call = draw(gen, 10, 16, 8, 6, 2)
    call["topk_ids"][3, 1] = 9
    with pytest.raises(ValueError, match=r"'topk_ids' has expert id 9 outside \[0, 6\)"):
        ops.fused_experts(**call, backend="torch")


def test_no_tokens(gen):
    call = draw(gen, 0, 16, 16, 3, 2)
    out = ops.fused_experts(**call, backend="torch")
    assert out.shape == (0, 16) and out.dtype == F32


def test_int32_ids_and_strided_hidden_states(gen):
    call = draw(gen, 12, 32, 16, 4, 2)
    wide = torch.randn(12, 40, generator=gen)
    wide[:, 8:] = call["hidden_states"]
    call["hidden_states"] = wide[:, 8:]
    call["topk_ids"] = call["topk_ids"].to(torch.int32)
    check_against_loop(call, F32)


# ----------------------------------------------------------------------------- bad input


def _put(name, make):
    def mutate(call):
        call[name] = make(call)
    return mutate


BAD = [
    ("id too large", _put("topk_ids", lambda c: torch.where(c["topk_ids"] == 0, 6, c["topk_ids"])), ValueError,
     r"'topk_ids' has expert id 6 outside \[0, 6\)"),
    ("id negative", _put("topk_ids", lambda c: torch.where(c["topk_ids"] == 0, -1, c["topk_ids"])), ValueError,
     r"'topk_ids' has expert id -1 outside \[0, 6\)"),
    ("ids float", _put("topk_ids", lambda c: c["topk_ids"].float()), TypeError, "'topk_ids'"),
    ("ids rows", _put("topk_ids", lambda c: c["topk_ids"][:-1]), ValueError, "'topk_ids'.*T = 10"),
    ("K > E", _put("topk_ids", lambda c: torch.zeros(10, 7, dtype=torch.int64)), ValueError,
     "'topk_ids' must have 1 <= K <= E = 6"),
    ("weights shape", _put("topk_weights", lambda c: c["topk_weights"][:, :1]), ValueError, "'topk_weights'"),
    ("weights int", _put("topk_weights", lambda c: c["topk_ids"].clone()), TypeError, "'topk_weights'"),
    ("hidden 1-D", _put("hidden_states", lambda c: c["hidden_states"][0]), ValueError, "'hidden_states'"),
    ("w13 hidden size", _put("w13", lambda c: c["w13"][:, :, :-1]), ValueError, "'w13'.*H = 16"),
    ("w13 odd rows", _put("w13", lambda c: c["w13"][:, :-1]), ValueError, "'w13' must have an even"),
    ("w2 experts", _put("w2", lambda c: c["w2"][:-1]), ValueError, "'w2'"),
    ("no experts", lambda c: c.update(w13=c["w13"][:0], w2=c["w2"][:0]), ValueError,
     "'w13' must hold at least one expert"),
    ("w2 inter", _put("w2", lambda c: c["w2"][:, :, :-1]), ValueError, "'w2'"),
    ("w2 dtype", _put("w2", lambda c: c["w2"].half()), TypeError, "'w2'"),
    ("ids on meta", _put("topk_ids", lambda c: c["topk_ids"].to("meta")), ValueError, "'topk_ids'"),
]


@pytest.mark.parametrize("mutate,error,match", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_bad_input_names_the_argument_and_writes_nothing(gen, mutate, error, match, backend):
    call = draw(gen, 10, 16, 8, 6, 2)
    mutate(call)
    before = {k: v.clone() for k, v in call.items() if not v.is_meta}
    with pytest.raises(error, match=match):
        ops.fused_experts(**call, backend=backend)
    for k, v in before.items():
        assert torch.equal(call[k], v), k


@pytest.mark.skipif("ascendc" not in _backend.available_backends(), reason="qwen_ops._C built without Ascend C")
def test_ascendc_dispatches_to_its_kernel(gen):
    """backend="ascendc" reaches the Ascend C kernel (tests/ascendc/test_ascendc_fused_experts.py tests it)."""
    call = draw(gen, 4, 16, 8, 3, 2)
    with ascendc_backend.launch_config():
        out = ops.fused_experts(**call, backend="ascendc")
        assert ascendc_backend.last_launch()["kernel"] == "fused_experts"
    torch.testing.assert_close(out, ops.fused_experts(**call, backend="torch"), **tol(KERNEL_VS_REFERENCE, torch.float32))


# ----------------------------------------------------------------------------- torch.compile


def test_fake_propagates_shape_and_checks(gen):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, w13, w2 = torch.empty(5, 16), torch.empty(4, 12, 16), torch.empty(4, 16, 6)
        w, ids = torch.empty(5, 2), torch.empty(5, 2, dtype=torch.int64)
        assert torch.ops.qwen_ops.fused_experts(x, w13, w2, w, ids, None).shape == (5, 16)
        with pytest.raises(ValueError, match="'w2'"):
            torch.ops.qwen_ops.fused_experts(x, w13, w2[:, :8], w, ids, None)


def test_compiles_with_the_router_fullgraph(gen):
    from qwen_ops.model.network.moe import route

    call = draw(gen, 6, 16, 8, 4, 2)
    router = torch.randn(4, 16, generator=gen)

    def moe(x, router, w13, w2):
        weights, ids = route(x, router, 2)
        return ops.fused_experts(x, w13, w2, weights, ids)

    args = (call["hidden_states"], router, call["w13"], call["w2"])
    compiled = torch.compile(moe, fullgraph=True, backend="inductor")
    torch.testing.assert_close(compiled(*args), moe(*args))
