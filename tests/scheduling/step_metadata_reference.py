"""The per-row build_step_metadata that the vectorised one replaced: a test oracle.

Straightforward Python, one row at a time; scheduling.step_metadata must produce
exactly the same tensors (values and dtypes).
"""

import torch

from qwen_ops.scheduling import SchedulerOutput
from qwen_ops.scheduling.block_pool import NULL_BLOCK
from qwen_ops.scheduling.step_metadata import AttentionState, StepMetadata


def reference_attention_state(context_lens, query_lens, num_drafts, enable_chunked_prefill,
                              num_cached_tokens=None) -> AttentionState:
    """The issue's state rules written row by row, independently of scheduling.step_metadata.

    The state looks at query lengths only (as vLLM-Ascend does), not at how rows are laid out.
    """
    rows = list(zip(context_lens, query_lens, num_drafts))
    if all(context == 0 for context, _, _ in rows):
        return AttentionState.PrefillNoCache
    if all(query == 1 for _, query, _ in rows):
        return AttentionState.DecodeOnly
    if any(drafts > 0 for _, _, drafts in rows) and all(query - drafts == 1 for _, query, drafts in rows):
        return AttentionState.SpecDecoding
    hits = num_cached_tokens or [0] * len(rows)
    if all(hit > 0 and hit == context for hit, (context, _, _) in zip(hits, rows)):
        return AttentionState.PrefillCacheHit  # every request is a prefill starting at its prefix hit
    return AttentionState.ChunkedPrefill if enable_chunked_prefill else AttentionState.PrefillCacheHit


def reference_build_step_metadata(
    scheduler_output: SchedulerOutput,
    num_padded_tokens: int | None = None,
    max_blocks_per_request: int | None = None,
) -> StepMetadata:
    """Build the step's tensors from a SchedulerOutput (call it before the next schedule()).

    num_padded_tokens: pad the token dimension to this size (e.g. a captured graph size).
    max_blocks_per_request: width M of block_tables (default: the widest request).
    """
    out = scheduler_output
    if out.total_num_scheduled_tokens == 0:
        raise ValueError("scheduler_output schedules no tokens: there is no step to lay out")
    num_tokens = out.total_num_scheduled_tokens
    if num_padded_tokens is not None and num_padded_tokens < num_tokens:
        raise ValueError(f"num_padded_tokens ({num_padded_tokens}) is less than the {num_tokens} scheduled tokens")
    padded = num_tokens if num_padded_tokens is None else num_padded_tokens
    block_size = out.block_size

    decodes, prefills = [], []
    for request_id, num_new in out.num_scheduled_tokens.items():
        num_drafts = len(out.scheduled_spec_decode_tokens.get(request_id, ()))
        is_decode = num_new - num_drafts == 1 and out.num_computed_tokens[request_id] > 0
        (decodes if is_decode else prefills).append(request_id)
    req_ids = decodes + prefills

    query_lens = [out.num_scheduled_tokens[r] for r in req_ids]
    context_lens = [out.num_computed_tokens[r] for r in req_ids]
    drafts = [len(out.scheduled_spec_decode_tokens.get(r, ())) for r in req_ids]
    # Whole block tables, lookahead blocks included: a draft model writes KV there.
    tables = [out.block_ids[r] for r in req_ids]
    widest = max(len(t) for t in tables)
    width = widest if max_blocks_per_request is None else max_blocks_per_request
    if width < widest:
        raise ValueError(f"max_blocks_per_request ({width}) is less than the {widest} blocks a request holds")

    # Built as Python lists and converted once: one small tensor per row costs more.
    positions, token_request_indices, input_ids, slot_mapping = [], [], [], []
    query_start_loc = [0]
    sampling = set(out.sampling_req_ids)
    logits_indices, sampling_req_ids = [], []
    for row, request_id in enumerate(req_ids):
        table, context, query = tables[row], context_lens[row], query_lens[row]
        row_positions = range(context, context + query)
        positions.extend(row_positions)
        slot_mapping.extend(table[p // block_size] * block_size + p % block_size for p in row_positions)
        token_request_indices.extend([row] * query)
        input_ids.extend(max(t, 0) for t in out.token_ids[request_id])  # draft placeholder -1 runs as 0
        end = query_start_loc[-1] + query
        query_start_loc.append(end)
        if request_id in sampling:
            logits_indices.extend(range(end - 1 - drafts[row], end))
            sampling_req_ids.append(request_id)
    num_padding = padded - num_tokens
    block_tables = torch.tensor([t + [NULL_BLOCK] * (width - len(t)) for t in tables], dtype=torch.int32)

    seq_lens = [c + q for c, q in zip(context_lens, query_lens)]
    state_indices = torch.tensor([out.state_slots[r] for r in req_ids] if out.state_slots else [], dtype=torch.int32)
    num_decode_tokens = sum(query_lens[: len(decodes)])
    return StepMetadata(
        req_ids=req_ids,
        query_start_loc=torch.tensor(query_start_loc, dtype=torch.int32),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        context_lens=torch.tensor(context_lens, dtype=torch.int32),
        block_tables=block_tables,
        slot_mapping=torch.tensor(slot_mapping + [-1] * num_padding, dtype=torch.int64),
        positions=torch.tensor(positions + [0] * num_padding, dtype=torch.int64),
        token_request_indices=torch.tensor(token_request_indices + [-1] * num_padding, dtype=torch.int32),
        input_ids=torch.tensor(input_ids + [0] * num_padding, dtype=torch.int64),
        logits_indices=torch.tensor(logits_indices, dtype=torch.int64),
        sampling_req_ids=sampling_req_ids,
        num_decodes=len(decodes),
        num_decode_tokens=num_decode_tokens,
        num_prefills=len(prefills),
        num_prefill_tokens=num_tokens - num_decode_tokens,
        num_actual_tokens=num_tokens,
        state_indices=state_indices,
        has_initial_state=torch.tensor([c > 0 for c in context_lens], dtype=torch.bool),
        attn_state=reference_attention_state(context_lens, query_lens, drafts, out.enable_chunked_prefill,
                                             [out.num_cached_tokens.get(r, 0) for r in req_ids]),
    )
