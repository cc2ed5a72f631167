"""The top-p cut-off on an exact tie, deterministically (the frequency tests only see it statistically).

Four equal logits give probabilities of exactly 0.25 (and exact cumulative
sums), so ``top_p = 0.5`` is reached exactly by the first two tokens: the
smallest set whose probability reaches top_p has 2 tokens, not 1 (cutting
where the sum *including* a token reaches top_p) and not 3 (cutting only
where the tokens before exceed it).
"""
import torch

from qwen_ops.model.sample.sampling import SamplingParams, _filter_top_k_top_p, sample


def kept(logits, top_p):
    vocab = logits.shape[-1]
    filtered = _filter_top_k_top_p(logits[None], torch.tensor([vocab]), torch.tensor([top_p]))[0]
    return torch.isfinite(filtered).nonzero().flatten().tolist(), filtered


def test_top_p_tie_keeps_exactly_the_tokens_that_reach_it():
    logits = torch.zeros(4)
    tokens, filtered = kept(logits, 0.5)
    assert len(tokens) == 2
    assert torch.equal(filtered[tokens], logits[tokens])  # kept logits are unchanged
    # Just past the tie a third token is needed; just below it, one less would not do either.
    assert len(kept(logits, 0.5 + 1e-6)[0]) == 3
    assert len(kept(logits, 0.25)[0]) == 1
    assert len(kept(logits, 1.0)[0]) == 4


def test_sampling_on_a_tie_draws_only_the_kept_tokens():
    """Through ``sample``: 200 draws with top_p 0.5 over four equal logits hit exactly two tokens."""
    logits = torch.zeros(1, 4)
    params = [SamplingParams(temperature=1.0, top_p=0.5)]
    drawn = set()
    for seed in range(200):
        tokens, _ = sample(logits, params, [torch.Generator().manual_seed(seed)])
        drawn.add(tokens[0])
    assert drawn == set(kept(logits[0], 0.5)[0])
