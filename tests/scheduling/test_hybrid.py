"""Hybrid (GDN + attention) models: vLLM 0.33's one-pool layout, "none" and "align" modes, hand-checked cases.

The step-for-step comparison with vLLM itself is bench/scheduler/compare_vllm.py --hybrid
(vLLM is not a test dependency); these cases pin the rules it exercises.
"""

import pytest
from sched_helpers import make_request, make_scheduler, step

from qwen_ops.scheduling import Request, SchedulerConfig
from qwen_ops.scheduling.block_pool import NULL_BLOCK


def align_scheduler(**overrides):
    config = dict(num_gdn_groups=3, enable_prefix_caching=True, block_size=16, max_num_batched_tokens=64,
                  max_model_len=256, num_blocks=64)
    config.update(overrides)
    return make_scheduler(**config)


def run_to_end(s, max_steps=200):
    outs = []
    for _ in range(max_steps):
        if not s.has_unfinished_requests():
            return outs
        outs.append(step(s)[0])
    raise AssertionError("workload did not finish")


def live_gdn_pages(out, request_id, num_gdn_groups=3):
    return [sum(b != NULL_BLOCK for b in table) for table in out.group_block_ids[request_id][:num_gdn_groups]]


def test_none_mode_holds_one_page_per_gdn_group_plus_the_speculative_ones():
    s = make_scheduler(num_gdn_groups=3, num_speculative_tokens=2, max_model_len=64)
    s.add_request(make_request("a", 10, max_tokens=6))
    for out in run_to_end(s):
        if "a" in out.group_block_ids:
            assert [len(t) for t in out.group_block_ids["a"][:3]] == [3, 3, 3]  # 1 + 2 speculative pages
            assert out.group_block_ids["a"][3] is out.block_ids["a"]  # the attention group comes last


@pytest.mark.parametrize("use_eagle, lookahead", [(False, 0), (True, 2)])
def test_none_mode_reserves_lookahead_only_for_a_drafter_with_kv(use_eagle, lookahead):
    # vLLM 0.33 reserves num_lookahead_tokens = k only for an EAGLE/MTP drafter, none for ngram. Two
    # 32-token prompts at block 16 with k = 2: an ngram drafter's request holds 2 attention blocks, an
    # MTP one 3 (ceil(34 / 16)). Every request holds 1 + k GDN pages per group either way.
    s = make_scheduler(num_gdn_groups=3, num_speculative_tokens=2, use_eagle=use_eagle, block_size=16,
                       max_num_batched_tokens=64,
                       max_model_len=128, num_blocks=64)
    assert s.num_lookahead_tokens == lookahead
    for name in "ab":
        s.add_request(make_request(name, 32, max_tokens=4))
    out = s.schedule()
    attention_blocks = 2 + (lookahead > 0)
    for name in "ab":
        assert len(out.block_ids[name]) == attention_blocks
        assert [len(t) for t in out.group_block_ids[name][:3]] == [3, 3, 3]
    assert s.num_free_blocks == 63 - 2 * (attention_blocks + 9)


def test_an_explicit_lookahead_overrides_the_drafter_rule():
    assert SchedulerConfig(**dict(_SMALL, num_gdn_groups=3, num_speculative_tokens=2)).lookahead_tokens == 0
    assert SchedulerConfig(**dict(_SMALL, num_speculative_tokens=2)).lookahead_tokens == 2  # a draft model
    assert SchedulerConfig(**dict(_SMALL, num_gdn_groups=3, num_speculative_tokens=2,
                                  num_lookahead_tokens=1)).lookahead_tokens == 1
    with pytest.raises(ValueError, match=r"num_lookahead_tokens \(3\) must be <= num_speculative_tokens \(2\)"):
        SchedulerConfig(**dict(_SMALL, num_speculative_tokens=2, num_lookahead_tokens=3))
    with pytest.raises(TypeError, match="num_lookahead_tokens must be an int"):
        SchedulerConfig(**dict(_SMALL, num_speculative_tokens=2, num_lookahead_tokens=1.0))


