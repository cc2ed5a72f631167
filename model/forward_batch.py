"""The tensors one forward pass reads: a flat mixed batch, decode rows first, then prefill chunks."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ForwardBatch:
    """One step's batch on the model's device.

    N requests, T tokens (no padding rows): the first ``num_decodes`` requests are
    decodes with one token each, the others prefill chunks.

    input_ids, positions: [T] int64.
    query_start_loc: [N+1] int32 offsets of each request's rows.
    seq_lens: [N] int32 tokens in the KV cache after this step.
    block_tables: [N, M] int32; slot_mapping: [T] int64 KV slot of each token.
    state_indices: [N] int32 GDN state slot of each request.
    has_initial_state: [N] bool, False where the request's GDN state starts from zeros.
    logits_indices: [S] int64 rows whose logits are wanted.
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_tables: torch.Tensor
    slot_mapping: torch.Tensor
    state_indices: torch.Tensor
    has_initial_state: torch.Tensor
    logits_indices: torch.Tensor
    num_decodes: int
    num_decode_tokens: int

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_requests(self) -> int:
        return int(self.seq_lens.shape[0])

    @property
    def prefill_query_start_loc(self) -> torch.Tensor:
        """[P+1] offsets of the prefill chunks within the prefill rows (starting at 0)."""
        qsl = self.query_start_loc[self.num_decodes:]
        return qsl - qsl[0]

    @classmethod
    def single_prefill(cls, token_ids: list[int], block_size: int, device: torch.device,
                       state_slot: int = 0) -> "ForwardBatch":
        """One whole prompt as one prefill, in blocks 1, 2, ... (block 0 is the null block).

        Every row's logits are requested. Used to score a prompt and to calibrate INT8 KV scales.
        """
        n = len(token_ids)
        num_blocks = -(-n // block_size)
        i32 = dict(dtype=torch.int32, device=device)
        positions = torch.arange(n, dtype=torch.int64, device=device)
        return cls(
            input_ids=torch.tensor(token_ids, dtype=torch.int64, device=device),
            positions=positions,
            query_start_loc=torch.tensor([0, n], **i32),
            seq_lens=torch.tensor([n], **i32),
            block_tables=torch.arange(1, num_blocks + 1, **i32)[None, :],
            slot_mapping=positions + block_size,
            state_indices=torch.tensor([state_slot], **i32),
            has_initial_state=torch.tensor([False], device=device),
            logits_indices=positions.clone(),
            num_decodes=0,
            num_decode_tokens=0,
        )
