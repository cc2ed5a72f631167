"""MTP speculative decoding with temperature / top-k / top-p through ``LLM``: the generated tokens follow the
target's own law (χ² over thousands of seeded requests), and per-request seeds are respected.

As vLLM 0.33 by default (``draft_sample_method="greedy"``), the MTP head drafts greedily and passes no draft
probabilities: the rejection sampler treats each draft as one-hot (accept with probability p(d), else draw
from p with d removed, renormalised). The law under test is that of the first four generated tokens
x1..x4: x1 comes from the prefill step, the others from verify steps (accepted drafts, recovered tokens or
bonus tokens), so every branch of a speculative step is covered, and the later tokens depend on the GDN state
rows earlier verify steps left. The expected law is computed exactly from
the target's logits (``LLM.score``) with an independent float64 filter (``naive_filtered_distribution``).
"""
import collections
import dataclasses

import pytest
import torch
from checkpoints import save_text_checkpoint_with_mtp
from test_components import naive_filtered_distribution
from test_mtp_rejection_sampler import chi_square_p_value

from qwen_ops import LLM, SamplingParams

VOCAB, K, N, LENGTH = 12, 2, 2000, 4
PROMPT = [3, 7, 1, 5]
ENGINE = dict(max_num_seqs=128, max_num_batched_tokens=512, block_size=4, max_model_len=32)
SETTINGS = [  # (temperature, top_k, top_p): each keeps few tokens, so the 3-token law has few cells
    (0.8, 3, 1.0),
    (1.0, 0, 0.45),
]


@pytest.fixture(scope="module")
def small_vocab_checkpoint(tmp_path_factory):
    return save_text_checkpoint_with_mtp(tmp_path_factory.mktemp("qwen35_mtp_v12"), seed=21, vocab_size=VOCAB)


@pytest.fixture(scope="module")
def engine(small_vocab_checkpoint):
    return LLM(small_vocab_checkpoint, speculative_config={"method": "mtp", "num_speculative_tokens": K}, **ENGINE)


class TargetLaw:
    """The target's filtered next-token distribution after ``PROMPT + generated`` (memoised ``score`` calls)."""

    def __init__(self, llm, temperature, top_k, top_p):
        self.llm, self.setting, self.memo = llm, (temperature, top_k, top_p), {}

    def next(self, generated: tuple[int, ...]) -> torch.Tensor:
        if generated not in self.memo:
            logits = self.llm.score(PROMPT + list(generated))[-1]
            self.memo[generated] = naive_filtered_distribution(logits, *self.setting)
        return self.memo[generated]

    def sequences(self, length: int) -> dict[tuple[int, ...], float]:
        law = {(): 1.0}
        for _ in range(length):
            law = {seq + (x,): prob * float(p) for seq, prob in law.items()
                   for x, p in enumerate(self.next(seq).tolist()) if p > 0}
        return law


def marginal(law, part: slice):
    """The law (or the counts) of the tokens ``seq[part]`` of sequences with probabilities (or counts) ``law``."""
    out = {}
    for seq, weight in law.items():
        out[seq[part]] = out.get(seq[part], 0) + weight
    return out


def favourite_drafter(llm, target: TargetLaw):
    """Replace the MTP proposer by one drafting the target's most likely continuation: accepted often, rejected
    sometimes, so accepted drafts, recovered tokens and bonus tokens all occur."""
    spec, scheduler = llm.model_runner.spec, llm.llm_engine.scheduler

    def propose(inputs, hidden, out, emitted, token_at, caches, step_inputs, meta=None):
        drafts = {}
        for request_id, new in emitted.items():
            generated = tuple(scheduler.requests[request_id].all_token_ids[len(PROMPT):]) + tuple(new)
            drafts[request_id] = []
            for _ in range(spec.k):
                drafts[request_id].append(int(target.next(generated).argmax()))
                generated += (drafts[request_id][-1],)
        return drafts

    return propose


def run(llm, setting, seeds):
    temperature, top_k, top_p = setting
    params = [SamplingParams(max_tokens=LENGTH, temperature=temperature, top_k=top_k, top_p=top_p, seed=s,
                             ignore_eos=True, detokenize=False) for s in seeds]
    return llm.generate([PROMPT] * len(seeds), params)


# The favourite drafter exercises every branch under both settings; the MTP head itself (random weights: it
# accepts ~3 % of its drafts) once, for its drafting from sampled tokens. Each case runs N requests (~15 s).
@pytest.mark.parametrize("drafter, setting", [("favourite", SETTINGS[0]), ("favourite", SETTINGS[1]),
                                              ("mtp", SETTINGS[0])])
def test_generated_tokens_follow_the_target_law(engine, setting, drafter):
    target = TargetLaw(engine, *setting)
    spec = engine.model_runner.spec
    mtp_propose = spec.propose
    if drafter == "favourite":
        spec.propose = favourite_drafter(engine, target)
    try:
        outputs = run(engine, setting, range(10_000, 10_000 + N))
    finally:
        spec.propose = mtp_propose
    sequences = [tuple(o.outputs[0].token_ids) for o in outputs]
    assert all(len(seq) == LENGTH for seq in sequences)
    law = target.sequences(LENGTH)
    assert abs(sum(law.values()) - 1) < 1e-9
    assert set(sequences) <= set(law), "a sequence of probability 0 under the target was generated"
    # The joint law of the first three tokens, and the marginal law of the fourth: it depends on the GDN
    # state rows that earlier verify steps left (a wrong accepted-row rule shows there).
    counts = collections.Counter(sequences)
    for part in (slice(0, 3), slice(3, LENGTH)):
        assert chi_square_p_value(marginal(counts, part), marginal(law, part), N) > 1e-4
    # Power: the same counts reject the first three tokens' law with each cell's probability moved by +-20 %.
    expected = marginal(law, slice(0, 3))
    tilted = {key: v * (1.2 if i % 2 else 0.8) for i, (key, v) in enumerate(sorted(expected.items()))}
    assert chi_square_p_value(marginal(counts, slice(0, 3)),
                              {key: v / sum(tilted.values()) for key, v in tilted.items()}, N) < 1e-4
    drafted = sum(o.metrics["spec_num_draft_tokens"] for o in outputs)
    accepted = sum(o.metrics["spec_num_accepted_tokens"] for o in outputs)
    assert drafted > 0
    if drafter == "favourite":  # every branch of the walk occurred
        assert 0.2 * drafted < accepted < drafted
        assert any(o.metrics["spec_mean_acceptance_length"] == K + 1 for o in outputs), \
            "no verify step accepted all its drafts (the bonus token)"


def test_seeded_requests_do_not_depend_on_the_batch(engine):
    """A seeded request gives the same tokens alone, twice, and among other (seeded and unseeded) requests."""
    params = SamplingParams(max_tokens=8, temperature=0.9, top_p=0.9, seed=77, ignore_eos=True,
                            detokenize=False)
    alone = engine.generate([PROMPT], params)[0].outputs[0].token_ids
    assert engine.generate([PROMPT], params)[0].outputs[0].token_ids == alone
    others = [SamplingParams(max_tokens=5, temperature=1.0, ignore_eos=True, detokenize=False),
              SamplingParams(max_tokens=8, temperature=0, detokenize=False)]
    mixed = engine.generate([[1, 2, 3], PROMPT, [4, 4, 4, 4, 4, 4]], [others[0], params, others[1]])
    assert mixed[1].outputs[0].token_ids == alone
    # Another seed gives other tokens (the seed is used at all).
    other_seed = dataclasses.replace(params, seed=78)
    assert engine.generate([PROMPT], other_seed)[0].outputs[0].token_ids != alone