_SMALL = dict(max_num_batched_tokens=16, max_num_seqs=4, block_size=4, num_blocks=32, max_model_len=64)


def test_align_mode_last_chunk_starts_at_the_last_block_boundary():
    # The budget fits the whole 50-token prompt, but the state at 48 must be cached: 48 + 2.
    s = align_scheduler()
    s.add_request(make_request("a", 50, max_tokens=2))
    outs = run_to_end(s)
    assert [o.num_scheduled_tokens["a"] for o in outs] == [48, 2, 1]


def test_align_mode_chunks_end_on_block_boundaries_and_keep_at_most_two_state_pages():
    s = align_scheduler(max_num_batched_tokens=40, num_speculative_tokens=0)
    s.add_request(make_request("a", 100, max_tokens=20))
    outs = run_to_end(s)
    starts = [o.num_computed_tokens["a"] for o in outs]
    prefill = [st for st in starts if st < 99]
    assert prefill == [0, 32, 64, 96]  # 40-token budget clipped to 32 (two blocks)
    assert all(max(live_gdn_pages(o, "a")) <= 2 for o in outs)


def test_a_repeated_prompt_hits_the_cached_state_and_attention_blocks():
    s = align_scheduler()
    prompt = list(range(1, 41))
    s.add_request(Request("a", prompt, 1))
    run_to_end(s)
    s.add_request(Request("b", prompt, 1))
    out = s.schedule()
    assert out.num_cached_tokens == {"b": 32} and out.num_computed_tokens == {"b": 32}
    gdn0, attention = out.group_block_ids["b"][0], out.group_block_ids["b"][3]
    assert gdn0[0] == NULL_BLOCK and gdn0[1] != NULL_BLOCK  # only the state at 32 is needed
    assert len(attention) == 3


def test_a_same_step_hit_waits_one_step():
    # b's prefix is cached by a in this very step: its GDN state is not computed yet, so b waits
    # (and admission stops for the step), then hits it in the next step.
    s = align_scheduler(max_num_batched_tokens=128)
    prompt = list(range(1, 41))
    s.add_request(Request("a", prompt, 4, arrival_time=0))
    s.add_request(Request("b", prompt, 4, arrival_time=1))
    s.add_request(Request("c", list(range(100, 120)), 4, arrival_time=2))
    out, _ = step(s)
    assert list(out.num_scheduled_tokens) == ["a"]
    out, _ = step(s)
    assert out.num_cached_tokens == {"b": 32, "c": 0}


def test_a_shared_prefix_without_a_cached_state_stops_the_chunk_at_the_junction():
    s = align_scheduler(max_num_batched_tokens=128)
    shared = list(range(1, 41))
    s.add_request(Request("a", shared + [90] * 20, 1))  # its state is cached at 48 only
    run_to_end(s)
    s.add_request(Request("b", shared + [91] * 20, 1))
    out, _ = step(s)
    # Attention hits 32 tokens (two full shared blocks), GDN nothing: b computes from 0 and stops
    # at the 32-token junction so that its state there gets cached.
    assert out.num_cached_tokens == {"b": 0} and out.num_scheduled_tokens == {"b": 32}
    assert s.requests["b"].shared_prefix_boundary == 32
    run_to_end(s)
    s.add_request(Request("c", shared + [92] * 20, 1))
    out = s.schedule()
    assert out.num_cached_tokens == {"c": 32}


def test_a_block_wider_than_the_budget_advances_mid_block_and_realigns():
    s = align_scheduler(max_num_batched_tokens=12)
    s.add_request(make_request("a", 40, max_tokens=1))
    outs = run_to_end(s)
    assert [o.num_scheduled_tokens["a"] for o in outs] == [12, 4, 12, 4, 8]  # re-aligns at 16 and 32


