"""The model's step-to-step memory: paged KV caches and GDN state pools, sized from a budget.

* Full-attention layers: ``key_cache``/``value_cache`` [NB, Hkv, Bs, D] (paged
  BNSD), in the model dtype or int8 with per-channel float32 scales [Hkv, D].
* GDN layers: ``conv_states`` [S, K-1, C] (the last inputs, in the model dtype:
  they are copies of inputs, so no precision is lost) and ``ssm_states``
  [S, Hv, Dk, Dv] in float32, one slot per running request.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .config import Qwen35Config
from .weights import expected_shapes, stored_dtype

# The scheduler keeps block 0 as the null block that pads block tables.
NUM_RESERVED_BLOCKS = 1


@dataclass
class ModelCaches:
    """Per-layer caches, indexed by layer number (only the layers of that kind have entries)."""

    block_size: int
    num_blocks: int
    num_state_slots: int
    key_caches: dict[int, torch.Tensor] = field(default_factory=dict)
    value_caches: dict[int, torch.Tensor] = field(default_factory=dict)
    k_scales: dict[int, torch.Tensor] = field(default_factory=dict)
    v_scales: dict[int, torch.Tensor] = field(default_factory=dict)
    conv_states: dict[int, torch.Tensor] = field(default_factory=dict)
    ssm_states: dict[int, torch.Tensor] = field(default_factory=dict)

    @property
    def kv_cache_dtype(self) -> torch.dtype | None:
        first = next(iter(self.key_caches.values()), None)
        return None if first is None else first.dtype


def _dtype_bytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def bytes_per_block(config: Qwen35Config, block_size: int, kv_dtype: torch.dtype, num_mtp_layers: int = 0) -> int:
    """Bytes of one KV block over all full-attention layers (keys and values), plus ``num_mtp_layers`` MTP
    layers: with MTP speculation each MTP layer has a paged KV cache of the same shape on the same blocks."""
    if isinstance(num_mtp_layers, bool) or not isinstance(num_mtp_layers, int) or num_mtp_layers < 0:
        raise ValueError(f"plan_memory: num_mtp_layers must be an int >= 0, got {num_mtp_layers!r}")
    per_layer = 2 * config.num_key_value_heads * block_size * config.head_dim * _dtype_bytes(kv_dtype)
    return per_layer * (len(config.full_attention_layers) + num_mtp_layers)


def bytes_per_state_slot(config: Qwen35Config, dtype: torch.dtype) -> int:
    """Bytes of one request's GDN state over all GDN layers (conv tail plus float32 recurrent state)."""
    conv = (config.linear_conv_kernel_dim - 1) * config.gdn_conv_dim * _dtype_bytes(dtype)
    ssm = config.linear_num_value_heads * config.linear_key_head_dim * config.linear_value_head_dim * 4
    return (conv + ssm) * len(config.linear_attention_layers)


def weight_bytes(config: Qwen35Config, dtype: torch.dtype) -> int:
    """Bytes of the loaded text model's weights in ``dtype``: every tensor ``expected_shapes`` lists,
    so a MoE model's router, all its experts (fused [E, 2I, H] and [E, H, I] per layer) and its shared
    experts are counted. The memory left for caches on an accelerator is what the weights leave."""
    total = 0
    for name, shape in expected_shapes(config).items():
        numel = 1
        for n in shape:
            numel *= n
        total += numel * _dtype_bytes(stored_dtype(name, dtype))
    return total


def expert_bytes_per_layer(config: Qwen35Config, dtype: torch.dtype) -> int:
    """Bytes of one routed expert's three projections times the experts of one layer (0 for dense models)."""
    return config.num_experts * 3 * config.moe_intermediate_size * config.hidden_size * _dtype_bytes(dtype)


