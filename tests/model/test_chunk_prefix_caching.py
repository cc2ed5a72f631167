"""The engine's "chunk" prefix-caching mode: outputs with caching equal outputs without, warm and cold.

16-token attention blocks on the tiny checkpoint (a GDN layer's state is 4x a block's KV there); the GDN
states are checkpointed every 64 tokens outside the page pool. Greedy tokens must equal the run without
prefix caching and logprobs agree within 2e-3 (the issue's bound; measured differences are float32
summation-order ones, ~1e-6), first with a hit (warm) and then on a fresh engine (cold).
"""
import pytest
import torch

from qwen_ops import LLM, SamplingParams

GREEDY = SamplingParams(max_tokens=5, temperature=0, logprobs=1, detokenize=False)


def _tokens(gen, n):
    return torch.randint(1, 256, (n,), generator=gen).tolist()


def _close(ours, theirs):
    assert [o.outputs[0].token_ids for o in ours] == [o.outputs[0].token_ids for o in theirs]
    for a, b in zip(ours, theirs):
        for x, y in zip(a.outputs[0].logprobs, b.outputs[0].logprobs):
            token = next(iter(y))
            assert abs(x[token] - y[token]) <= 2e-3


@pytest.mark.parametrize("engine", [{}, {"kv_cache_dtype": "int8"}], ids=["float32_kv", "int8_kv"])
def test_chunk_mode_outputs_equal_the_uncached_run(text_checkpoint, gen, engine):
    shared = _tokens(gen, 140)
    prompts = [shared + _tokens(gen, 30), shared + _tokens(gen, 80), shared[:70] + _tokens(gen, 5)]
    plain = LLM(text_checkpoint, num_blocks=120, max_num_seqs=2, enable_prefix_caching=False, **engine)
    cold = [plain.generate([p], GREEDY)[0] for p in prompts]
    llm = LLM(text_checkpoint, num_blocks=120, max_num_seqs=2, enable_prefix_caching=True,
              mamba_cache_mode="chunk", **engine)
    assert llm.llm_engine.scheduler_config.block_size == 16
    assert "mamba_cache_mode=chunk" in llm.llm_engine.engine_config.describe()
    warm = [llm.generate([p], GREEDY)[0] for p in prompts]
    assert [o.num_cached_tokens for o in warm] == [0, 128, 64]  # 64-token boundaries below any align block
    assert [o.metrics["prefix_hit_reason"] for o in warm] == ["no_attention_block"] * 2 + ["full"]
    _close(warm, cold)
    again = llm.generate(prompts, GREEDY)  # the same prompts at once: hits of their own ends
    assert [o.num_cached_tokens for o in again] == [128, 192, 64]
    _close(again, cold)


def test_chunk_mode_on_ascendc_equals_the_uncached_run(text_checkpoint, gen, monkeypatch):
    """``backend="ascendc"`` (the Ascend C kernels through the CPU stand-in): the Ascend C chunk kernel emits
    the checkpoints itself, no other backend runs the chunk op, and a hit at 64 tokens gives the tokens of the
    run without caching (logprobs within the same 2e-3)."""
    from backend_calls import record_backend_calls

    shared = _tokens(gen, 140)
    prompts = [shared + _tokens(gen, 10), shared[:70] + _tokens(gen, 5)]
    plain = LLM(text_checkpoint, num_blocks=120, max_num_seqs=2, enable_prefix_caching=False, backend="ascendc")
    cold = [plain.generate([p], GREEDY)[0] for p in prompts]
    ran = record_backend_calls(monkeypatch)
    llm = LLM(text_checkpoint, num_blocks=120, max_num_seqs=2, enable_prefix_caching=True,
              mamba_cache_mode="chunk", backend="ascendc")
    warm = [llm.generate([p], GREEDY)[0] for p in prompts]
    assert [o.num_cached_tokens for o in warm] == [0, 64]
    _close(warm, cold)
    chunk_ops = {target for target in ran if target.endswith(":chunk_gated_delta_rule")}
    assert chunk_ops == {"ascendc_backend:chunk_gated_delta_rule"}


def test_checkpoint_pool_never_outgrows_the_page_pool(text_checkpoint):
    """A checkpoint is hit only with its prefix's attention blocks, so with num_blocks given the pool holds
    at most one checkpoint per 64-token boundary of the page pool, whatever the memory budget: before this
    cap a 96-block engine took a quarter of the default budget (tens of thousands of slots), and its size
    followed the memory free at start, so a second identical engine recompiled every graph."""
    sizes = []
    for gib in (0.05, 0.2):
        llm = LLM(text_checkpoint, num_blocks=96, block_size=4, max_num_seqs=4, kv_cache_memory_gib=gib)
        plan = llm.plan
        assert plan.gdn_checkpoints == 95 * 4 // 64
        assert llm.llm_engine.scheduler.kv_cache.checkpoints.num_slots == plan.gdn_checkpoints
        assert f"{plan.gdn_checkpoints} checkpoints" in llm.budget_summary()
        sizes.append(_nbytes(llm.caches.checkpoint_ssm.values()))
    assert sizes[0] == sizes[1]