def test_no_block_aligned_chunk_ends_admission_for_the_step():
    # Three decodes leave 7 tokens of a 10-token budget: a waiting prompt cannot reach a
    # 8-token block boundary while the budget is at least a block, so it gets nothing.
    s = align_scheduler(block_size=8, max_num_batched_tokens=10, max_num_seqs=4)
    for i in range(3):
        s.add_request(make_request(f"d{i}", 2, max_tokens=50, arrival=float(i), token=i + 1))
    step(s)
    s.add_request(make_request("w", 30, max_tokens=1, arrival=5.0, token=9))
    out, _ = step(s)
    assert "w" not in out.num_scheduled_tokens and sum(out.num_scheduled_tokens.values()) == 3


def test_num_free_blocks_counts_cached_evictable_blocks():
    s = align_scheduler(num_blocks=40)
    s.add_request(make_request("a", 40, max_tokens=1))
    run_to_end(s)
    assert s.num_free_blocks == 39  # everything back, cached blocks included


@pytest.mark.parametrize("caching", [False, True])
def test_a_request_that_cannot_fit_with_its_gdn_pages_is_refused(caching):
    # 6 usable blocks: 4 attention blocks of 16 fit, but not with 3 GDN pages.
    s = make_scheduler(num_gdn_groups=3, enable_prefix_caching=caching, block_size=16, num_blocks=7,
                       max_model_len=128)
    with pytest.raises(ValueError, match="GDN state pages"):
        s.add_request(make_request("a", 60, max_tokens=4))


def test_bad_hybrid_configuration_is_refused_at_start():
    with pytest.raises(ValueError, match="enable_chunked_prefill"):
        SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=2, block_size=16, num_blocks=20, max_model_len=64,
                        enable_prefix_caching=True, enable_chunked_prefill=False, num_gdn_groups=3)


def test_hybrid_block_size_raises_the_attention_page_to_hold_a_gdn_page():
    from qwen_ops.scheduling import hybrid_block_size

    # Qwen3.5-shaped tiny model: K+V of 2 heads x 64 in bfloat16 = 512 bytes per token; a GDN
    # layer's state is 4x64x64 float32 plus a 3x512 bfloat16 conv tail = 68608 bytes.
    assert hybrid_block_size(16, 512, 68608) == (144, 144 * 512)  # 134 tokens needed, in steps of 16
    # INT8 halves the attention page per token: twice the tokens per block.
    assert hybrid_block_size(16, 256, 68608) == (272, 272 * 256)
    # A page already big enough is kept (the GDN page is padded up to it).
    assert hybrid_block_size(256, 512, 68608) == (256, 256 * 512)
    assert hybrid_block_size(16, 512, 68608, kernel_block_alignment=128) == (256, 256 * 512)
    with pytest.raises(ValueError, match="gdn_page_bytes"):
        hybrid_block_size(16, 512, 0)


@pytest.mark.parametrize("use_eagle, hit", [(False, 48), (True, 32)])
def test_an_eagle_style_drafter_hits_one_block_short(use_eagle, hit):
    # vLLM's use_eagle (MTP, EAGLE): the drafter's KV at a block's last position needs the next
    # block's first token, so a hit stops one matched block short (and align mode keeps the GDN
    # state there: get_mamba_prefill_checkpoint_position with drop_eagle_block); ngram-style
    # drafts do not.
    s = align_scheduler(num_speculative_tokens=1, use_eagle=use_eagle)
    prompt = list(range(1, 51))  # 3 full blocks and 2 tokens
    s.add_request(Request("a", prompt, 1))
    run_to_end(s)
    s.add_request(Request("b", prompt, 1))
    assert s.schedule().num_cached_tokens == {"b": hit}


@pytest.mark.parametrize("overrides", [dict(num_speculative_tokens=0, num_gdn_groups=3),
                                       dict(num_speculative_tokens=1, num_gdn_groups=0)])
def test_use_eagle_needs_draft_tokens_and_gdn_groups(overrides):
    with pytest.raises(ValueError, match="use_eagle=True needs num_speculative_tokens > 0 and num_gdn_groups > 0"):
        SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=4, block_size=16, num_blocks=64,
                        max_model_len=256, use_eagle=True, **overrides)
