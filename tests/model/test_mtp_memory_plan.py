"""MTP speculation's memory plan: the 1 + k GDN state rows per request and the MTP layers' own KV caches the model
runner allocates are the ones ``plan_memory`` counts against the budget (and ``budget_summary`` reports)."""
import pytest

from qwen_ops import LLM
from qwen_ops.model.kv_cache import bytes_per_block, bytes_per_state_slot, fit_max_model_len, plan_memory

K = 2
MTP = {"method": "mtp", "num_speculative_tokens": K}


@pytest.fixture(scope="module")
def probe(text_mtp_checkpoint):
    """A plain engine on the checkpoint, for its config and dtype."""
    return LLM(text_mtp_checkpoint, num_blocks=32, block_size=4, max_num_seqs=1, max_num_batched_tokens=8)


def allocated_kv_bytes(caches):
    """Every paged KV cache: the target's full-attention layers and the MTP layers'."""
    return sum(t.nbytes for t in list(caches.key_caches.values()) + list(caches.value_caches.values()))


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
    mtp_layers = llm.model_runner.spec.mtp.layer_ids
    assert set(mtp_layers) <= set(llm.caches.key_caches)
    assert plan.kv_bytes == allocated_kv_bytes(llm.caches)
    assert plan.kv_bytes == 32 * bytes_per_block(llm.config, 4, llm.dtype, num_mtp_layers=len(mtp_layers))
    assert f"gdn_state_slots={plan.num_state_slots}x{1 + K}_rows ({plan.state_bytes / 2**20:.1f} MiB)" \
        in llm.budget_summary()


def test_budget_bound_plan_holds_all_state_rows_and_mtp_kv(text_mtp_checkpoint, probe):
    """A budget whose half holds 2 requests' 1 + k rows (but 6 single rows) gets 2 slots; the blocks take the
    rest at the price of the target's and the MTP layer's KV together, so all the caches fit the budget."""
    config, dtype = probe.config, probe.dtype
    slot = bytes_per_state_slot(config, dtype) * (1 + K)
    block = bytes_per_block(config, 4, dtype, num_mtp_layers=1)  # the target's layers and the MTP layer's
    budget = 4 * slot + 20 * block
    assert 20 * block < 2 * slot, "the test budget's half must hold exactly 2 slots"
    # max_model_len 64: two requests could use more blocks than the budget holds, so the budget decides.
    llm = LLM(text_mtp_checkpoint, speculative_config=MTP, kv_cache_memory_gib=budget / 2**30, block_size=4,
              max_num_seqs=3, max_num_batched_tokens=8, max_model_len=64)
    plan = llm.plan
    assert plan.num_state_slots == plan.max_num_seqs == 2
    assert plan.state_bytes == allocated_state_bytes(llm.caches) == 2 * slot
    assert plan.num_blocks == (budget - 2 * slot) // block
    assert plan.kv_bytes == allocated_kv_bytes(llm.caches)
    assert allocated_kv_bytes(llm.caches) + allocated_state_bytes(llm.caches) <= budget


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "int8"])
def test_int8_and_two_mtp_layers_are_planned(two_layer_mtp_checkpoint, kv_cache_dtype):
    """Two MTP layers, each with its own cache, in either KV dtype: planned bytes equal allocated bytes."""
    llm = LLM(two_layer_mtp_checkpoint, speculative_config=MTP, kv_cache_dtype=kv_cache_dtype, num_blocks=20,
              block_size=4, max_num_seqs=2, max_num_batched_tokens=8)
    assert len(llm.model_runner.spec.mtp.layer_ids) == 2
    assert llm.plan.kv_bytes == allocated_kv_bytes(llm.caches)
    assert llm.plan.state_bytes == allocated_state_bytes(llm.caches)


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
    # The MTP layer's KV cache makes every block dearer: fewer tokens fit, and the plan still fits the budget.
    with_mtp = fit_max_model_len(config, **common, state_rows_per_request=1 + K, num_mtp_layers=1)
    mtp_block = bytes_per_block(config, 4, dtype, num_mtp_layers=1)
    assert with_mtp == (budget - row * (1 + K)) // mtp_block * 4 - 4 < rows
    plan = plan_memory(config, **common, max_model_len=with_mtp, state_rows_per_request=1 + K, num_mtp_layers=1)
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
