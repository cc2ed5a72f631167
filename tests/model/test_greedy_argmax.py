"""greedy_argmax returns exactly torch.argmax's index (first maximum), on the shapes the sampler sees and
on the cases a block-wise search could get wrong: ties across and inside blocks, the short last block,
the last position, rows of -inf, NaN, a small vocabulary and a non-contiguous view."""
import pytest
import torch

from qwen_ops.model.greedy_argmax import BLOCK, MIN_VOCAB, greedy_argmax


def check(logits: torch.Tensor) -> None:
    got = greedy_argmax(logits)
    assert got.dtype == torch.int64 and got.shape == logits.shape[:1]
    assert torch.equal(got, logits.argmax(dim=-1))


@pytest.mark.parametrize("rows", [1, 3, 32])
@pytest.mark.parametrize("vocab", [MIN_VOCAB, MIN_VOCAB + 1, 248320, 10 * BLOCK + 7])
def test_random_logits_match_argmax(rows, vocab):
    check(torch.randn(rows, vocab, generator=torch.Generator().manual_seed(rows * vocab)))


def test_ties_and_edges_match_argmax():
    vocab = 9 * BLOCK + 100  # a short last block
    logits = torch.randn(8, vocab, generator=torch.Generator().manual_seed(0))
    logits[0, [5, 3 * BLOCK + 1, 8 * BLOCK]] = 50.0  # a tie across blocks: the first wins
    logits[1, [2 * BLOCK + 9, 2 * BLOCK + 3]] = 50.0  # a tie inside one block
    logits[2, vocab - 1] = 50.0  # the very last position (inside the short block)
    logits[3, [9 * BLOCK + 1, vocab - 1]] = 50.0  # a tie inside the short block
    logits[4] = float("-inf")  # nothing finite: index 0, as argmax
    logits[5] = 1.0  # all equal
    logits[6, [BLOCK - 1, BLOCK]] = 50.0  # a tie straddling a block boundary
    logits[7, 9 * BLOCK - 1] = 50.0  # the end of the last full block
    check(logits)
    assert greedy_argmax(logits)[:4].tolist() == [5, 2 * BLOCK + 3, vocab - 1, 9 * BLOCK + 1]


def test_nan_rows_match_argmax():
    logits = torch.randn(4, 2 * MIN_VOCAB, generator=torch.Generator().manual_seed(1))
    logits[1, 777] = float("nan")
    logits[2, [100, 5000]] = float("nan")
    check(logits)


def test_small_vocab_views_and_dtypes_match_argmax():
    check(torch.randn(5, 100))
    check(torch.randn(0, MIN_VOCAB))
    wide = torch.randn(6, 3 * MIN_VOCAB, generator=torch.Generator().manual_seed(2))
    check(wide[:, 10: 10 + 2 * MIN_VOCAB])  # a view with a row stride wider than its rows
    check(wide.to(torch.bfloat16))


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="greedy_argmax: logits must be a 2-D floating tensor"):
        greedy_argmax(torch.zeros(MIN_VOCAB, dtype=torch.int64)[None])
    with pytest.raises(ValueError, match="greedy_argmax"):
        greedy_argmax(torch.zeros(2, 3, MIN_VOCAB))
