"""The persistent batch: per-request state the model runner keeps across steps (as vLLM's InputBatch).

A request gets a row when the scheduler admits (or resumes) it and keeps it
until it finishes, is aborted or is preempted. Each step only applies what the
scheduler changed: rows of new and resumed requests are filled, blocks
allocated in the step are appended to their rows, rows of finished and
preempted requests are freed. Nothing is rebuilt from zero.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .sampling import SamplingParams


@dataclass
class RequestState:
    """What the runner knows about one admitted request."""

    request_id: str
    params: SamplingParams
    generator: torch.Generator
    row: int
    num_blocks: int = 0
    state_slot: int | None = None


class InputBatch:
    """Rows of per-request state: block table [max_num_seqs, max_blocks] int32, sampling settings, generators."""

    def __init__(self, max_num_seqs: int, max_blocks_per_request: int):
        self.block_table = torch.zeros((max_num_seqs, max_blocks_per_request), dtype=torch.int32)
        self._free_rows = list(range(max_num_seqs - 1, -1, -1))
        self.requests: dict[str, RequestState] = {}

    def __len__(self) -> int:
        return len(self.requests)

    def update(self, scheduler_output, params: dict[str, SamplingParams],
               generators: dict[str, torch.Generator]) -> None:
        """Apply one ``SchedulerOutput``: drop finished/preempted rows, add new/resumed ones, append new blocks.

        params, generators: the settings of every request the engine knows, by id.
        """
        out = scheduler_output
        for request_id in set(out.finished_req_ids) | set(out.preempted_req_ids):
            self.remove(request_id)
        for request_id in list(out.new_request_ids) + list(out.resumed_request_ids):
            self.remove(request_id)  # a resumed request restarts from an empty table
            row = self._free_rows.pop()
            self.requests[request_id] = RequestState(request_id, params[request_id], generators[request_id], row)
        for request_id, blocks in out.new_block_ids.items():
            state = self.requests[request_id]
            end = state.num_blocks + len(blocks)
            if end > self.block_table.shape[1]:
                raise RuntimeError(f"request {request_id!r} holds {end} blocks, more than the "
                                   f"{self.block_table.shape[1]} a row can hold")
            if blocks:
                self.block_table[state.row, state.num_blocks:end] = torch.tensor(blocks, dtype=torch.int32)
            state.num_blocks = end
        for request_id, slot in out.state_slots.items():
            self.requests[request_id].state_slot = slot

    def remove(self, request_id: str) -> None:
        state = self.requests.pop(request_id, None)
        if state is not None:
            self.block_table[state.row].zero_()  # zero is the null block
            self._free_rows.append(state.row)

    def block_tables(self, req_ids: list[str]) -> torch.Tensor:
        """[N, M] int32 block tables of ``req_ids`` in that order, M = the widest of them."""
        rows = torch.tensor([self.requests[r].row for r in req_ids], dtype=torch.long)
        width = max(self.requests[r].num_blocks for r in req_ids)
        return self.block_table.index_select(0, rows)[:, :width].contiguous()
