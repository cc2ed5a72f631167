"""Lay a scheduled step out as the tensors the Ascend attention and GDN ops read."""

import dataclasses
import enum
from array import array
from dataclasses import dataclass
from itertools import chain
from operator import add

import torch

from .block_pool import NULL_BLOCK
from .scheduler import SchedulerOutput


class AttentionState(enum.Enum):
    """vLLM-Ascend's attention state of a step: which attention kernel path runs."""

    PrefillNoCache = 0  # every request starts from an empty cache
    PrefillCacheHit = 1  # prefills starting from a prefix-cache hit, or reading context with chunked prefill off
    DecodeOnly = 2  # every request advances exactly one token
    ChunkedPrefill = 3  # a mix of decodes and (partial) prefills
    SpecDecoding = 4  # every request verifies one token plus its drafts


@dataclass
class StepMetadata:
    """The batch of one step, decode rows first, then prefill rows.

    N requests and T tokens. A request is a decode when it advances exactly one
    known token (plus any drafts) past a cursor > 0; everything else is a prefill,
    including a new 1-token prompt padded with draft placeholders (its GDN state
    starts from zeros).

    req_ids: the N request ids in row order.
    query_start_loc: [N+1] int32, request i's tokens are rows query_start_loc[i]:query_start_loc[i+1].
    seq_lens: [N] int32, tokens in the cache after this step (context + query).
    context_lens: [N] int32, tokens already in the cache before this step.
    block_tables: [N, M] int32, each request's block ids, padded with the null block 0.
    slot_mapping: [T] int64, KV slot of each token: block * block_size + offset (-1: padding row).
    positions: [T] int64, position of each token in its sequence (for RoPE; 0 on padding rows).
    token_request_indices: [T] int32, which request row each token belongs to (-1: padding).
    input_ids: [T] int64, the tokens to run (drafts included; 0 on padding rows and on
        the draft placeholder rows of a request padded to the decode shape, which the
        scheduler marks -1 in scheduled_spec_decode_tokens).
    logits_indices: [S] int64, rows whose logits are sampled: for each request that
        samples in this step, its last row plus one row per draft token before it.
    sampling_req_ids: the requests those rows belong to, in order.
    num_decodes, num_decode_tokens, num_prefills, num_prefill_tokens: the split.
    num_actual_tokens: T without padding.
    state_indices: [N] int32, GDN state slot of each request (hybrid models; else empty).
    has_initial_state: [N] bool, whether the request's GDN state carries earlier tokens
        (cursor > 0) rather than starting from zeros.
    attn_state: the AttentionState of the step.
    spec_state_indices: None, or with speculative decoding [num_decodes, 1 + k] int32: the GDN state
        rows of each decode row; the state after its token t is written to column t.
    num_accepted_tokens: None, or [num_decodes] int32 in [1, 1 + k]: the decode row starts from its
        state column num_accepted_tokens - 1 (tokens the last step accepted, the bonus one included).
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
    spec_state_indices: torch.Tensor | None = None
    num_accepted_tokens: torch.Tensor | None = None

    def validate(self, *, num_blocks: int, block_size: int, num_state_slots: int) -> None:
        """Check, once per step and on these CPU tensors, every metadata value the model's ops would check.

        An engine calls this before moving the step to the device and then runs
        the ops inside ``qwen_ops.ops.trusted_metadata()``, so that no layer
        reads a value back from the device. Checked: ``query_start_loc`` runs
        from 0 to ``num_actual_tokens`` without decreasing; decode rows have one
        token each (drafts are not run by the model); ``seq_lens`` is
        ``context_lens`` plus the query lengths, all >= 0; every block a
        request reads is in [0, num_blocks) and fits its table; slots are in
        [-1, num_blocks * block_size) and unique; state indices are in
        [-1, num_state_slots) and unique. Raises ValueError naming the field.
        """
        from ..ops import _validate as check

        op = "StepMetadata"
        for name in ("query_start_loc", "seq_lens", "context_lens", "block_tables", "slot_mapping", "state_indices"):
            if getattr(self, name).device.type != "cpu":
                raise ValueError(f"{op}.validate: '{name}' must be on the CPU (validate before moving the step)")
        check.cumulative(op, "query_start_loc", self.query_start_loc, self.num_actual_tokens)
        query_lens = self.query_start_loc[1:] - self.query_start_loc[:-1]
        if self.spec_state_indices is not None:
            self._validate_spec(query_lens, num_state_slots)
        elif bool((query_lens[: self.num_decodes] != 1).any()):
            raise ValueError(f"{op}: the first num_decodes = {self.num_decodes} requests are decodes and must "
                             "have one token each (the model runs no draft tokens)")
        check.lengths(op, "context_lens", self.context_lens)
        if not torch.equal(self.seq_lens, self.context_lens + query_lens):
            raise ValueError(f"{op}: 'seq_lens' must be 'context_lens' plus each request's query length")
        check.block_table(op, self.block_tables, self.seq_lens, num_blocks, block_size)
        check.indices(op, "slot_mapping", self.slot_mapping, num_blocks * block_size, allow_padding=True)
        check.indices(op, "state_indices", self.state_indices, num_state_slots, allow_padding=True)

    @property
    def num_attention_decodes(self) -> int:
        """Rows the attention ops run as one-token decodes: ``num_decodes``, or 0 with speculative decoding,
        whose verify rows (1 + k tokens) run as short chunks over their context, causal among themselves."""
        return self.num_decodes if self.spec_state_indices is None else 0

    def _validate_spec(self, query_lens: torch.Tensor, num_state_slots: int) -> None:
        """Speculative decoding: decode rows of 1..1+k tokens, their state rows and accepted counts."""
        from ..ops import _validate as check

        op, nd = "StepMetadata", self.num_decodes
        rows, accepted = self.spec_state_indices, self.num_accepted_tokens
        if rows.dim() != 2 or rows.shape[0] != nd or rows.dtype != torch.int32 or rows.device.type != "cpu":
            raise ValueError(f"{op}: 'spec_state_indices' must be int32 [num_decodes={nd}, 1 + k] on the CPU, "
                             f"got {rows.dtype} {tuple(rows.shape)}")
        width = rows.shape[1]
        if accepted is None or accepted.shape != (nd,) or accepted.dtype != torch.int32 \
                or accepted.device.type != "cpu":
            raise ValueError(f"{op}: 'num_accepted_tokens' must be int32 [num_decodes={nd}] on the CPU")
        if nd and bool(((accepted < 1) | (accepted > width)).any()):
            raise ValueError(f"{op}: 'num_accepted_tokens' must be in [1, {width}], got {accepted.tolist()}")
        decode_lens = query_lens[:nd]
        if nd and bool(((decode_lens < 1) | (decode_lens > width)).any()):
            raise ValueError(f"{op}: decode rows must have 1 to 1 + k = {width} tokens, got {decode_lens.tolist()}")
        check.indices(op, "spec_state_indices", rows.reshape(-1), num_state_slots, allow_padding=False)

    def to(self, device: torch.device, **kwargs) -> "StepMetadata":
        """The same step with every tensor on ``device`` (``kwargs`` go to ``Tensor.to``, e.g. non_blocking)."""
        moved = {f.name: getattr(self, f.name).to(device, **kwargs) for f in dataclasses.fields(self)
                 if isinstance(getattr(self, f.name), torch.Tensor)}
        return dataclasses.replace(self, **moved)


def attention_state(
    context_lens: list[int],
    query_lens: list[int],
    num_drafts: list[int],
    enable_chunked_prefill: bool,
    num_cached_tokens: list[int] | None = None,
) -> AttentionState:
    """vLLM-Ascend's rules, first match wins (lists are per request).

    Every request with 0 computed tokens: PrefillNoCache; else every request
    scheduled 1 token: DecodeOnly; else (speculative decoding on) every request
    with one valid token past its drafts: SpecDecoding; else PrefillCacheHit when
    every request is a prefill starting from its prefix-cache hit (context_len ==
    num_cached_tokens > 0: admitted in this step with a hit); else ChunkedPrefill
    with chunked prefill, PrefillCacheHit without. The state describes the query
    lengths, as on Ascend; the row layout (``num_decodes``) is separate: a new
    1-token prompt is a prefill row even in a DecodeOnly step, which the ops
    handle either way (its key is in the cache before attention reads it).
    """
    if not any(context_lens):
        return AttentionState.PrefillNoCache
    if query_lens.count(1) == len(query_lens):  # count() runs in C
        return AttentionState.DecodeOnly
    if any(num_drafts) and all(q - d == 1 for q, d in zip(query_lens, num_drafts)):
        return AttentionState.SpecDecoding
    if num_cached_tokens and all(0 < h == c for h, c in zip(num_cached_tokens, context_lens)):
        return AttentionState.PrefillCacheHit
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

    The engine calls this every step, so its cost is device idle time: everything is
    gathered in flat Python lists (map() over the dicts, one cheap pass over the rows)
    and each list becomes a tensor in one C-level conversion.
    """
    out = scheduler_output
    if not isinstance(out, SchedulerOutput):
        raise TypeError(f"scheduler_output must be a SchedulerOutput, got {type(out).__name__}")
    for name, value in (("num_padded_tokens", num_padded_tokens), ("max_blocks_per_request", max_blocks_per_request)):
        if value is not None and type(value) is not int:
            raise TypeError(f"{name} must be None or an int, got {value!r}")
    if out.total_num_scheduled_tokens == 0:
        raise ValueError("scheduler_output schedules no tokens: there is no step to lay out")
    num_tokens = out.total_num_scheduled_tokens
    if num_padded_tokens is not None and num_padded_tokens < num_tokens:
        raise ValueError(f"num_padded_tokens ({num_padded_tokens}) is less than the {num_tokens} scheduled tokens")
    padded = num_tokens if num_padded_tokens is None else num_padded_tokens
    block_size = out.block_size
    spec = out.scheduled_spec_decode_tokens

    decodes, prefills = [], []
    for request_id, num_new in out.num_scheduled_tokens.items():
        num_drafts = len(spec[request_id]) if spec and request_id in spec else 0
        is_decode = num_new - num_drafts == 1 and out.num_computed_tokens[request_id] > 0
        (decodes if is_decode else prefills).append(request_id)
    req_ids = decodes + prefills
    num_reqs = len(req_ids)

    query_lens = list(map(out.num_scheduled_tokens.__getitem__, req_ids))
    context_lens = list(map(out.num_computed_tokens.__getitem__, req_ids))
    drafts = [len(spec.get(r, ())) for r in req_ids] if spec else [0] * num_reqs
    # Whole block tables, lookahead blocks included: a draft model writes KV there.
    tables = list(map(out.block_ids.__getitem__, req_ids))
    widest = max(map(len, tables))
    width = widest if max_blocks_per_request is None else max_blocks_per_request
    if width < widest:
        raise ValueError(f"max_blocks_per_request ({width}) is less than the {widest} blocks a request holds")

    # Per token, as flat Python lists converted once at the end (no tensor per row).
    sampling = set(out.sampling_req_ids)
    if num_tokens == num_reqs and not spec:
        # A pure decode step, the usual one: one token per row, so the per-token lists
        # are per-row lists, built by comprehensions rather than a loop of appends.
        query_start_loc = list(range(num_reqs + 1))
        positions = context_lens
        token_request_indices = list(range(num_reqs))
        slot_mapping = [t[c // block_size] * block_size + c % block_size for t, c in zip(tables, context_lens)]
        logits_indices = [row for row, request_id in enumerate(req_ids) if request_id in sampling]
        sampling_req_ids = [req_ids[row] for row in logits_indices]
    else:
        query_start_loc, positions, token_request_indices, slot_mapping = [0], [], [], []
        logits_indices, sampling_req_ids = [], []
        end = 0
        for row, (request_id, table, context, query) in enumerate(zip(req_ids, tables, context_lens, query_lens)):
            end += query
            query_start_loc.append(end)
            last = context + query
            positions += range(context, last)
            token_request_indices += [row] * query
            # Slots are contiguous inside a block: one range per block, not one per token.
            for i in range(context // block_size, (last - 1) // block_size + 1):
                offset = (table[i] - i) * block_size  # slot = offset + position
                first_in_block, end_in_block = max(context, i * block_size), min(last, (i + 1) * block_size)
                slot_mapping += range(offset + first_in_block, offset + end_in_block)
            if request_id in sampling:
                logits_indices += range(end - 1 - drafts[row], end)
                sampling_req_ids.append(request_id)
    num_padding = padded - num_tokens
    # One flat row-major list for the padded block table, viewed as [N, M].
    pad = [NULL_BLOCK] * width
    block_tables = _tensor(list(chain.from_iterable([t + pad[len(t) :] for t in tables])), torch.int32)

    input_ids = list(chain.from_iterable(map(out.token_ids.__getitem__, req_ids)))
    if spec:  # draft placeholders (-1) run as token 0, like padding rows: embedding rejects -1
        input_ids = [t if t >= 0 else 0 for t in input_ids]
    state_slots = list(map(out.state_slots.__getitem__, req_ids)) if out.state_slots else []
    num_decode_tokens = sum(query_lens[: len(decodes)])
    return StepMetadata(
        req_ids=req_ids,
        query_start_loc=_tensor(query_start_loc, torch.int32),
        seq_lens=_tensor(list(map(add, context_lens, query_lens)), torch.int32),
        context_lens=_tensor(context_lens, torch.int32),
        block_tables=block_tables.view(num_reqs, width),
        slot_mapping=_tensor(slot_mapping + [-1] * num_padding),
        positions=_tensor(positions + [0] * num_padding),
        token_request_indices=_tensor(token_request_indices + [-1] * num_padding, torch.int32),
        input_ids=_tensor(input_ids + [0] * num_padding),
        logits_indices=_tensor(logits_indices),
        sampling_req_ids=sampling_req_ids,
        num_decodes=len(decodes),
        num_decode_tokens=num_decode_tokens,
        num_prefills=len(prefills),
        num_prefill_tokens=num_tokens - num_decode_tokens,
        num_actual_tokens=num_tokens,
        state_indices=_tensor(state_slots, torch.int32),
        has_initial_state=_tensor(context_lens) > 0,
        attn_state=attention_state(context_lens, query_lens, drafts, out.enable_chunked_prefill,
                                   [out.num_cached_tokens.get(r, 0) for r in req_ids] if out.num_cached_tokens else None),
    )


def _tensor(values: list[int], dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """torch.tensor(values, dtype=dtype) for a flat list of ints (int64 or int32), several times faster.

    torch.tensor() inspects every element as a Python object; array() converts in
    one C loop and torch.frombuffer() wraps its memory without a copy.
    """
    if not values:
        return torch.empty(0, dtype=dtype)
    return torch.frombuffer(array("q" if dtype == torch.int64 else "i", values), dtype=dtype)
