"""Prefix caching (vLLM 0.33's align mode, GDN states in the pool's pages) does not change what the model computes.

Prompts share prefixes of random lengths: shorter than a block (no hit is possible), exactly on a block
boundary, several blocks and a bit, and the whole prompt. With prefix caching on, greedy tokens equal those
with it off and logprobs agree within the float32 tolerance of the transformers parity tests
(``MODEL_VS_TRANSFORMERS``, 1e-4): a hit changes only where the prefill chunks start (the attention reads
the cached blocks instead of the chunk's own keys, the GDN chunked scan starts from the cached state), so
only the float32 summation order differs (measured max |diff| 2.6e-6 over these cases on torch). A wrong
state (a missed copy, the wrong page) changes the logprobs by far more.
"""
import pytest
import torch

import qwen_ops.ops as ops
from qwen_ops import LLM, SamplingParams
from tolerances import MODEL_VS_TRANSFORMERS

ATOL, _ = MODEL_VS_TRANSFORMERS[torch.float32]
GREEDY = SamplingParams(max_tokens=4, temperature=0, logprobs=1, detokenize=False)
B = 16  # the tiny float32 checkpoint's attention page of 16 tokens holds a GDN page: no raise


def random_tokens(gen, n):
    return torch.randint(1, 256, (n,), generator=gen).tolist()


def sharing_prompts(gen, prefix_len, tails):
    """Prompts made of one random prefix of ``prefix_len`` tokens and random tails of the given lengths."""
    prefix = random_tokens(gen, prefix_len)
    return [prefix + random_tokens(gen, t) for t in tails]


def prefix_cases(gen):
    """(name, prompts) for every kind of shared prefix, lengths drawn at random within the kind."""
    short = int(torch.randint(1, B, (), generator=gen))
    boundary = B * int(torch.randint(1, 3, (), generator=gen))
    several = int(torch.randint(2 * B + 1, 4 * B, (), generator=gen))
    whole = random_tokens(gen, int(torch.randint(B + 1, 3 * B, (), generator=gen)))
    return [("shorter-than-a-block", sharing_prompts(gen, short, [9, 20, 4])),
            ("block-boundary", sharing_prompts(gen, boundary, [5, 19, 3])),
            ("several-blocks", sharing_prompts(gen, several, [7, 2, 30])),
            ("whole-prompt", [list(whole), list(whole), list(whole)])]


def run(llm, prompts):
    """Each prompt alone (later ones can hit what earlier ones cached), then all of them in one step's
    arrivals (same-step hits are deferred a step)."""
    outs = [llm.generate([p], GREEDY)[0] for p in prompts]
    return outs + llm.generate(prompts, GREEDY)


def assert_same(with_cache, without):
    for a, b in zip(with_cache, without):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        for lp_a, lp_b in zip(a.outputs[0].logprobs, b.outputs[0].logprobs):
            assert lp_a.keys() == lp_b.keys()
            for token in lp_a:
                assert lp_a[token] == pytest.approx(lp_b[token], abs=ATOL)


def engines(checkpoint, **kwargs):
    on = LLM(checkpoint, enable_prefix_caching=True, mamba_cache_mode="align", **kwargs)
    off = LLM(checkpoint, enable_prefix_caching=False, **kwargs)
    return on, off


def test_prefix_caching_equals_no_prefix_caching(text_checkpoint, gen):
    on, off = engines(text_checkpoint, num_blocks=160, max_num_seqs=4, max_num_batched_tokens=40, block_size=B)
    assert on.scheduler_config.block_size == B and on.scheduler_config.enable_prefix_caching
    for name, prompts in prefix_cases(gen):
        with_cache, without = run(on, prompts), run(off, prompts)
        assert_same(with_cache, without)
        hits = [o.num_cached_tokens for o in with_cache]
        assert all(o.num_cached_tokens == 0 for o in without)
        assert all(h % B == 0 and h < len(o.prompt_token_ids) for h, o in zip(hits, with_cache))
        if name == "shorter-than-a-block":
            assert not any(hits[:3]), name  # nothing whole-block is shared between different prompts
        else:
            assert any(hits), name


