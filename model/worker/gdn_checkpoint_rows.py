"""The model's half of the scheduler's "chunk" prefix-caching mode: GDN checkpoints saved and loaded.

``SchedulerOutput.gdn_checkpoint_saves`` names, per request, the boundaries (tokens
from the step's start) whose GDN states the step saves into checkpoint slots;
``gdn_checkpoint_loads`` the slot an admitted hit's states are copied from before the
step. A checkpoint holds every GDN layer's states: the recurrent state, float32, and
the conv state, the last K - 1 conv inputs before the boundary. A boundary inside a
prefill row is a 64-token chunk end of the kernel: ``chunk_gated_delta_rule
(checkpoint_boundaries=)`` emits its recurrent state and the conv state is copied from
the step's inputs. A boundary at the row's end, wherever the row started (a chunk that
started off the kernel's 64-token grid, or one shorter than 64 tokens), is the state
the step leaves in the request's state row: both are copied from there once the layer
ran. Either way no precision is lost. The pools live beside the state pools
(``add_gdn_checkpoint_pools``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ...scheduling import SchedulerOutput, StepMetadata
from ..loading.config import Qwen35Config
from .kv_cache import ModelCaches


def add_gdn_checkpoint_pools(caches: ModelCaches, config: Qwen35Config, num_slots: int, dtype: torch.dtype,
                             device: torch.device) -> None:
    """Give every GDN layer a checkpoint pool of ``num_slots`` rows: conv [P, K-1, C] in ``dtype`` and
    recurrent [P, Hv, Dk, Dv] float32 (zeros)."""
    if isinstance(num_slots, bool) or not isinstance(num_slots, int) or num_slots < 1:
        raise ValueError(f"add_gdn_checkpoint_pools: num_slots must be an int >= 1, got {num_slots!r}")
    for i in config.linear_attention_layers:
        caches.checkpoint_conv[i] = torch.zeros(
            (num_slots, config.linear_conv_kernel_dim - 1, config.gdn_conv_dim), dtype=dtype, device=device)
        caches.checkpoint_ssm[i] = torch.zeros(
            (num_slots, config.linear_num_value_heads, config.linear_key_head_dim, config.linear_value_head_dim),
            dtype=torch.float32, device=device)


@dataclass
class GdnCheckpointSaves:
    """One step's checkpoint saves as the GDN layers take them (all int tensors, on the model's device).

    boundaries [M, 2] int32: (prefill sequence, chunk j) of the saves inside a row, for
        ``chunk_gated_delta_rule(checkpoint_boundaries=)``; ends [M] int64: their token ends within the
        step's prefill tokens (the conv inputs before them); slots [M] int64: their checkpoint slots.
    final_seqs [F] int64: the prefill sequences saved at their row's end, from the state rows the layer
        leaves; final_slots [F] int64: their slots.
    """

    boundaries: torch.Tensor
    ends: torch.Tensor
    slots: torch.Tensor
    final_seqs: torch.Tensor
    final_slots: torch.Tensor

    def to(self, device: torch.device, **kwargs) -> "GdnCheckpointSaves":
        return GdnCheckpointSaves(**{f.name: getattr(self, f.name).to(device, **kwargs)
                                     for f in dataclasses.fields(self)})


def checkpoint_saves(out: SchedulerOutput, meta: StepMetadata, num_slots: int) -> GdnCheckpointSaves | None:
    """The step's saves (``GdnCheckpointSaves``, on the CPU), or None. A save must be, in a prefill row of
    the step, a 64-token chunk end of the kernel or the row's end (checked: anything else is a scheduler
    bug)."""
    if not out.gdn_checkpoint_saves:
        return None
    qsl = meta.query_start_loc.tolist()
    nd = meta.num_decodes
    first = qsl[nd]
    row_of = {request_id: i for i, request_id in enumerate(meta.req_ids)}
    boundaries, ends, slots, final_seqs, final_slots = [], [], [], [], []
    for request_id, saves in out.gdn_checkpoint_saves.items():
        row = row_of[request_id]
        length = qsl[row + 1] - qsl[row]
        for offset, slot in saves:
            if row < nd or not 0 < offset <= length or (offset % 64 and offset != length) \
                    or not 0 <= slot < num_slots:
                raise ValueError(f"checkpoint_saves: request {request_id!r} saves at {offset} tokens into slot "
                                 f"{slot}; a save is a 64-token chunk end or the end of a prefill row of "
                                 f"{length} tokens, into a slot in [0, {num_slots})")
            if offset == length:
                final_seqs.append(row - nd)
                final_slots.append(slot)
                continue
            boundaries.append((row - nd, offset // 64))
            ends.append(qsl[row] - first + offset)
            slots.append(slot)
    return GdnCheckpointSaves(
        boundaries=torch.tensor(boundaries, dtype=torch.int32).reshape(-1, 2),
        ends=torch.tensor(ends, dtype=torch.int64), slots=torch.tensor(slots, dtype=torch.int64),
        final_seqs=torch.tensor(final_seqs, dtype=torch.int64),
        final_slots=torch.tensor(final_slots, dtype=torch.int64))


def load_checkpoints(caches: ModelCaches, loads: list[tuple[int, int]]) -> None:
    """Copy checkpoint slot -> state row, every GDN layer, conv and recurrent (``loads``: (slot, row))."""
    if not loads:
        return
    device = next(iter(caches.ssm_states.values())).device
    slots = torch.tensor([s for s, _ in loads], dtype=torch.long, device=device)
    rows = torch.tensor([r for _, r in loads], dtype=torch.long, device=device)
    for layer, pool in caches.checkpoint_ssm.items():
        caches.ssm_states[layer].index_copy_(0, rows, pool.index_select(0, slots))
        caches.conv_states[layer].index_copy_(0, rows, caches.checkpoint_conv[layer].index_select(0, slots))