def test_chunks_shorter_than_a_kernel_chunk_still_checkpoint(text_checkpoint, gen):
    """A 24-token budget: every prefill chunk is shorter than the kernel's 64-token chunk and most start off
    its grid, so the checkpoints are the states the chunks that end on a boundary leave in the state rows
    (conv and recurrent). Hits on them give the uncached run's tokens; before, such a step saved nothing."""
    shared = _tokens(gen, 140)
    prompts = [shared + _tokens(gen, 10), shared + _tokens(gen, 30)]
    engine = dict(num_blocks=120, max_num_seqs=2, max_num_batched_tokens=24)
    plain = LLM(text_checkpoint, enable_prefix_caching=False, **engine)
    cold = [plain.generate([p], GREEDY)[0] for p in prompts]
    llm = LLM(text_checkpoint, enable_prefix_caching=True, mamba_cache_mode="chunk", **engine)
    warm = [llm.generate([p], GREEDY)[0] for p in prompts]
    assert [o.num_cached_tokens for o in warm] == [0, 128]
    _close(warm, cold)


# Qwen3.5's real GDN and attention head shapes (16 x 16 GDN heads of 128 x 128, 2 KV heads of 256) on the
# tiny model's small hidden size and four layers: a GDN state per layer is 1 MiB of float32 against 16 KiB of
# K/V per 16-token block, the proportions that make vLLM's align block hundreds of tokens.
REAL_HEADS = dict(num_attention_heads=8, num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
                  linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128)


@pytest.fixture(scope="module")
def real_heads_checkpoint(tmp_path_factory):
    from checkpoints import save_text_checkpoint_with_mtp

    return save_text_checkpoint_with_mtp(tmp_path_factory.mktemp("qwen35_real_heads"), seed=4, **REAL_HEADS)


@pytest.mark.parametrize("engine, hits", [
    ({}, [0, 128, 64]),
    # INT8 KV: both engines prefill in 64-token chunks, so a cached prefix's K/V is read back from its INT8
    # pages in the uncached run too (a prefill chunk attends to its own tokens' float K/V, and at head dim
    # 256 that alone moves a logprob by ~3e-3: an INT8 effect, not a caching one).
    ({"kv_cache_dtype": "int8", "max_num_batched_tokens": 64}, [0, 128, 64]),
    # MTP: a hit first drops the drafter's last matched block (vLLM's rule), then falls to a checkpoint:
    # 8 matched blocks (128) -> 112 -> 64; 4 (64) -> 48 -> 0.
    ({"speculative": 1}, [0, 64, 0]),
], ids=["float32_kv", "int8_kv", "mtp"])
def test_real_head_proportions_warm_and_cold_equal_the_uncached_run(real_heads_checkpoint, gen, engine, hits):
    from test_mtp_engine import mtp

    engine = dict(engine)
    spec = {"speculative_config": mtp(engine.pop("speculative"))} if "speculative" in engine else {}
    shared = _tokens(gen, 140)
    prompts = [shared + _tokens(gen, 30), shared + _tokens(gen, 80), shared[:70] + _tokens(gen, 5)]
    common = dict(num_blocks=80, max_num_seqs=2, **engine)
    cold = [LLM(real_heads_checkpoint, enable_prefix_caching=False, **common).generate([p], GREEDY)[0]
            for p in prompts]
    llm = LLM(real_heads_checkpoint, enable_prefix_caching=True, **common, **spec)  # chunk: the default
    config = llm.llm_engine.scheduler_config
    assert config.block_size == 16 and config.gdn_cache_mode == "chunk"
    warm = [llm.generate([p], GREEDY)[0] for p in prompts]
    assert [o.num_cached_tokens for o in warm] == hits
    _close(warm, cold)
    again = LLM(real_heads_checkpoint, enable_prefix_caching=True, **common, **spec)  # a cold engine: no hits
    _close([again.generate([p], GREEDY)[0] for p in prompts[:1]], cold[:1])


def test_a_tiny_checkpoint_pool_evicts_and_stays_exact(text_checkpoint, gen):
    prompts = [_tokens(gen, 200) for _ in range(3)]
    plain = LLM(text_checkpoint, num_blocks=120, max_num_seqs=1, enable_prefix_caching=False)
    cold = [plain.generate([p], GREEDY)[0] for p in prompts]
    llm = LLM(text_checkpoint, num_blocks=120, max_num_seqs=1, enable_prefix_caching=True,
              mamba_cache_mode="chunk", gdn_checkpoint_memory_share=0.001, kv_cache_memory_gib=0.03)
    pool = llm.llm_engine.scheduler.kv_cache.checkpoints
    warm = [llm.generate([p], GREEDY)[0] for p in prompts + prompts]
    assert pool.num_slots < 9 and pool.num_evicted > 0
    _close(warm, cold + cold)