def test_repeated_prompt_reports_a_hit(text_checkpoint, gen):
    llm = LLM(text_checkpoint, num_blocks=64, max_num_seqs=2, block_size=B, enable_prefix_caching=True,
              mamba_cache_mode="align")
    prompt = random_tokens(gen, 50)
    first, second = (llm.generate([prompt], GREEDY)[0] for _ in range(2))
    assert first.num_cached_tokens == 0
    # The state after 48 tokens (the last block boundary before the last prompt token) was cached.
    assert second.num_cached_tokens == 48
    assert second.outputs[0].token_ids == first.outputs[0].token_ids


def test_prefix_caching_under_preemption(text_checkpoint, gen):
    prompts = sharing_prompts(gen, 2 * B, [14, 9, 3, 12])
    params = SamplingParams(max_tokens=16, temperature=0, logprobs=1, detokenize=False)
    plenty = LLM(text_checkpoint, num_blocks=128, max_num_seqs=4, enable_prefix_caching=False, block_size=B)
    # 15 usable blocks of 16 tokens: four ~60-token requests each holding up to 2 GDN pages per group
    # (3 groups) cannot all stay resident.
    scarce = LLM(text_checkpoint, num_blocks=16, max_num_seqs=4, max_num_batched_tokens=32,
                 enable_prefix_caching=True, mamba_cache_mode="align", block_size=B)
    warm = scarce.generate(prompts[:1], params)  # caches the shared prefix for the batch
    expected = plenty.generate(prompts, params)
    got = scarce.generate(prompts, params)
    assert_same(warm + got, plenty.generate(prompts[:1], params) + expected)
    assert sum(s.num_preempted for s in scarce.step_stats) > 0
    assert any(o.num_cached_tokens for o in got)


@pytest.mark.skipif("triton" not in ops.available_backends(), reason="no Triton package installed")
def test_prefix_caching_on_triton(text_checkpoint, gen):
    """One small case under the Triton interpreter: a 16-token shared prefix whose state the first request
    caches at its replay boundary, so the second starts from it."""
    prompts = sharing_prompts(gen, B, [5, 3])
    params = SamplingParams(max_tokens=2, temperature=0, logprobs=1, detokenize=False)
    on, off = engines(text_checkpoint, num_blocks=24, max_num_seqs=2, block_size=B, backend="triton")
    with_cache = [on.generate([p], params)[0] for p in prompts]
    without = [off.generate([p], params)[0] for p in prompts]
    assert_same(with_cache, without)
    assert [o.num_cached_tokens for o in with_cache] == [0, B]


def test_every_hit_says_why_it_stopped(text_checkpoint, gen):
    # Align mode on the tiny checkpoint (B = 16): a resend of a 50-token prompt hits 48 tokens and stops
    # there for good ("full": no block boundary is left before its last token); a 20-token prompt sharing
    # only 10 tokens finds no attention block.
    llm = LLM(text_checkpoint, num_blocks=64, max_num_seqs=2, enable_prefix_caching=True, mamba_cache_mode="align")
    prompt = random_tokens(gen, 50)
    first = llm.generate([prompt], GREEDY)[0]
    again = llm.generate([prompt], GREEDY)[0]
    other = llm.generate([prompt[:10] + random_tokens(gen, 10)], GREEDY)[0]
    assert first.metrics["prefix_hit_reason"] == "no_attention_block" and first.num_cached_tokens == 0
    assert again.num_cached_tokens == 48 and again.metrics == {**again.metrics, "num_cached_tokens": 48,
                                                                "prefix_hit_reason": "full"}
    assert other.metrics["prefix_hit_reason"] == "no_attention_block"
    stats = llm.llm_engine.scheduler.prefix_cache_stats.as_dict()
    assert stats["requests"] == 3 and stats["hit_tokens"] == 48
    assert stats["reasons"]["full"] == 1 and stats["reasons"]["no_attention_block"] == 2
