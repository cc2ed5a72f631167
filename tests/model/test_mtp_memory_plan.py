"""MTP speculation's memory plan: the 1 + k GDN state rows of each request are pages of the one pool (1 + k per
GDN group, "none" mode), and ``plan_memory`` counts exactly the caches the model runner allocates (and
``budget_summary`` reports them)."""
import pytest

from qwen_ops import LLM
from qwen_ops.model.kv_cache import bytes_per_pool_block, fit_max_model_len, gdn_page_bytes, plan_memory

K = 2
MTP = {"method": "mtp", "num_speculative_tokens": K}
GROUPS = 3  # the tiny checkpoint: 3 GDN layers, 1 attention layer


@pytest.fixture(scope="module")
def probe(text_mtp_checkpoint):
    """A plain engine on the checkpoint, for its config and dtype."""
    return LLM(text_mtp_checkpoint, num_blocks=32, block_size=4, max_num_seqs=1, max_num_batched_tokens=8)


def allocated_state_bytes(caches):
    tensors = {id(t): t for t in (*caches.conv_states.values(), *caches.ssm_states.values())}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def test_planned_state_bytes_equal_allocated_with_fixed_blocks(text_mtp_checkpoint):
    llm = LLM(text_mtp_checkpoint, speculative_config=MTP, num_blocks=32, block_size=4, max_num_seqs=3,
              max_num_batched_tokens=8)
    plan = llm.plan
    assert plan.state_rows_per_request == 1 + K and not llm.scheduler_config.enable_prefix_caching
    assert llm.caches.num_state_slots == plan.num_blocks == 32  # state rows are block ids
    assert plan.state_bytes == allocated_state_bytes(llm.caches) == 32 * gdn_page_bytes(llm.config, llm.dtype)
    assert f"gdn_states=in_pool_pages {1 + K}_rows_per_request ({plan.state_bytes / 2**20:.1f} MiB)" \
        in llm.budget_summary()


def test_budget_bound_plan_counts_every_state_page(text_mtp_checkpoint, probe):
    """Without num_blocks the pool is capped at what max_num_seqs requests use, each holding
    GROUPS * (1 + k) GDN pages; the caches fit the budget."""
    config, dtype = probe.config, probe.dtype
    block_size = probe.scheduler_config.block_size
    block = bytes_per_pool_block(config, block_size, dtype, dtype)
    budget = 200 * block
    llm = LLM(text_mtp_checkpoint, speculative_config=MTP, kv_cache_memory_gib=budget / 2**30, block_size=4,
              max_num_seqs=3, max_num_batched_tokens=8, max_model_len=16)
    plan = llm.plan
    assert llm.scheduler_config.block_size == block_size
    assert plan.num_blocks == 3 * (-(-16 // block_size) + GROUPS * (1 + K)) + 1
    assert plan.state_bytes == allocated_state_bytes(llm.caches)
    # The target model's KV caches only: the MTP layers' own KV caches (add_mtp_kv_caches) are not planned yet.
    kv = sum(llm.caches.key_caches[i].nbytes + llm.caches.value_caches[i].nbytes
             for i in config.full_attention_layers)
    assert kv == plan.kv_bytes
    assert plan.kv_bytes + plan.state_bytes <= budget


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


@pytest.mark.parametrize("rows", [0, -1, 1.5, True])
def test_state_rows_per_request_is_checked(probe, rows):
    with pytest.raises(ValueError, match="state_rows_per_request"):
        plan_memory(probe.config, budget_bytes=None, block_size=4, max_num_seqs=1, max_model_len=16,
                    dtype=probe.dtype, kv_dtype=probe.dtype, state_rows_per_request=rows)