@pytest.mark.parametrize("k", [1, 2])
def test_chunk_mode_with_mtp_equals_the_plain_run(text_mtp_checkpoint, gen, k):
    # MTP speculation: a hit drops the drafter's last matched block first (vLLM's rule), then falls to the
    # 64-token boundary below; outputs equal the run without caching or speculation.
    from test_mtp_engine import mtp

    shared = _tokens(gen, 150)
    prompts = [shared + _tokens(gen, 20), shared + _tokens(gen, 60), _tokens(gen, 139)]
    prompts.append(prompts[2] + _tokens(gen, 3))
    engine = dict(num_blocks=200, max_num_seqs=4, max_num_batched_tokens=200)
    plain = LLM(text_mtp_checkpoint, enable_prefix_caching=False, **engine)
    cold = [plain.generate([p], GREEDY)[0] for p in prompts]
    llm = LLM(text_mtp_checkpoint, enable_prefix_caching=True, mamba_cache_mode="chunk",
              speculative_config=mtp(k), **engine)
    warm = [llm.generate([p], GREEDY)[0] for p in prompts]
    # 150 shared tokens: 9 full blocks match, the drop leaves 8 (128 tokens): the checkpoint at 128.
    # The 142-token prompt: 8 blocks (128) match, the drop leaves 112 < 128: it falls to 64, for the MTP drop.
    assert [o.num_cached_tokens for o in warm] == [0, 128, 0, 64]
    assert warm[3].metrics["prefix_hit_reason"] == "mtp_block_drop"
    _close(warm, cold)


def test_chunk_mode_under_preemption_equals_the_plain_run(text_checkpoint, gen):
    # A pool too small for all four requests at once: some are preempted and recomputed (hitting the
    # checkpoints their first run saved); outputs equal the run without caching.
    shared = _tokens(gen, 100)
    prompts = [shared + _tokens(gen, n) for n in (40, 70, 30, 90)]
    engine = dict(num_blocks=24, max_num_seqs=4, max_num_batched_tokens=64)
    params = SamplingParams(max_tokens=48, temperature=0, logprobs=1, detokenize=False)
    cold = LLM(text_checkpoint, enable_prefix_caching=False, **engine).generate(prompts, params)
    llm = LLM(text_checkpoint, enable_prefix_caching=True, mamba_cache_mode="chunk", **engine)
    warm = llm.generate(prompts, params)
    assert sum(s.num_preempted for s in llm.step_stats) > 0
    _close(warm, cold)


def _nbytes(tensors):
    unique = {id(t): t for t in tensors}
    return sum(t.numel() * t.element_size() for t in unique.values())


def test_chunk_mode_pool_is_sized_by_attention_pages_alone(text_checkpoint):
    """Chunk mode's GDN states (1 + k running rows per request and the checkpoints) are outside the page
    pool with their own share, so the pool's blocks cost their attention pages only: the rest of the budget
    buys that many more blocks than align-sized ones would (blocks that also hold GDN rows), the plan counts
    exactly what is allocated, and the budget line's parts sum to at most the budget."""
    from qwen_ops.model.worker.kv_cache import bytes_per_block, bytes_per_pool_block, bytes_per_state_slot

    gib, seqs = 0.005, 16  # small enough that the budget binds, not the max_num_seqs x max_model_len cap
    llm = LLM(text_checkpoint, kv_cache_memory_gib=gib, max_num_seqs=seqs, max_num_batched_tokens=64)
    plan, caches, config = llm.plan, llm.caches, llm.config
    assert llm.scheduler_config.gdn_cache_mode == "chunk" and llm.scheduler_config.block_size == 16  # the default
    slot = bytes_per_state_slot(config, llm.dtype)
    assert plan.state_bytes_outside == (plan.gdn_checkpoints + plan.num_state_slots) * slot
    assert plan.num_state_slots == seqs and plan.state_bytes == 0
    pool_budget = int(gib * 2**30) - plan.state_bytes_outside
    attention_block = bytes_per_block(config, 16, llm.dtype)
    assert plan.num_blocks == pool_budget // attention_block
    assert plan.num_blocks > pool_budget // bytes_per_pool_block(config, 16, llm.dtype, llm.dtype)
    # What the plan counts is what the runner allocated: K/V pages, flat state rows and checkpoint pools.
    assert plan.kv_bytes == _nbytes([*caches.key_caches.values(), *caches.value_caches.values()])
    assert plan.state_bytes_outside == _nbytes([*caches.conv_states.values(), *caches.ssm_states.values(),
                                                *caches.checkpoint_conv.values(), *caches.checkpoint_ssm.values()])
    assert pool_budget - attention_block < plan.kv_bytes <= pool_budget  # the whole budget used, none over
    line = llm.budget_summary()
    assert f"num_blocks={plan.num_blocks} " in line and f"({plan.kv_bytes / 2**20:.1f} MiB)" in line
    assert f"({plan.num_state_slots} rows + {plan.gdn_checkpoints} checkpoints, " \
           f"{plan.state_bytes_outside / 2**20:.1f} MiB)" in line
