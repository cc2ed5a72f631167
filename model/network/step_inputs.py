"""What one forward pass reads: the step's ``StepMetadata`` on the model's device, plus what is derived from it.

The layout is the scheduler's (``qwen_ops.scheduling.StepMetadata``: decode
rows first, then prefill chunks). Values that every layer would otherwise
derive again from it, each time reading the device back (the prefill chunks'
own offsets, the GDN chunk table, the attention kernels' work units), are
built here once per step from the CPU tensors, before anything moves.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ...ops import prepare_chunk_indices
from ...scheduling import StepMetadata

# (CPU query_start_loc, num_decodes) -> the attention ops' prefill_units on the CPU, or None (not needed).
UnitsBuilder = Callable[[torch.Tensor, int], "torch.Tensor | None"]


@dataclass
class StepInputs(StepMetadata):
    """A ``StepMetadata`` on the model's device with the step's derived metadata.

    prefill_query_start_loc: [P+1] int32 offsets of the prefill chunks within
        the prefill rows (from 0), for the GDN prefill ops.
    chunk_indices, chunk_offsets: ``prepare_chunk_indices(prefill_query_start_loc)``
        for ``chunk_gated_delta_rule`` (None without prefill rows).
    prefill_units: ``mixed_attention``'s work units (None when its backend needs none).
    gdn_state_indices: [G, N] int32, each GDN group's state row (a pool page) of every request,
        when the GDN states live in the pool's pages (``worker/gdn_pages.py``); None: ``state_indices``.
    gdn_spec_state_indices: [G, num_decodes, 1 + k] int32, the same for speculative verify rows
        (None: ``spec_state_indices``).
    gdn_checkpoints: the "chunk" prefix-caching mode's saves of the step
        (``worker/gdn_checkpoint_rows.GdnCheckpointSaves``), or None.
    """

    prefill_query_start_loc: torch.Tensor | None = None
    chunk_indices: torch.Tensor | None = None
    chunk_offsets: torch.Tensor | None = None
    prefill_units: torch.Tensor | None = None
    gdn_state_indices: torch.Tensor | None = None
    gdn_spec_state_indices: torch.Tensor | None = None
    gdn_checkpoints: "GdnCheckpointSaves | None" = None

    @classmethod
    def build(cls, meta: StepMetadata, device: torch.device, units: UnitsBuilder | None = None,
              gdn_rows: tuple[torch.Tensor, torch.Tensor | None] | None = None,
              gdn_checkpoints: "GdnCheckpointSaves | None" = None) -> "StepInputs":
        """Derive from the CPU ``meta`` (validated by the caller), then move everything to ``device``.

        gdn_rows: ``GdnPageTables.lay_out``'s per-group state rows (None: the GDN states are not in pages)."""
        qsl = meta.query_start_loc[meta.num_decodes:]
        prefill_qsl = qsl - qsl[0]
        chunk_indices = chunk_offsets = None
        if meta.num_prefills:
            chunk_indices, chunk_offsets = prepare_chunk_indices(prefill_qsl)
        fields = {name: getattr(meta, name) for name in StepMetadata.__dataclass_fields__}
        step = cls(**fields, prefill_query_start_loc=prefill_qsl, chunk_indices=chunk_indices,
                   chunk_offsets=chunk_offsets,
                   gdn_state_indices=gdn_rows[0] if gdn_rows is not None else None,
                   gdn_spec_state_indices=gdn_rows[1] if gdn_rows is not None else None,
                   gdn_checkpoints=gdn_checkpoints.to(device, non_blocking=True) if gdn_checkpoints is not None
                   else None,
                   prefill_units=units(meta.query_start_loc, meta.num_attention_decodes) if units is not None else None)
        return step.to(device, non_blocking=True)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])
