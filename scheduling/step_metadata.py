"""Lay a scheduled step out as the tensors the Ascend attention and GDN ops read."""

import enum
from dataclasses import dataclass

import torch

from .block_pool import NULL_BLOCK
from .scheduler import SchedulerOutput


class AttentionState(enum.Enum):
    """vLLM-Ascend's attention state of a step: which attention kernel path runs."""

    PrefillNoCache = 0  # every request starts from an empty cache
    PrefillCacheHit = 1  # prefills reading cached context, chunked prefill off
    DecodeOnly = 2  # every request advances exactly one token
    ChunkedPrefill = 3  # a mix of decodes and (partial) prefills
    SpecDecoding = 4  # every request verifies one token plus its drafts


@dataclass
class StepMetadata:
    """The batch of one step, decode rows first, then prefill rows.

    N requests and T tokens. A request is a decode when it advances exactly one
    known token (plus any drafts) past a cursor > 0; everything else is a prefill.

    req_ids: the N request ids in row order.
    query_start_loc: [N+1] int32, request i's tokens are rows query_start_loc[i]:query_start_loc[i+1].
    seq_lens: [N] int32, tokens in the cache after this step (context + query).
    context_lens: [N] int32, tokens already in the cache before this step.
    block_tables: [N, M] int32, each request's block ids, padded with the null block 0.
    slot_mapping: [T] int64, KV slot of each token: block * block_size + offset (-1: padding row).
    positions: [T] int64, position of each token in its sequence (for RoPE; 0 on padding rows).
    token_request_indices: [T] int32, which request row each token belongs to (-1: padding).
    input_ids: [T] int64, the tokens to run (drafts included; 0 on padding rows).
    logits_indices: [S] int64, rows whose logits are sampled: for each request that
        samples in this step, its last row plus one row per draft token before it.
    sampling_req_ids: the requests those rows belong to, in order.
    num_decodes, num_decode_tokens, num_prefills, num_prefill_tokens: the split.
    num_actual_tokens: T without padding.
    state_indices: [N] int32, GDN state slot of each request (hybrid models; else empty).
    has_initial_state: [N] bool, whether the request's GDN state carries earlier tokens
        (cursor > 0) rather than starting from zeros.
    attn_state: the AttentionState of the step.
    """

    req_ids: list[str]
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    context_lens: torch.Tensor
    block_tables: torch.Tensor
    slot_mapping: torch.Tensor
    positions: torch.Tensor
    token_request_indices: torch.Tensor
    input_ids: torch.Tensor
    logits_indices: torch.Tensor
    sampling_req_ids: list[str]
    num_decodes: int
    num_decode_tokens: int
    num_prefills: int
    num_prefill_tokens: int
    num_actual_tokens: int
    state_indices: torch.Tensor
    has_initial_state: torch.Tensor
    attn_state: AttentionState


def attention_state(
    context_lens: list[int],
    query_lens: list[int],
    num_drafts: list[int],
    enable_chunked_prefill: bool,
) -> AttentionState:
    """vLLM-Ascend's rules, first match wins (lists are per request)."""
    if all(c == 0 for c in context_lens):
        return AttentionState.PrefillNoCache
    if all(q == 1 for q in query_lens):
        return AttentionState.DecodeOnly
    if any(num_drafts) and all(q - d == 1 for q, d in zip(query_lens, num_drafts)):
        return AttentionState.SpecDecoding
    if enable_chunked_prefill:
        return AttentionState.ChunkedPrefill
    return AttentionState.PrefillCacheHit


def build_step_metadata(
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
        input_ids.extend(out.token_ids[request_id])
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
        attn_state=attention_state(context_lens, query_lens, drafts, out.enable_chunked_prefill),
    )
