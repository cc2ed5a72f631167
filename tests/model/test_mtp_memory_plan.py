"""MTP speculation's memory plan: the 1 + k GDN state rows of each request are pages of the one pool (1 + k per
GDN group, "none" mode), the MTP layers keep their own KV caches on the same blocks, and ``plan_memory`` counts
exactly the caches the model runner allocates (and ``budget_summary`` reports them)."""
import pytest

from qwen_ops import LLM
from qwen_ops.model.worker.kv_cache import (bytes_per_block, bytes_per_pool_block, fit_max_model_len, gdn_page_bytes,
                                     plan_memory)

K = 2
MTP = {"method": "mtp", "num_speculative_tokens": K}
NONE_MODE = dict(enable_prefix_caching=False)  # one GDN page per group and state row (align mode: 2 + k)
GROUPS = 3  # the tiny checkpoint: 3 GDN layers, 1 attention layer


@pytest.fixture(scope="module")
def probe(text_mtp_checkpoint):
    """A plain engine on the checkpoint in the tests' mode (GDN states in the pages: the block raised from 4),
    for its config, dtype and block size."""
    return LLM(text_mtp_checkpoint, **NONE_MODE, num_blocks=32, block_size=4, max_num_seqs=1, max_num_batched_tokens=8)


def allocated_kv_bytes(caches):
    """Every paged KV cache: the target's full-attention layers and the MTP layers'."""
    return sum(t.nbytes for t in (*caches.key_caches.values(), *caches.value_caches.values()))


def allocated_state_bytes(caches):
    tensors = {id(t): t for t in (*caches.conv_states.values(), *caches.ssm_states.values())}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def test_planned_state_bytes_equal_allocated_with_fixed_blocks(text_mtp_checkpoint):
    llm = LLM(text_mtp_checkpoint, speculative_config=MTP, **NONE_MODE, num_blocks=32, block_size=4, max_num_seqs=3,
              max_num_batched_tokens=8)
    plan = llm.plan
    assert plan.state_rows_per_request == 1 + K and not llm.scheduler_config.enable_prefix_caching
    assert llm.caches.num_state_slots == plan.num_blocks == 32  # state rows are block ids
    assert plan.state_bytes == allocated_state_bytes(llm.caches) == 32 * gdn_page_bytes(llm.config, llm.dtype)
    assert f"gdn_states=in_pool_pages {1 + K}_rows_per_request ({plan.state_bytes / 2**20:.1f} MiB)" \
        in llm.budget_summary()
    mtp_layers = llm.model_runner.spec.mtp.layer_ids
    assert len(mtp_layers) == 1 and set(mtp_layers) <= set(llm.caches.key_caches)
    block_size = llm.scheduler_config.block_size
    assert plan.kv_bytes == allocated_kv_bytes(llm.caches) == 32 * bytes_per_block(llm.config, block_size, llm.dtype,
                                                                                  num_mtp_layers=1)
    assert f"({plan.kv_bytes / 2**20:.1f} MiB)" in llm.budget_summary()


