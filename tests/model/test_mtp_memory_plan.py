"""MTP speculation's memory plan: the 1 + k GDN state rows per request the model runner allocates are the ones
``plan_memory`` counts against the budget (and ``budget_summary`` reports)."""
import pytest

from qwen_ops import LLM
from qwen_ops.model.kv_cache import bytes_per_block, bytes_per_state_slot, fit_max_model_len, plan_memory

K = 2
MTP = {"method": "mtp", "num_speculative_tokens": K}


@pytest.fixture(scope="module")
def probe(text_mtp_checkpoint):
    """A plain engine on the checkpoint, for its config and dtype."""
    return LLM(text_mtp_checkpoint, num_blocks=32, block_size=4, max_num_seqs=1, max_num_batched_tokens=8)


def allocated_state_bytes(caches):
    tensors = list(caches.conv_states.values()) + list(caches.ssm_states.values())
    return sum(t.numel() * t.element_size() for t in tensors)


def test_planned_state_bytes_equal_allocated_with_fixed_blocks(text_mtp_checkpoint):
    llm = LLM(text_mtp_checkpoint, speculative_config=MTP, num_blocks=32, block_size=4, max_num_seqs=3,
              max_num_batched_tokens=8)
    plan = llm.plan
    assert plan.state_rows_per_request == 1 + K
    assert llm.caches.num_state_slots == plan.num_state_slots * (1 + K)
    assert plan.state_bytes == allocated_state_bytes(llm.caches)
    assert plan.state_bytes == plan.num_state_slots * (1 + K) * bytes_per_state_slot(llm.config, llm.dtype)
    assert f"gdn_state_slots={plan.num_state_slots}x{1 + K}_rows ({plan.state_bytes / 2**20:.1f} MiB)" \
        in llm.budget_summary()


def test_budget_bound_plan_holds_all_state_rows(text_mtp_checkpoint, probe):
    """A budget whose half holds 2 requests' 1 + k rows (but 6 single rows) gets 2 slots, and the caches fit it."""
    config, dtype = probe.config, probe.dtype
    slot = bytes_per_state_slot(config, dtype) * (1 + K)
    block = bytes_per_block(config, 4, dtype)
    budget = 4 * slot + 40 * block
    assert 40 * block < 2 * slot, "the test budget's half must hold exactly 2 slots"
    llm = LLM(text_mtp_checkpoint, speculative_config=MTP, kv_cache_memory_gib=budget / 2**30, block_size=4,
              max_num_seqs=3, max_num_batched_tokens=8, max_model_len=16)
    plan = llm.plan
    assert plan.num_state_slots == plan.max_num_seqs == 2
    assert plan.state_bytes == allocated_state_bytes(llm.caches) == 2 * slot
    # The target model's KV caches only: the MTP layers' own KV caches (add_mtp_kv_caches) are not planned yet.
    kv = sum(llm.caches.key_caches[i].nbytes + llm.caches.value_caches[i].nbytes
             for i in config.full_attention_layers)
    assert kv == plan.kv_bytes
    assert plan.kv_bytes + plan.state_bytes <= budget


def test_fit_max_model_len_leaves_room_for_all_state_rows(probe):
    config, dtype = probe.config, probe.dtype
    row, block = bytes_per_state_slot(config, dtype), bytes_per_block(config, 4, dtype)
    budget = 2 * row * (1 + K) + 40 * block
    common = dict(budget_bytes=budget, block_size=4, max_num_seqs=1, dtype=dtype, kv_dtype=dtype)
    one_row = fit_max_model_len(config, **common)
    rows = fit_max_model_len(config, **common, state_rows_per_request=1 + K)
    assert rows == (budget - row * (1 + K)) // block * 4 - 4  # less the null block
    assert rows < one_row
    plan = plan_memory(config, **common, max_model_len=rows, state_rows_per_request=1 + K)
    assert plan.kv_bytes + plan.state_bytes <= budget


@pytest.mark.parametrize("rows", [0, -1, 1.5, True])
def test_state_rows_per_request_is_checked(probe, rows):
    with pytest.raises(ValueError, match="state_rows_per_request"):
        plan_memory(probe.config, budget_bytes=None, block_size=4, max_num_seqs=1, max_model_len=16,
                    dtype=probe.dtype, kv_dtype=probe.dtype, state_rows_per_request=rows)
