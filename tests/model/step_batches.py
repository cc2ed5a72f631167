"""Hand-built step batches for driving the model directly (MTP tests), one request at a time.

A plain namespace with every field the model's layers read from a step batch
(the engine's ``ForwardBatch`` today, the scheduler-derived step inputs after
the engine split): the derived per-step metadata (chunk table, attention work
units) is left None, so each op builds its own.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

I32 = dict(dtype=torch.int32)


def request_batch(tokens, first_position, block_size, num_blocks, *, decode=False, state_slot=0,
                  has_initial_state=True, logits_indices=None):
    """One request's rows at positions first_position.. over its cached context, in blocks 1..num_blocks.

    ``decode``: a one-token decode row (else a chunk, causal over the cached context). Every row's logits
    are requested unless ``logits_indices`` says otherwise.
    """
    n = len(tokens)
    positions = torch.arange(first_position, first_position + n)
    qsl = torch.tensor([0, n], **I32)
    return SimpleNamespace(
        input_ids=torch.tensor(tokens), positions=positions, query_start_loc=qsl,
        seq_lens=torch.tensor([first_position + n], **I32),
        context_lens=torch.tensor([first_position], **I32),
        block_tables=torch.arange(1, num_blocks + 1, **I32)[None], slot_mapping=positions + block_size,
        state_indices=torch.tensor([state_slot], **I32), has_initial_state=torch.tensor([has_initial_state]),
        logits_indices=torch.arange(n) if logits_indices is None else torch.as_tensor(logits_indices),
        num_decodes=1 if decode else 0, num_decode_tokens=n if decode else 0,
        num_prefills=0 if decode else 1, num_prefill_tokens=0 if decode else n, num_actual_tokens=n,
        prefill_query_start_loc=torch.tensor([0], **I32) if decode else qsl,
        chunk_indices=None, chunk_offsets=None, prefill_units=None, num_tokens=n)


def prompt_batch(tokens, block_size, state_slot=0):
    """A whole prompt as one prefill from position 0 (GDN state from zeros), blocks enough to hold it."""
    return request_batch(tokens, 0, block_size, -(-len(tokens) // block_size), state_slot=state_slot,
                         has_initial_state=False)
