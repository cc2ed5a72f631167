"""The rejection sampler: exact greedy rules, and the target's distribution under sampling (χ² over many seeds)."""
import pytest
import torch
from test_components import naive_filtered_distribution

from qwen_ops.model.sample.rejection_sampler import rejection_sample
from qwen_ops.model.sample.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0)


def greedy_walk(logits, drafts):
    """Independent loop over the rule: accept while draft == argmax, then the argmax."""
    out = []
    for i, d in enumerate(drafts):
        best = int(torch.argmax(logits[i]))
        if d != best:
            return out + [best]
        out.append(d)
    return out + [int(torch.argmax(logits[len(drafts)]))]


def test_greedy_accepts_the_argmax_prefix_then_the_target_token(gen):
    vocab, cases = 50, []
    for k, mismatch in [(3, 0), (3, 1), (3, 2), (3, None), (1, None), (1, 0), (0, None), (4, 3)]:
        logits = torch.randn(k + 1, vocab, generator=gen)
        drafts = logits[:k].argmax(-1).tolist()
        if mismatch is not None:
            drafts[mismatch] = (drafts[mismatch] + 1) % vocab
        cases.append((logits, drafts, mismatch))
    result = rejection_sample(torch.cat([c[0] for c in cases]), [c[1] for c in cases], [GREEDY] * len(cases),
                              [None] * len(cases))
    for (logits, drafts, mismatch), tokens, accepted in zip(cases, result.token_ids, result.num_accepted):
        assert tokens == greedy_walk(logits, drafts)
        assert accepted == (len(drafts) if mismatch is None else mismatch)
        assert len(tokens) == accepted + 1


def test_greedy_speculation_reproduces_greedy_decoding_over_many_steps(gen):
    """A toy target whose next token is a fixed function of the context: whatever the drafts, the emitted
    stream equals plain greedy decoding."""
    vocab = 7
    table = torch.randn(vocab, vocab, vocab, generator=gen)  # logits from the last two tokens

    def logits_after(context):
        return table[context[-2], context[-1]]

    plain = [1, 2]
    while len(plain) < 40:
        plain.append(int(logits_after(plain).argmax()))
    spec, steps = [1, 2], 0
    while len(spec) < 40:
        k = int(torch.randint(0, 4, (1,), generator=gen))
        # Drafts: right with probability 1/2 each, so every accept length occurs.
        drafts, ctx = [], list(spec)
        for _ in range(k):
            right = int(logits_after(ctx).argmax())
            d = right if torch.rand(1, generator=gen) < 0.5 else (right + 1) % vocab
            drafts.append(d)
            ctx.append(d)
        rows = torch.stack([logits_after(spec + drafts[:i]) for i in range(k + 1)])
        spec += rejection_sample(rows, [drafts], [GREEDY], [None]).token_ids[0]
        steps += 1
    assert spec[:40] == plain
    assert steps < 38  # some drafts were accepted


def outcome_distribution(p_rows, q_rows):
    """Exact law of the emitted tuple under speculative sampling with drafts d_i ~ q_i (independent here):
    the walk accepts x at position i with probability min(p_i(x), q_i(x)), stops there emitting x with
    probability max(p_i(x) - q_i(x), 0), and emits the bonus x ~ p_k after k acceptances. Its first-token
    marginal is p_0 (min + max(. - ., 0) = p); a one-hot q gives plain sequential sampling of the target."""
    k, vocab = q_rows.shape
    dist = {(): 1.0}
    law = {}
    for i in range(k + 1):
        grown = {}
        for prefix, prob in dist.items():
            for x in range(vocab):
                if i == k:
                    stop, go = float(p_rows[i, x]), 0.0
                else:
                    stop = max(float(p_rows[i, x] - q_rows[i, x]), 0.0)
                    go = min(float(p_rows[i, x]), float(q_rows[i, x]))
                if stop > 0:
                    law[prefix + (x,)] = prob * stop
                if go > 0:
                    grown[prefix + (x,)] = prob * go
        dist = grown
    return law


def chi_square_p_value(counts, expected_probs, n):
    """p-value of Pearson's χ² goodness of fit (survival function via the regularised upper gamma)."""
    keys = sorted(expected_probs)
    stat = sum((counts.get(key, 0) - n * expected_probs[key]) ** 2 / (n * expected_probs[key]) for key in keys)
    df = len(keys) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


SETTINGS = [  # (temperature, top_k, top_p)
    (1.0, 0, 1.0),
    (0.7, 4, 1.0),
    (1.3, 0, 0.8),
]


