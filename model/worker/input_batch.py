"""The persistent batch: per-request rows the model runner keeps across steps (as vLLM's InputBatch).

A request gets a row when the scheduler admits (or resumes) it and keeps it
until it finishes, is aborted or is preempted. Each step applies only what the
scheduler changed (``update``): rows of finished and preempted requests are
freed (the last row moves into the hole, so rows stay dense), rows of new and
resumed requests are appended, blocks allocated in the step are appended to
their rows. Then ``prepare`` lays the step out with ``build_step_metadata``
(the scheduler's layout, the one every engine uses), reorders rows so the
step's requests come first in that order (decode rows before prefill rows),
checks that the rows agree with it and advances each row's computed-token
cursor as the scheduler did.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Callable

import torch

from ...scheduling import StepMetadata, build_step_metadata
from ..sample.sampling import SamplingParams

# A row's GDN state slot when the scheduler gives none (a model without GDN layers).
NO_STATE_SLOT = -1


@dataclass
class PreparedStep:
    """One step laid out from the persistent batch.

    batch: the step's StepMetadata (on the CPU), rows 0..N-1 = ``req_ids``.
    req_ids: the step's requests in row order (decodes first, then prefill chunks).
    sampling_req_ids: the requests that sample in this step, in row order; their
        logits rows are ``batch.logits_indices``.
    params, generators: sampling settings of ``sampling_req_ids``, same order.
    num_prefills: requests that run a prefill chunk.
    """

    batch: StepMetadata
    req_ids: list[str]
    sampling_req_ids: list[str]
    params: list[SamplingParams]
    generators: list[torch.Generator]
    num_prefills: int


class InputBatch:
    """Dense rows of per-request state, row i for ``req_ids[i]``.

    block_table: [max_num_seqs, max_blocks_per_request] int32, row i's first
        ``num_blocks[i]`` entries are the request's block ids, the rest the null block 0.
    num_computed_tokens: [max_num_seqs] int32 cursor (tokens whose KV/state the cache holds).
    state_slots: [max_num_seqs] int32 GDN state slot (-1: none).
    params, generators: sampling settings and random generator of each row.
    """

    def __init__(self, max_num_seqs: int, max_blocks_per_request: int, block_size: int):
        if max_num_seqs < 1 or max_blocks_per_request < 1 or block_size < 1:
            raise ValueError(f"InputBatch needs max_num_seqs, max_blocks_per_request and block_size >= 1, got "
                             f"{max_num_seqs}, {max_blocks_per_request}, {block_size}")
        self.max_num_seqs = max_num_seqs
        self.block_size = block_size
        self.block_table = torch.zeros((max_num_seqs, max_blocks_per_request), dtype=torch.int32)
        self.num_computed_tokens = torch.zeros(max_num_seqs, dtype=torch.int32)
        self.state_slots = torch.full((max_num_seqs,), NO_STATE_SLOT, dtype=torch.int32)
        self.num_blocks: list[int] = []
        self.req_ids: list[str] = []
        self.params: list[SamplingParams] = []
        self.generators: list[torch.Generator] = []
        self.row_of: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.req_ids)

    # ------------------------------------------------------------ rows

    def update(self, scheduler_output,
               sampling_state: Callable[[str], tuple[SamplingParams, torch.Generator]]) -> None:
        """Apply what one ``SchedulerOutput`` changed.

        sampling_state(request_id) -> (params, generator) of a request joining the
        batch; the engine keeps them per request, so a preempted request resumes
        with its generator where it left off.
        """
        out = scheduler_output
        for request_id in chain(out.finished_req_ids, out.preempted_req_ids):
            self.remove(request_id)
        for request_id in chain(out.new_req_ids, out.resumed_req_ids):
            params, generator = sampling_state(request_id)
            self._add(request_id, out.num_computed_tokens[request_id],
                      out.state_slots.get(request_id, NO_STATE_SLOT), params, generator)
        for request_id, blocks in out.new_block_ids.items():
            if blocks:
                self._append_blocks(request_id, blocks)

    def _add(self, request_id: str, num_computed_tokens: int, state_slot: int, params: SamplingParams,
             generator: torch.Generator) -> None:
        if request_id in self.row_of:
            raise RuntimeError(f"request {request_id!r} joins the batch but already holds row "
                               f"{self.row_of[request_id]}: the batch is out of step with the scheduler")
        row = len(self.req_ids)
        if row == self.max_num_seqs:
            raise RuntimeError(f"the batch is full: {self.max_num_seqs} rows (max_num_seqs) are in use")
        self.req_ids.append(request_id)
        self.row_of[request_id] = row
        self.num_blocks.append(0)
        self.num_computed_tokens[row] = num_computed_tokens
        self.state_slots[row] = state_slot
        self.params.append(params)
        self.generators.append(generator)

    def _append_blocks(self, request_id: str, blocks: list[int]) -> None:
        row = self.row_of[request_id]
        start = self.num_blocks[row]
        end = start + len(blocks)
        if end > self.block_table.shape[1]:
            raise RuntimeError(f"request {request_id!r} holds {end} blocks, more than the "
                               f"{self.block_table.shape[1]} a row can hold")
        self.block_table[row, start:end] = torch.tensor(blocks, dtype=torch.int32)
        self.num_blocks[row] = end

    def remove(self, request_id: str) -> None:
        """Free a request's row (no-op if it has none); the last row moves into it."""
        row = self.row_of.pop(request_id, None)
        if row is None:
            return
        last = len(self.req_ids) - 1
        if row != last:
            self._move(last, row)
        self.block_table[last, : self.num_blocks[last]] = 0  # zero is the null block
        self.num_computed_tokens[last] = 0
        self.state_slots[last] = NO_STATE_SLOT
        for per_row in (self.req_ids, self.num_blocks, self.params, self.generators):
            per_row.pop()

    def _move(self, src: int, dst: int) -> None:
        """Copy row ``src`` over row ``dst`` (whose request is gone)."""
        width = max(self.num_blocks[src], self.num_blocks[dst])
        self.block_table[dst, :width] = self.block_table[src, :width]
        self.num_computed_tokens[dst] = self.num_computed_tokens[src]
        self.state_slots[dst] = self.state_slots[src]
        for per_row in (self.req_ids, self.num_blocks, self.params, self.generators):
            per_row[dst] = per_row[src]
        self.row_of[self.req_ids[dst]] = dst

    def _swap(self, i: int, j: int) -> None:
        width = max(self.num_blocks[i], self.num_blocks[j])
        self.block_table[[i, j], :width] = self.block_table[[j, i], :width]
        for tensor in (self.num_computed_tokens, self.state_slots):
            tensor[[i, j]] = tensor[[j, i]]
        for per_row in (self.req_ids, self.num_blocks, self.params, self.generators):
            per_row[i], per_row[j] = per_row[j], per_row[i]
        self.row_of[self.req_ids[i]] = i
        self.row_of[self.req_ids[j]] = j

    def roll_back(self, request_id: str, num_tokens: int) -> None:
        """Move a request's cursor back over ``num_tokens`` rejected draft tokens (as the scheduler does)."""
        self.num_computed_tokens[self.row_of[request_id]] -= num_tokens

    # ------------------------------------------------------------ step

    def prepare(self, scheduler_output) -> PreparedStep:
        """Lay the step out, bring the step's rows into its order and advance their cursors.

        The layout is ``build_step_metadata`` (the one layout of a step); the
        rows hold what the layout does not (sampling settings, generators) and
        must agree with it: a row whose cursor, blocks or state slot differ
        from the scheduler's raises RuntimeError (the batch lost a change).
        Call after ``update`` with the same output.
        """
        out = scheduler_output
        meta = build_step_metadata(out)
        order = meta.req_ids
        for i, request_id in enumerate(order):
            row = self.row_of.get(request_id)
            if row is None:
                raise RuntimeError(f"request {request_id!r} is scheduled but holds no row: the batch is out "
                                   f"of step with the scheduler")
            if row != i:
                self._swap(i, row)
        num_reqs = len(order)
        context = self.num_computed_tokens[:num_reqs]
        if not torch.equal(context, meta.context_lens):
            bad = int((context != meta.context_lens).nonzero()[0, 0])
            raise RuntimeError(f"request {order[bad]!r}: the batch's cursor is {int(context[bad])}, the "
                               f"scheduler's {int(meta.context_lens[bad])}: the batch is out of step with the "
                               f"scheduler")
        width = meta.block_tables.shape[1]
        if not torch.equal(self.block_table[:num_reqs, :width], meta.block_tables) or (
                meta.state_indices.numel() and not torch.equal(self.state_slots[:num_reqs], meta.state_indices)):
            raise RuntimeError("the batch's block tables or state slots differ from the scheduler's: the batch "
                               "is out of step with the scheduler")
        self.num_computed_tokens[:num_reqs] = meta.seq_lens  # the scheduler advanced its cursors in schedule()
        rows = [self.row_of[r] for r in meta.sampling_req_ids]
        return PreparedStep(batch=meta, req_ids=order, sampling_req_ids=meta.sampling_req_ids,
                            params=[self.params[i] for i in rows], generators=[self.generators[i] for i in rows],
                            num_prefills=meta.num_prefills)