@dataclass(frozen=True)
class MemoryPlan:
    """How a memory budget is split: KV blocks (null block included) and GDN state slots.

    A state slot is one request's: ``state_rows_per_request`` GDN state rows
    (1 + k with k speculative tokens), all counted in ``state_bytes``.
    """

    num_blocks: int
    num_state_slots: int
    max_num_seqs: int
    kv_bytes: int
    state_bytes: int
    budget_bytes: int | None
    state_rows_per_request: int = 1


def plan_memory(config: Qwen35Config, *, budget_bytes: int | None, block_size: int, max_num_seqs: int,
                max_model_len: int, dtype: torch.dtype, kv_dtype: torch.dtype,
                num_blocks: int | None = None, gdn_pages_per_request: int = 0,
                state_rows_per_request: int = 1, num_mtp_layers: int = 0) -> MemoryPlan:
    """Size the KV cache and state pools.

    One state slot per running request: ``max_num_seqs`` slots, fewer when half
    the budget cannot hold them (and then ``max_num_seqs`` shrinks to match).
    The KV blocks take the rest of the budget, capped at what ``max_num_seqs``
    requests of ``max_model_len`` tokens can use, each also holding
    ``gdn_pages_per_request`` pool pages (the scheduler's accounting of a hybrid
    model's GDN states, vLLM's one-pool layout; the model itself keeps those
    states in the state pools until it reads them from the pages);
    ``num_blocks`` overrides that. Each slot holds ``state_rows_per_request``
    GDN state rows (1 + k for MTP speculative decoding with k draft tokens:
    the model runner allocates ``num_state_slots * state_rows_per_request``
    rows), and all of them count against the budget. ``num_mtp_layers`` MTP
    layers (speculation) keep their own KV caches on the same blocks: a block
    costs theirs too, and ``kv_bytes`` includes them.
    """
    slot_bytes = _slot_bytes(config, dtype, state_rows_per_request)
    block_bytes = max(bytes_per_block(config, block_size, kv_dtype, num_mtp_layers), 1)
    blocks_per_seq = -(-max_model_len // block_size) + _gdn_pages(gdn_pages_per_request)
    slots = max_num_seqs
    if budget_bytes is not None:
        slots = max(1, min(max_num_seqs, (budget_bytes // 2) // slot_bytes))
    if num_blocks is None:
        useful = slots * blocks_per_seq + NUM_RESERVED_BLOCKS
        if budget_bytes is None:
            num_blocks = useful
        else:
            num_blocks = min(useful, (budget_bytes - slots * slot_bytes) // block_bytes)
        # At least one full-length request must fit, or nothing can be served.
        num_blocks = max(num_blocks, min(useful, blocks_per_seq + NUM_RESERVED_BLOCKS))
        if budget_bytes is not None and num_blocks * block_bytes + slots * slot_bytes > budget_bytes:
            raise ValueError(
                f"the KV cache memory budget of {budget_bytes / 2**30:.3f} GiB cannot hold one request of "
                f"max_model_len={max_model_len} tokens ({num_blocks} blocks of {block_bytes} bytes and a GDN "
                f"state of {slot_bytes} bytes): raise kv_cache_memory_gib or lower max_model_len"
            )
    if num_blocks < 1 + NUM_RESERVED_BLOCKS:
        raise ValueError(f"num_blocks must be >= {1 + NUM_RESERVED_BLOCKS} (block 0 is reserved), got {num_blocks}")
    return MemoryPlan(num_blocks=num_blocks, num_state_slots=slots, max_num_seqs=slots,
                      kv_bytes=num_blocks * block_bytes, state_bytes=slots * slot_bytes, budget_bytes=budget_bytes,
                      state_rows_per_request=state_rows_per_request)


def _gdn_pages(gdn_pages_per_request: int) -> int:
    """A request's GDN pages in the pool: an int >= 0 (0 for a model without GDN groups)."""
    if isinstance(gdn_pages_per_request, bool) or not isinstance(gdn_pages_per_request, int) \
            or gdn_pages_per_request < 0:
        raise ValueError(f"plan_memory: gdn_pages_per_request must be an int >= 0, got {gdn_pages_per_request!r}")
    return gdn_pages_per_request


def _slot_bytes(config: Qwen35Config, dtype: torch.dtype, state_rows_per_request: int) -> int:
    """Bytes of one request's state slot: ``state_rows_per_request`` GDN state rows (at least 1 byte)."""
    if isinstance(state_rows_per_request, bool) or not isinstance(state_rows_per_request, int) \
            or state_rows_per_request < 1:
        raise ValueError(f"plan_memory: state_rows_per_request must be an int >= 1, got {state_rows_per_request!r}")
    return max(bytes_per_state_slot(config, dtype) * state_rows_per_request, 1)


def allocate_caches(config: Qwen35Config, *, num_blocks: int, block_size: int, num_state_slots: int,
                    dtype: torch.dtype, kv_dtype: torch.dtype, device: torch.device,
                    kv_scales: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None) -> ModelCaches:
    """Zero-filled caches and pools (zeros: kernels that read whole blocks never meet NaNs).

    kv_scales: for an int8 cache, the (k_scale, v_scale) float32 [Hkv, D] of every
    full-attention layer.
    """
    caches = ModelCaches(block_size=block_size, num_blocks=num_blocks, num_state_slots=num_state_slots)
    kv_shape = (num_blocks, config.num_key_value_heads, block_size, config.head_dim)
    for i in config.full_attention_layers:
        caches.key_caches[i] = torch.zeros(kv_shape, dtype=kv_dtype, device=device)
        caches.value_caches[i] = torch.zeros(kv_shape, dtype=kv_dtype, device=device)
        if kv_dtype == torch.int8:
            if kv_scales is None or i not in kv_scales:
                raise ValueError(f"an int8 KV cache needs k/v scales for full-attention layer {i}")
            caches.k_scales[i], caches.v_scales[i] = (s.to(device) for s in kv_scales[i])
    for i in config.linear_attention_layers:
        caches.conv_states[i] = torch.zeros(
            (num_state_slots, config.linear_conv_kernel_dim - 1, config.gdn_conv_dim), dtype=dtype, device=device)
        caches.ssm_states[i] = torch.zeros(
            (num_state_slots, config.linear_num_value_heads, config.linear_key_head_dim,
             config.linear_value_head_dim), dtype=torch.float32, device=device)
    return caches


def fit_max_model_len(config: Qwen35Config, *, budget_bytes: int, block_size: int, max_num_seqs: int,
                      dtype: torch.dtype, kv_dtype: torch.dtype, num_blocks: int | None = None,
                      gdn_pages_per_request: int = 0, state_rows_per_request: int = 1,
                      num_mtp_layers: int = 0) -> int:
    """The longest request (in tokens, a whole number of blocks) that ``plan_memory`` can hold in the budget.

    The state slots take what ``plan_memory`` gives them (at most half the
    budget); the KV blocks left (or ``num_blocks``), less the null block and the
    request's GDN state pages (``gdn_pages_per_request``: the scheduler takes a
    hybrid model's GDN pages from the same pool, as vLLM does), all go to one
    request. 0 when not even one block fits. ``state_rows_per_request`` is
    ``plan_memory``'s (1 + k with k speculative tokens), ``num_mtp_layers`` too.
    """
    slot_bytes = _slot_bytes(config, dtype, state_rows_per_request)
    block_bytes = max(bytes_per_block(config, block_size, kv_dtype, num_mtp_layers), 1)
    slots = max(1, min(max_num_seqs, (budget_bytes // 2) // slot_bytes))
    if num_blocks is None:
        num_blocks = (budget_bytes - slots * slot_bytes) // block_bytes
    return max(0, num_blocks - NUM_RESERVED_BLOCKS - _gdn_pages(gdn_pages_per_request)) * block_size
