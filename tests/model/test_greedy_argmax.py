"""greedy_argmax returns exactly torch.argmax's index (first maximum), on the shapes the sampler sees and
on the cases a block-wise search could get wrong: ties across and inside blocks, the short last block,
the last position, rows of -inf, NaN, a small vocabulary and a non-contiguous view. linear_greedy_argmax
(the head's argmax taken slice by slice, without the logits) returns the argmax of ``linear``'s logits
on the same kinds of cases across its slices."""
import pytest
import torch

from qwen_ops.model.network.greedy_head import head_slice_rows, linear_greedy_argmax
from qwen_ops.model.sample.greedy_argmax import BLOCK, MIN_VOCAB, greedy_argmax
from qwen_ops.model.network.layers import linear


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


# ----------------------------------------------------------------------------- the head's argmax without logits

def integer_head(rows: int, vocab: int, hidden: int, seed: int):
    """Small-integer hidden states and weight: every logit is an exact integer in float32, whatever order a
    kernel sums in, so ties are real ties."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(-3, 4, (rows, hidden), generator=g).float(),
            torch.randint(-3, 4, (vocab, hidden), generator=g).float())


def check_head(hidden: torch.Tensor, weight: torch.Tensor, **kwargs) -> torch.Tensor:
    got = linear_greedy_argmax(hidden, weight, **kwargs)
    logits = linear(hidden, weight).float()
    assert got.dtype == torch.int64 and got.shape == hidden.shape[:1]
    assert torch.equal(got, logits.argmax(dim=-1))
    return got


@pytest.mark.parametrize("rows", [1, 5, 16, 17, 32])
def test_head_argmax_matches_the_logits_argmax_at_the_default_model_shape(rows):
    """The default model's lm_head ([248320, 128]): many slices at 32 rows, one at 1 row."""
    g = torch.Generator().manual_seed(rows)
    weight = torch.randn(248320, 128, generator=g) * 0.02
    hidden = torch.randn(rows, 128, generator=g)
    check_head(hidden, weight)  # the default (one slice)
    check_head(hidden, weight, slice_rows=head_slice_rows(rows, 248320, slice_bytes=1 << 20))


@pytest.mark.parametrize("rows", [1, 16, 32])
def test_head_slices_compute_the_same_logits_as_the_whole_head(rows):
    """The premise of the sliced argmax: ``linear`` gives an output column the same bits whatever the other
    rows of the weight, on the shapes the engine slices (a projection kernel that broke this would make the
    sliced argmax differ from the logits' argmax on near-ties)."""
    g = torch.Generator().manual_seed(100 + rows)
    weight, hidden = torch.randn(40 * BLOCK, 128, generator=g), torch.randn(rows, 128, generator=g)
    whole = linear(hidden, weight)
    step = head_slice_rows(32, weight.shape[0], slice_bytes=1 << 20)
    assert step < weight.shape[0]
    for start in range(0, weight.shape[0], step):
        assert torch.equal(linear(hidden, weight[start:start + step]), whole[:, start:start + step]), start


def test_head_argmax_ties_nan_and_slice_edges():
    step = 2 * BLOCK
    hidden, weight = integer_head(6, 7 * step + 300, 16, seed=3)  # a short last slice
    top = torch.full((16,), 3.0)  # a weight row whose logit beats every random one for all-positive rows
    hidden[:] = hidden.abs() + 1
    for r in (5, 3 * step + 1, 6 * step):  # a tie across slices: the first wins
        weight[r] = top
    assert check_head(hidden, weight, slice_rows=step).tolist() == [5] * 6
    weight[5] = 0.0
    weight[3 * step + 1] = 0.0
    weight[[step - 1, step]] = top  # a tie straddling a slice boundary
    assert check_head(hidden, weight, slice_rows=step).tolist() == [step - 1] * 6
    weight[7 * step + 299] = top * 2  # the very last row, inside the short slice
    assert check_head(hidden, weight, slice_rows=step).tolist() == [7 * step + 299] * 6
    weight[4 * step + 7, 0] = float("nan")  # a NaN counts as the maximum, the first NaN wins
    weight[6 * step + 1, 3] = float("nan")
    assert check_head(hidden, weight, slice_rows=step).tolist() == [4 * step + 7] * 6
    check_head(hidden, torch.zeros_like(weight), slice_rows=step)  # all equal: index 0
    check_head(hidden[:0], weight, slice_rows=step)


@pytest.mark.parametrize("slice_rows", [BLOCK, 3 * BLOCK + 5, None])
def test_head_argmax_any_slice_size(slice_rows):
    hidden, weight = integer_head(9, 20 * BLOCK + 11, 8, seed=slice_rows or 0)  # many exact ties
    check_head(hidden, weight, slice_rows=slice_rows)
    check_head(hidden.to(torch.bfloat16), weight.to(torch.bfloat16), slice_rows=slice_rows)


def test_head_argmax_refuses_bad_shapes():
    with pytest.raises(ValueError, match=r"linear_greedy_argmax: hidden must be \[S, H\] and weight \[V, H\]"):
        linear_greedy_argmax(torch.zeros(2, 8), torch.zeros(100, 9))
    with pytest.raises(ValueError, match="linear_greedy_argmax"):
        linear_greedy_argmax(torch.zeros(8), torch.zeros(100, 8))


@pytest.mark.parametrize("rows", [1, 16, "max", "max+1"])
def test_an_int8_head_gives_the_argmax_and_logits_of_its_own_projection(rows):
    # "int8_weight_only" heads the model with an Int8Weight: the greedy tokens and the logits are those of
    # layers.linear over it (the INT8 kernel up to WEIGHT_ONLY_KERNEL_MAX_ROWS rows, else dequantized a
    # slice of INT8_HEAD_SLICE_ROWS at a time), across several slices and the short last one.
    from qwen_ops.model.loading.quantization import weight_only_int8
    from qwen_ops.model.network.greedy_head import INT8_HEAD_SLICE_ROWS, head_logits, head_rows
    from qwen_ops.model.network.layers import WEIGHT_ONLY_KERNEL_MAX_ROWS

    rows = {"max": WEIGHT_ONLY_KERNEL_MAX_ROWS, "max+1": WEIGHT_ONLY_KERNEL_MAX_ROWS + 1}.get(rows, rows)
    g = torch.Generator().manual_seed(rows)
    vocab, hidden_size = 2 * INT8_HEAD_SLICE_ROWS + 3 * BLOCK + 5, 64
    head = weight_only_int8(torch.randn(vocab, hidden_size, generator=g))
    hidden = torch.randn(rows, hidden_size, generator=g)
    whole = linear(hidden, head).float()  # one call over the whole INT8 head
    logits = head_logits(hidden, head)
    torch.testing.assert_close(logits, whole, rtol=0, atol=1e-5)  # same products; dequantized slices round alike
    assert torch.equal(linear_greedy_argmax(hidden, head), logits.argmax(dim=-1))
    part = head_rows(head, INT8_HEAD_SLICE_ROWS, vocab)
    assert part.weight.shape == (vocab - INT8_HEAD_SLICE_ROWS, hidden_size) and part.scheme == head.scheme
    assert torch.equal(part.weight_scale, head.weight_scale[INT8_HEAD_SLICE_ROWS:])
