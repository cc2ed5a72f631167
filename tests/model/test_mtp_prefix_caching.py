"""MTP speculation with prefix caching (vLLM 0.33's align mode with an EAGLE/MTP drafter): greedy tokens and
logprobs equal those without either, including prompts served a second time from the cache -- the case
vllm-ascend users report corrupted output for (#14339, #17338; vllm#53912).

What makes it right, as in vLLM: a hit stops one matched attention block short (the MTP head's KV at a
block's last position was computed from the next block's first token, so that block is recomputed), GDN
states are cached one block lower to match; each request's GDN state window is the 1 + k pages from its
state column, a moved column takes the state of the last accepted token, and a verify step that crosses a
block boundary leaves the state at the boundary in that block's page, the page the scheduler caches.
"""
import pytest
import torch
from test_mtp_engine import mtp, replaying_drafter, tokens
from test_mtp_requests import run
from test_prefix_caching import B, assert_same, prefix_cases, random_tokens, sharing_prompts

from qwen_ops import LLM, SamplingParams

GREEDY = SamplingParams(max_tokens=12, temperature=0, logprobs=1, detokenize=False)
ENGINE = dict(num_blocks=200, max_num_seqs=4, max_num_batched_tokens=40, block_size=B)


def serve(llm, prompts, params=GREEDY):
    """Each prompt alone (later ones can hit what earlier ones cached), each a second time (a full-prompt
    hit), then all of them in one step's arrivals."""
    alone = [llm.generate([p], params)[0] for p in prompts]
    again = [llm.generate([p], params)[0] for p in prompts]
    return alone + again + llm.generate(prompts, params)


@pytest.fixture(scope="module")
def plain(text_mtp_checkpoint):
    return LLM(text_mtp_checkpoint, enable_prefix_caching=False, **ENGINE)


def cases(gen):
    """The prefix-caching tests' cases, and a prompt long enough for a full-prompt hit despite the drop."""
    return prefix_cases(gen) + [("long-whole-prompt", [random_tokens(gen, int(torch.randint(3 * B + 1, 5 * B, (),
                                                                                          generator=gen)))])]