@pytest.mark.parametrize("temperature, top_k, top_p", SETTINGS)
@pytest.mark.parametrize("drafter", ["deterministic", "sampled"])
def test_one_step_emits_the_target_distribution(gen, temperature, top_k, top_p, drafter):
    """Many requests, each with its own seed, run one step with k = 2 on the same rows; the emitted tuples
    follow the target's sequential distribution (χ² test), and the test rejects a wrong expectation."""
    vocab, k, n = 6, 2, 6000
    logits = torch.randn(k + 1, vocab, generator=gen) * 1.5
    p_rows = torch.stack([naive_filtered_distribution(row, temperature, top_k, top_p) for row in logits])
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    seeds = torch.randint(0, 2**62, (n,), generator=gen).tolist()
    generators = [torch.Generator().manual_seed(s) for s in seeds]
    q_rows = torch.softmax(torch.randn(k, vocab, generator=gen), -1)
    if drafter == "deterministic":
        # The target's favourites: accepted often, rejected sometimes, so every branch occurs.
        drafts = [[int(p_rows[0].argmax()), int(p_rows[1].argmax())]] * n
        draft_probs = None
    else:
        drafts = torch.stack([torch.multinomial(q_rows[i], n, replacement=True, generator=gen)
                              for i in range(k)], dim=1).tolist()
        draft_probs = q_rows.repeat(n, 1)
    result = rejection_sample(logits.repeat(n, 1), drafts, [params] * n, generators, draft_probs)
    counts = {}
    for tokens in result.token_ids:
        counts[tuple(tokens)] = counts.get(tuple(tokens), 0) + 1

    if drafter == "deterministic":
        q_rows = torch.nn.functional.one_hot(torch.tensor(drafts[0]), vocab).double()
    expected = outcome_distribution(p_rows.double(), q_rows.double())
    assert abs(sum(expected.values()) - 1) < 1e-9
    assert set(counts) <= set(expected), "an outcome of probability 0 was emitted"
    assert chi_square_p_value(counts, expected, n) > 1e-4
    # Power: the same counts against a 10 % perturbation of the right law are rejected.
    support = len(expected)
    perturbed = {key: 0.9 * v + 0.1 / support for key, v in expected.items()}
    assert chi_square_p_value(counts, perturbed, n) < 1e-6
    # The first emitted token alone follows p_0 whatever the drafter.
    first = {}
    for key, c in counts.items():
        first[key[:1]] = first.get(key[:1], 0) + c
    p0 = {(x,): float(p_rows[0, x]) for x in range(vocab) if p_rows[0, x] > 0}
    assert chi_square_p_value(first, p0, n) > 1e-4


def test_first_token_marginal_is_the_target(gen):
    """The first emitted token alone: its frequencies lie within 5 binomial sigmas of p_0."""
    vocab, n = 8, 8000
    logits = torch.randn(2, vocab, generator=gen)
    p0 = torch.softmax(logits[0].double(), -1)
    draft = int(p0.argmin())  # a poor draft: mostly rejected, so the residual branch dominates
    generators = [torch.Generator().manual_seed(1000 + i) for i in range(n)]
    result = rejection_sample(logits.repeat(n, 1), [[draft]] * n, [SamplingParams(temperature=1.0)] * n, generators)
    first = torch.bincount(torch.tensor([t[0] for t in result.token_ids]), minlength=vocab).double() / n
    assert bool(((first - p0).abs() <= 5 * torch.sqrt(p0 * (1 - p0) / n) + 1e-9).all())
    assert 0 < sum(result.num_accepted) < n


def test_seeded_request_does_not_depend_on_the_batch(gen):
    vocab = 30
    rows = torch.randn(3, vocab, generator=gen)
    params = SamplingParams(temperature=0.9, top_p=0.9)
    alone = rejection_sample(rows, [[1, 2]], [params], [torch.Generator().manual_seed(7)])
    others = torch.randn(4, vocab, generator=gen)
    batched = rejection_sample(torch.cat([others[:2], rows, others[2:]]), [[3], [1, 2], [5]],
                               [params, params, GREEDY], [torch.Generator().manual_seed(8),
                                                          torch.Generator().manual_seed(7), None])
    assert batched.token_ids[1] == alone.token_ids[0]


def test_placeholder_drafts_are_rejected(gen):
    """-1 pads a request to the decode shape: never accepted; the target's own token is emitted."""
    vocab = 9
    rows = torch.randn(3, vocab, generator=gen)
    greedy = rejection_sample(rows, [[-1, -1]], [GREEDY], [None])
    assert greedy.token_ids == [[int(rows[0].argmax())]] and greedy.num_accepted == [0]
    # Sampling: the emitted token follows p_0 itself (nothing was drafted to subtract).
    n = 4000
    p0 = torch.softmax(rows[0].double(), -1)
    result = rejection_sample(rows.repeat(n, 1), [[-1, -1]] * n, [SamplingParams(temperature=1.0)] * n,
                              [torch.Generator().manual_seed(50 + i) for i in range(n)],
                              draft_probs=torch.full((2 * n, vocab), 1 / vocab))
    assert all(len(t) == 1 for t in result.token_ids)
    counts = {(x,): c for x, c in enumerate(torch.bincount(torch.tensor([t[0] for t in result.token_ids]),
                                                           minlength=vocab).tolist())}
    assert chi_square_p_value(counts, {(x,): float(p0[x]) for x in range(vocab)}, n) > 1e-4


def test_bad_arguments_are_named():
    rows = torch.randn(3, 10)
    with pytest.raises(ValueError, match="sum\\(k_r \\+ 1\\) = 2 rows"):
        rejection_sample(rows, [[1]], [GREEDY], [None])
    with pytest.raises(ValueError, match=r"draft_token_ids\[0\] must hold token ids in \[0, 10\) or -1"):
        rejection_sample(rows, [[1, 10]], [GREEDY], [None])
    with pytest.raises(ValueError, match=r"draft_token_ids\[0\] must hold token ids in \[0, 10\) or -1"):
        rejection_sample(rows, [[1, -2]], [GREEDY], [None])
    with pytest.raises(ValueError, match="needs a torch.Generator"):
        rejection_sample(rows, [[1, 2]], [SamplingParams(temperature=1.0)], [None])
    with pytest.raises(TypeError, match="float32"):
        rejection_sample(rows.double(), [[1, 2]], [GREEDY], [None])
    with pytest.raises(ValueError, match="draft_probs"):
        rejection_sample(rows, [[1, 2]], [GREEDY], [None], draft_probs=torch.rand(3, 10))
    with pytest.raises(ValueError, match="one entry per request"):
        rejection_sample(rows, [[1, 2]], [GREEDY, GREEDY], [None])
