"""The "chunk" prefix-caching mode of hybrid models: attention blocks of the asked size, GDN checkpoints every 64 tokens.

A hit is the longest prefix with its attention blocks cached and a GDN checkpoint at its
end; every admitted request says why its hit stopped; the checkpoint pool is bounded and
evicts ordinary checkpoints before the kept ones (prompt ends, junctions).
"""
import random

import pytest
from sched_helpers import make_scheduler, step

from qwen_ops.scheduling import Request, SchedulerConfig
from qwen_ops.scheduling.gdn_checkpoints import GdnCheckpointPool


def chunk_scheduler(**overrides):
    config = dict(num_gdn_groups=3, enable_prefix_caching=True, mamba_cache_mode="chunk", block_size=16,
                  max_num_batched_tokens=1024, max_model_len=1024, num_blocks=400, num_gdn_checkpoints=64,
                  max_num_seqs=8)
    config.update(overrides)
    return make_scheduler(**config)


def prompt(length, seed=0, prefix=()):
    rng = random.Random(seed)
    return list(prefix) + [rng.randrange(1, 1000) for _ in range(length - len(prefix))]


def serve(s, request_id, tokens, max_tokens=2):
    """Run one request alone to its end; returns its first step's output."""
    s.add_request(Request(request_id, tokens, max_tokens))
    first = None
    while s.has_unfinished_requests():
        out, _ = step(s)
        first = first or out
    return first


def test_a_resend_hits_the_last_64_token_boundary_with_16_token_blocks():
    s = chunk_scheduler()
    tokens = prompt(150)
    first = serve(s, "a", tokens)
    # One 150-token chunk saves the states at 64 and 128 (chunk ends of the kernel).
    assert first.gdn_checkpoint_saves["a"] == [(64, 0), (128, 1)]
    assert first.num_cached_tokens["a"] == 0 and first.prefix_hit_reasons["a"] == "no_attention_block"
    again = serve(s, "b", tokens)
    assert again.num_cached_tokens["b"] == 128  # below any align block of this model: 16-token blocks
    assert again.gdn_checkpoint_loads["b"] == 1
    assert again.prefix_hit_reasons["b"] == "full"  # 192 > 149: no boundary left before the last token
    assert again.block_size == 16
    stats = s.prefix_cache_stats.as_dict()
    assert stats["requests"] == 2 and stats["hit_tokens"] == 128 and stats["reasons"]["full"] == 1


def test_a_shorter_shared_prefix_hits_its_own_boundary_and_names_the_missing_attention_block():
    s = chunk_scheduler()
    base = prompt(300)
    serve(s, "a", base)
    out = serve(s, "b", prompt(200, seed=1, prefix=base[:140]))  # shares 140 tokens: boundaries 64, 128
    assert out.num_cached_tokens["b"] == 128
    assert out.prefix_hit_reasons["b"] == "no_attention_block"  # block 128..144 differs


def test_no_checkpoint_at_the_next_boundary_is_named():
    # A 40-token request takes 40 of the first step's 100-token budget, so the second starts with a chunk of
    # 60 and its next chunk [60, 128) has 64 inside it, off the kernel's grid: 64 is never saved, while its
    # attention blocks are cached. A request sharing 100 tokens stops there, and says why.
    s = chunk_scheduler(max_num_batched_tokens=100)
    base = prompt(200)
    s.add_request(Request("c", prompt(40, seed=5), 2))
    s.add_request(Request("a", base, 2))
    while s.has_unfinished_requests():
        step(s)
    out = serve(s, "b", base[:100] + prompt(20, seed=7))
    assert out.num_cached_tokens["b"] == 0 and out.prefix_hit_reasons["b"] == "no_gdn_checkpoint"


def test_prefill_chunks_end_on_checkpoint_boundaries():
    s = chunk_scheduler(max_num_batched_tokens=100)
    s.add_request(Request("a", prompt(300), 2))
    starts = []
    while s.has_unfinished_requests():
        out, _ = step(s)
        if "a" in out.num_scheduled_tokens:
            starts.append((out.num_computed_tokens["a"], out.num_scheduled_tokens["a"],
                           out.gdn_checkpoint_saves.get("a", [])))
    assert starts[:4] == [(0, 64, [(64, 0)]), (64, 64, [(64, 1)]), (128, 64, [(64, 2)]), (192, 64, [(64, 3)])]
    assert starts[4][:2] == (256, 44)


def test_chunks_shorter_than_a_kernel_chunk_save_the_boundaries_they_end_on():
    """A 32-token budget never gives the kernel a whole 64-token chunk, and a chunk of 40 starts the rest of
    the prompt off the kernel's grid: each chunk that ends on a boundary saves it (its end, the state the
    step leaves), and a resend hits the last one before its last token."""
    s = chunk_scheduler(max_num_batched_tokens=32)
    tokens = prompt(150)
    s.add_request(Request("a", tokens, 2))
    saves = []
    while s.has_unfinished_requests():
        out, _ = step(s)
        if out.gdn_checkpoint_saves.get("a"):
            saves.append((out.num_computed_tokens["a"], out.num_scheduled_tokens["a"], out.gdn_checkpoint_saves["a"]))
    assert [(start + n, offsets) for start, n, offsets in saves] == [(64, [(32, 0)]), (128, [(32, 1)])]
    assert serve(s, "b", tokens).num_cached_tokens["b"] == 128
    s = chunk_scheduler(max_num_batched_tokens=100)
    s.add_request(Request("c", prompt(40, seed=5), 2))  # takes 40 of the first step's budget
    s.add_request(Request("d", prompt(200, seed=6), 2))  # starts with 60 tokens: off the grid until it ends on one
    ends = []
    while s.has_unfinished_requests():
        out, _ = step(s)
        ends += [out.num_computed_tokens["d"] + offset for offset, _ in out.gdn_checkpoint_saves.get("d", [])]
    assert ends == [128, 192]  # 64 lies inside the off-grid chunk [60, 128): not a state the step has


