"""Checks that a persistent batch agrees with the scheduler (shared by the batch and engine tests)."""
import torch

from qwen_ops.model.worker.input_batch import InputBatch
from qwen_ops.scheduling import Scheduler, build_step_metadata


def assert_rows_match_scheduler(batch: InputBatch, scheduler: Scheduler, cursor_of) -> None:
    """Every running request has exactly one row holding its block ids, cursor and state slot."""
    running = {r.request_id: r for r in scheduler.running}
    assert sorted(batch.req_ids) == sorted(running)
    assert batch.row_of == {r: i for i, r in enumerate(batch.req_ids)}
    n = len(batch)
    for row, request_id in enumerate(batch.req_ids):
        request = running[request_id]
        blocks = list(request.block_ids)
        assert batch.num_blocks[row] == len(blocks)
        assert batch.block_table[row, : len(blocks)].tolist() == blocks
        assert not batch.block_table[row, len(blocks):].any()  # the rest is the null block
        assert int(batch.state_slots[row]) == request.state_slot
        assert int(batch.num_computed_tokens[row]) == cursor_of(request)
    assert not batch.block_table[n:].any() and not batch.num_computed_tokens[n:].any()  # free rows are clear


def assert_step_matches_metadata(prepared, out) -> None:
    meta = build_step_metadata(out)
    b = prepared.batch
    assert prepared.req_ids == meta.req_ids
    assert prepared.sampling_req_ids == meta.sampling_req_ids
    assert b.num_decodes == meta.num_decodes and prepared.num_prefills == meta.num_prefills
    assert b.num_decode_tokens == meta.num_decode_tokens
    for name in ("input_ids", "positions", "query_start_loc", "seq_lens", "block_tables", "slot_mapping",
                 "state_indices", "has_initial_state", "logits_indices"):
        ours, theirs = getattr(b, name), getattr(meta, name)
        assert ours.dtype == theirs.dtype, name
        torch.testing.assert_close(ours, theirs, atol=0, rtol=0, msg=name)
