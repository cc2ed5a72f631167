"""Triton ``fused_experts`` (grouped GEMM over the experts' pair ranges) against the torch reference.

Under Triton's interpreter on the CPU (``tests/conftest.py``), float32 and
float16 (bf16 ``tl.dot`` is wrong in the interpreter: bf16 runs on a GPU only).
Cases: random routing with ragged expert ranges (more 16-pair blocks than
programs, partial blocks, H and I not multiples of the 32 tiles), experts with
no token (NaN weights that must never be read), every token on one expert
(many blocks of one expert), top-k equal to the expert count, one decode
token, no tokens, strided inputs, and the block layout itself.
"""
from __future__ import annotations

import os
import sys

import pytest
import torch
from tolerances import KERNEL_VS_REFERENCE, tol

from qwen_ops import ops

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ops"))
from moe_cases import draw, experts_without_tokens  # noqa: E402

INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = torch.device("cuda" if torch.cuda.is_available() and not INTERPRETING else "cpu")
NEEDS_GPU = pytest.mark.skipif(DEVICE.type != "cuda",
                               reason="bf16 tl.dot is wrong under the Triton interpreter; runs on a GPU/NPU only")
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


def compare(call, dtype):
    on_device = {k: v.to(DEVICE) for k, v in call.items()}
    ref = ops.fused_experts(**on_device, backend="torch")
    out = ops.fused_experts(**on_device, backend="triton")
    assert out.dtype == dtype and out.shape == ref.shape
    torch.testing.assert_close(out.cpu(), ref.cpu(), **tol(KERNEL_VS_REFERENCE, dtype))


@pytest.mark.parametrize("dtype", [F32, F16])
def test_random_routing(gen, dtype):
    compare(draw(gen, 37, 48, 40, 6, 3, dtype), dtype)


def test_experts_without_tokens_are_never_read(gen):
    compare(experts_without_tokens(gen), F32)


def test_all_tokens_on_one_expert(gen):
    """70 pairs on expert 2: five 16-pair blocks of one expert, the last partial."""
    compare(draw(gen, 70, 32, 24, 4, 1, ids=torch.full((70, 1), 2)), F32)


def test_top_k_equal_to_expert_count(gen):
    compare(draw(gen, 11, 32, 40, 4, 4), F32)


def test_one_decode_token_and_repeated_expert(gen):
    compare(draw(gen, 1, 64, 32, 16, 4), F32)
    compare(draw(gen, 3, 16, 16, 3, 2, ids=torch.tensor([[1, 1], [0, 2], [2, 2]])), F32)


def test_no_tokens(gen):
    call = {k: v.to(DEVICE) for k, v in draw(gen, 0, 16, 16, 3, 2).items()}
    out = ops.fused_experts(**call, backend="triton")
    assert out.shape == (0, 16) and out.dtype == F32


def test_strided_inputs(gen):
    """hidden_states a column slice, w13/w2 transposed views, int32 ids: strides are honoured."""
    call = draw(gen, 19, 32, 24, 5, 2, F16)
    wide = torch.randn(19, 48, generator=gen).half()
    wide[:, 16:] = call["hidden_states"]
    call["hidden_states"] = wide[:, 16:]
    call["w13"] = call["w13"].transpose(1, 2).contiguous().transpose(1, 2)
    call["w2"] = call["w2"].transpose(0, 1).contiguous().transpose(0, 1)
    assert not call["w13"].is_contiguous() and not call["w2"].is_contiguous()
    call["topk_ids"] = call["topk_ids"].to(torch.int32)
    compare(call, F16)


def test_block_layout_covers_every_pair_once(gen):
    from qwen_ops.ops.moe.triton_grouped_gemm import expert_blocks

    ids = torch.tensor([[3, 0], [3, 1], [0, 3], [3, 2], [3, 0]])
    pairs, start, end, expert = expert_blocks(ids, 5, 2)
    flat = ids.reshape(-1)
    covered = torch.cat([pairs[s:e] for s, e in zip(start.tolist(), end.tolist())])
    assert sorted(covered.tolist()) == list(range(10))
    for s, e, x in zip(start.tolist(), end.tolist(), expert.tolist()):
        assert e - s <= 2 and bool((flat[pairs[s:e]] == x).all())
    # expert 4 has no pair, so no block; counts 3, 1, 1, 5 -> 2 + 1 + 1 + 3 blocks of 2
    assert sum(e > s for s, e in zip(start.tolist(), end.tolist())) == 7


@pytest.mark.gpu
@NEEDS_GPU
def test_bf16_35b_a3b_shape(gen):
    """Qwen3.5-35B-A3B's expert shape (H 2048, I 512, 256 experts, top-8) for a 64-token batch."""
    compare(draw(gen, 64, 2048, 512, 256, 8, BF16), BF16)