def test_mtp_drops_one_block_and_says_so():
    s = chunk_scheduler(num_speculative_tokens=1, use_eagle=True)
    tokens = prompt(150)
    serve(s, "a", tokens)
    out = serve(s, "b", tokens)
    # Attention blocks up to 144 match; the drafter's block drop leaves 128: the boundary at 128 still hits.
    assert out.num_cached_tokens["b"] == 128
    tokens = prompt(140, seed=3)
    serve(s, "c", tokens)
    out = serve(s, "d", tokens)
    # 8 full blocks (128 tokens) match; the drop leaves 112 < 128: the hit falls back to 64.
    assert out.num_cached_tokens["d"] == 64 and out.prefix_hit_reasons["d"] == "mtp_block_drop"


def test_eviction_prefers_ordinary_checkpoints_and_a_lost_one_is_named():
    s = chunk_scheduler(num_gdn_checkpoints=3)
    a = prompt(150, seed=1)  # saves 64 (ordinary) and 128 (its prompt end: kept)
    serve(s, "a", a)
    b = prompt(150, seed=2)  # needs two slots: evicts a's 64 first, then ... a's kept 128 only if it must
    serve(s, "b", b)
    pool = s.kv_cache.checkpoints
    assert len(pool) == 3 and pool.num_evicted == 1
    out = serve(s, "a2", a)
    assert out.num_cached_tokens["a2"] == 128  # a's prompt end survived the eviction
    out = serve(s, "a3", a[:100] + prompt(50, seed=9))  # needs a's 64: evicted
    assert out.num_cached_tokens["a3"] == 0 and out.prefix_hit_reasons["a3"] == "evicted"


def test_a_slot_read_in_this_step_is_not_evicted_by_a_save_of_the_same_step():
    pool = GdnCheckpointPool(1)
    slot = pool.reserve(b"x", kept=False)
    pool.new_step_starts()
    pool.use(slot)
    assert pool.reserve(b"y", kept=False) is None  # the only slot is read in this step
    pool.new_step_starts()
    assert pool.reserve(b"y", kept=False) == slot and pool.was_evicted(b"x")


def test_stats_count_a_pool_that_a_failed_step_left_empty():
    """The stats read the pool's counters whenever there is a pool, empty or not: a one-slot pool whose
    second save evicted the first and then failed (its reservation dropped) is empty, yet one checkpoint
    was saved and one evicted. Modes without a pool report zeros."""
    from qwen_ops.scheduling.gdn_checkpoints import PrefixCacheStats

    pool = GdnCheckpointPool(1)
    pool.reserve(b"x", kept=False)
    pool.new_step_starts()
    pool.reserve(b"y", kept=False)  # evicts x
    pool.drop_step_reservations()  # the step failed
    assert len(pool) == 0
    d = PrefixCacheStats(pool).as_dict()
    assert (d["checkpoints_saved"], d["checkpoints_evicted"], d["checkpoints_cached"]) == (1, 1, 0)
    d = PrefixCacheStats(None).as_dict()
    assert (d["checkpoints_saved"], d["checkpoints_evicted"], d["checkpoints_cached"]) == (0, 0, 0)


def test_chunk_mode_holds_gdn_pages_as_none_mode():
    s = chunk_scheduler(num_speculative_tokens=2)
    s.add_request(Request("a", prompt(70), 4))
    out, _ = step(s)
    assert [len(t) for t in out.group_block_ids["a"][:3]] == [3, 3, 3]


@pytest.mark.parametrize("overrides, match", [
    (dict(mamba_cache_mode="chunk", num_gdn_checkpoints=0), "needs num_gdn_checkpoints >= 1"),
    (dict(mamba_cache_mode="chunk", enable_prefix_caching=False, num_gdn_checkpoints=4), "does not go with"),
    (dict(mamba_cache_mode="none"), "does not go with"),
    (dict(mamba_cache_mode="chunk", num_gdn_groups=0, num_gdn_checkpoints=4), "needs a hybrid model"),
    (dict(mamba_cache_mode="all"), "must be one of"),
])
def test_bad_modes_are_refused(overrides, match):
    config = dict(max_num_batched_tokens=64, max_num_seqs=4, block_size=16, num_blocks=64, max_model_len=256,
                  enable_prefix_caching=True, num_gdn_groups=3)
    config.update(overrides)
    with pytest.raises(ValueError, match=match):
        SchedulerConfig(**config)


def test_align_stays_the_default_mode_of_the_scheduler_and_selectable():
    base = dict(max_num_batched_tokens=64, max_num_seqs=4, block_size=16, num_blocks=64, max_model_len=256,
                num_gdn_groups=3)
    assert SchedulerConfig(**base, enable_prefix_caching=True).gdn_cache_mode == "align"
    assert SchedulerConfig(**base, enable_prefix_caching=True, mamba_cache_mode="align").gdn_cache_mode == "align"
    assert SchedulerConfig(**base).gdn_cache_mode == "none"
    s = make_scheduler(**base, enable_prefix_caching=True, mamba_cache_mode="align")
    assert s.align_gdn_chunks and not s.gdn_checkpoints