def test_budget_bound_plan_counts_every_state_page(text_mtp_checkpoint, probe):
    """Without num_blocks the pool is capped at what max_num_seqs requests use, each holding
    GROUPS * (1 + k) GDN pages; the caches fit the budget."""
    config, dtype = probe.config, probe.dtype
    block_size = probe.scheduler_config.block_size
    block = bytes_per_pool_block(config, block_size, dtype, dtype, num_mtp_layers=1)
    budget = 200 * block
    llm = LLM(text_mtp_checkpoint, speculative_config=MTP, **NONE_MODE, kv_cache_memory_gib=budget / 2**30, block_size=4,
              max_num_seqs=3, max_num_batched_tokens=8, max_model_len=16)
    plan = llm.plan
    assert llm.scheduler_config.block_size == block_size
    assert plan.num_blocks == 3 * (-(-16 // block_size) + GROUPS * (1 + K)) + 1
    assert plan.state_bytes == allocated_state_bytes(llm.caches)
    assert plan.kv_bytes == allocated_kv_bytes(llm.caches)  # the MTP layer's KV cache included
    assert plan.kv_bytes + plan.state_bytes <= budget


def test_budget_bound_pool_counts_the_mtp_kv_caches(text_mtp_checkpoint, probe):
    """A budget that binds (two long requests could use more blocks than it holds): each block costs the
    target's and the MTP layer's KV pages and its GDN rows, so the planned blocks are what the budget holds at
    that price, planned bytes equal allocated bytes (k = 2), and everything allocated fits the budget."""
    config, dtype = probe.config, probe.dtype
    block_size = probe.scheduler_config.block_size
    block = bytes_per_pool_block(config, block_size, dtype, dtype, num_mtp_layers=1)
    assert block > bytes_per_pool_block(config, block_size, dtype, dtype)
    budget = 40 * block
    llm = LLM(text_mtp_checkpoint, speculative_config=MTP, **NONE_MODE, kv_cache_memory_gib=budget / 2**30, block_size=4,
              max_num_seqs=2, max_num_batched_tokens=8, max_model_len=20 * block_size)
    plan = llm.plan
    assert plan.num_blocks == 40
    assert plan.kv_bytes == allocated_kv_bytes(llm.caches)
    assert plan.state_bytes == allocated_state_bytes(llm.caches)
    assert allocated_kv_bytes(llm.caches) + allocated_state_bytes(llm.caches) <= budget


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "int8"])
def test_int8_and_two_mtp_layers_are_planned(two_layer_mtp_checkpoint, kv_cache_dtype):
    """Two MTP layers, each with its own cache, in either KV dtype: planned bytes equal allocated bytes."""
    llm = LLM(two_layer_mtp_checkpoint, speculative_config=MTP, **NONE_MODE, kv_cache_dtype=kv_cache_dtype, num_blocks=24,
              block_size=4, max_num_seqs=2, max_num_batched_tokens=8)
    assert len(llm.model_runner.spec.mtp.layer_ids) == 2
    assert llm.plan.kv_bytes == allocated_kv_bytes(llm.caches)
    assert llm.plan.state_bytes == allocated_state_bytes(llm.caches)


def test_fit_max_model_len_leaves_room_for_all_state_pages(probe):
    config, dtype = probe.config, probe.dtype
    block_size = probe.scheduler_config.block_size
    block = bytes_per_pool_block(config, block_size, dtype, dtype)
    budget = 40 * block
    common = dict(budget_bytes=budget, block_size=block_size, max_num_seqs=1, dtype=dtype, kv_dtype=dtype)
    one_row = fit_max_model_len(config, **common, gdn_pages_per_request=GROUPS)
    rows = fit_max_model_len(config, **common, gdn_pages_per_request=GROUPS * (1 + K), state_rows_per_request=1 + K)
    assert rows == (40 - 1 - GROUPS * (1 + K)) * block_size  # less the null block
    assert rows < one_row
    plan = plan_memory(config, **common, max_model_len=rows, gdn_pages_per_request=GROUPS * (1 + K),
                       state_rows_per_request=1 + K)
    assert plan.kv_bytes + plan.state_bytes <= budget
    # The MTP layer's KV cache makes every block dearer: fewer tokens fit, and the plan still fits the budget.
    with_mtp = fit_max_model_len(config, **common, gdn_pages_per_request=GROUPS * (1 + K),
                                 state_rows_per_request=1 + K, num_mtp_layers=1)
    mtp_block = bytes_per_pool_block(config, block_size, dtype, dtype, num_mtp_layers=1)
    assert with_mtp == (budget // mtp_block - 1 - GROUPS * (1 + K)) * block_size < rows
    plan = plan_memory(config, **common, max_model_len=with_mtp, gdn_pages_per_request=GROUPS * (1 + K),
                       state_rows_per_request=1 + K, num_mtp_layers=1)
    assert plan.kv_bytes + plan.state_bytes <= budget


@pytest.mark.parametrize("rows", [0, -1, 1.5, True])
def test_state_rows_per_request_is_checked(probe, rows):
    with pytest.raises(ValueError, match="state_rows_per_request"):
        plan_memory(probe.config, budget_bytes=None, block_size=4, max_num_seqs=1, max_model_len=16,
                    dtype=probe.dtype, kv_dtype=probe.dtype, state_rows_per_request=rows)


@pytest.mark.parametrize("layers", [-1, 1.5, True])
def test_num_mtp_layers_is_checked(probe, layers):
    with pytest.raises(ValueError, match="num_mtp_layers"):
        plan_memory(probe.config, budget_bytes=None, block_size=4, max_num_seqs=1, max_model_len=16,
                    dtype=probe.dtype, kv_dtype=probe.dtype, num_mtp_layers=layers)