@pytest.mark.parametrize("k", [1, 3])
def test_mtp_with_prefix_caching_equals_neither(text_mtp_checkpoint, plain, gen, k):
    llm = LLM(text_mtp_checkpoint, enable_prefix_caching=True, mamba_cache_mode="align", speculative_config=mtp(k), **ENGINE)
    assert llm.scheduler_config.enable_prefix_caching and llm.scheduler_config.block_size == B
    for name, prompts in cases(gen):
        got, want = serve(llm, prompts), serve(plain, prompts)
        assert_same(got, want)
        hits = [o.num_cached_tokens for o in got]
        assert all(h % B == 0 and h < len(o.prompt_token_ids) for h, o in zip(hits, got))
        # A prompt served a second time hits its own blocks but the last one with its last token (the MTP
        # drop): (n - 1) // B - 1 blocks.
        for o, prompt in zip(got[len(prompts):2 * len(prompts)], prompts):
            assert o.num_cached_tokens == max((len(prompt) - 1) // B - 1, 0) * B, name
        if name == "long-whole-prompt":
            assert hits[1] >= 2 * B
        assert all(o.metrics["spec_num_drafts"] > 0 for o in got)


def test_accepted_drafts_move_the_state_column(text_mtp_checkpoint, plain, gen):
    """A drafter replaying the answer has every draft accepted, so the state column moves while the last
    accepted token's state sits k pages into the window: the copy must take that page. Served twice (the
    second time from the cache), the tokens equal the plain run's."""
    k = 3
    prompt = random_tokens(gen, 3 * B + 7)
    params = SamplingParams(max_tokens=3 * B, temperature=0, logprobs=1, detokenize=False)
    longer = SamplingParams(max_tokens=3 * B + k, temperature=0, detokenize=False)
    answer = tokens(plain.generate([prompt], longer))[0]
    llm = LLM(text_mtp_checkpoint, enable_prefix_caching=True, mamba_cache_mode="align", speculative_config=mtp(k), **ENGINE)
    replaying_drafter(llm, {"r0": prompt + answer}, 0)
    first = run(llm, [prompt], params)[0]
    assert first.metrics["spec_acceptance_rate"] == 1.0
    replaying_drafter(llm, {"r0": prompt + answer}, 0)
    second = run(llm, [prompt], params)[0]
    assert second.num_cached_tokens == ((len(prompt) - 1) // B - 1) * B
    want = plain.generate([prompt], params)[0]
    assert_same([first, second], [want, want])


def recording_drafts(llm):
    """Wrap the MTP proposer: record every draft it makes, and the MTP layer's keys of the request's known
    positions when it first drafts for it (after its prefill), per request."""
    spec, drafts, keys = llm.model_runner.spec, {}, {}
    propose = spec.propose
    layer = spec.mtp.layer_ids[0]

    def recording(inputs, hidden, out, emitted, token_at, caches, step_inputs, meta=None):
        made = propose(inputs, hidden, out, emitted, token_at, caches, step_inputs, meta)
        for request_id, tokens in made.items():
            drafts.setdefault(request_id, []).append(tokens)
            if request_id not in keys:
                table, size = out.block_ids[request_id], caches.block_size
                known = out.num_computed_tokens[request_id] + out.num_scheduled_tokens[request_id]
                keys[request_id] = torch.stack([caches.key_caches[layer][table[p // size], :, p % size]
                                                for p in range(known)])
        return made

    spec.propose = recording
    return drafts, keys


def test_a_sibling_hit_drafts_as_without_the_cache(text_mtp_checkpoint, gen):
    """Siblings sharing a prefix that ends exactly on a block boundary: the MTP head's KV at the prefix's last
    position was computed from the first sibling's next token, so a hit must not cover it (the dropped
    block). The head's KV and drafts then equal those of a fresh engine, whose prefill chunks end at the
    same block boundaries (the same arithmetic, so equal bit for bit)."""
    prompts = sharing_prompts(gen, 3 * B, [9, 5, 11])
    params = SamplingParams(max_tokens=8, temperature=0, detokenize=False)

    def engine():
        llm = LLM(text_mtp_checkpoint, enable_prefix_caching=True, mamba_cache_mode="align", speculative_config=mtp(2), **ENGINE)
        return (llm, *recording_drafts(llm))

    shared, shared_drafts, shared_keys = engine()
    outs = [shared.generate([p], params)[0] for p in prompts]
    assert [o.num_cached_tokens for o in outs] == [0, 2 * B, 2 * B]
    for prompt, out in zip(prompts, outs):
        fresh, fresh_drafts, fresh_keys = engine()
        alone = fresh.generate([prompt], params)[0]
        assert alone.num_cached_tokens == 0
        assert out.outputs[0].token_ids == alone.outputs[0].token_ids
        # Every known position has the head's KV, those of prefill chunks that did not sample included.
        assert bool(fresh_keys[alone.request_id].abs().amax(dim=(1, 2)).gt(0).all())
        assert torch.equal(shared_keys[out.request_id], fresh_keys[alone.request_id])
        assert shared_drafts[out.request_id] == fresh_drafts[alone.request_id]


def test_mtp_prefix_caching_under_preemption(text_mtp_checkpoint, plain, gen):
    prompts = sharing_prompts(gen, 2 * B, [14, 9, 3, 12])
    params = SamplingParams(max_tokens=16, temperature=0, logprobs=1, detokenize=False)
    # 27 usable blocks: each request holds 3 groups x (2 + k) GDN pages besides its KV blocks.
    scarce = LLM(text_mtp_checkpoint, num_blocks=28, max_num_seqs=4, max_num_batched_tokens=32,
                 enable_prefix_caching=True, mamba_cache_mode="align", block_size=B, speculative_config=mtp(2))
    warm = scarce.generate(prompts[:1], params)
    got = scarce.generate(prompts, params)
    assert_same(warm + got, plain.generate(prompts[:1], params) + plain.generate(prompts, params))
    assert sum(s.num_preempted for s in scarce.step_stats) > 0
    assert any(o.num_cached_tokens for o in got)
