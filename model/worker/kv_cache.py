"""The model's step-to-step memory: paged KV caches and GDN state pools, sized from a budget.

* Full-attention layers: ``key_cache``/``value_cache`` [NB, Hkv, Bs, D] (paged
  BNSD), in the model dtype or int8 with per-channel float32 scales [Hkv, D].
* GDN layers: ``conv_states`` [S, K-1, C] (the last inputs, in the model dtype:
  they are copies of inputs, so no precision is lost) and ``ssm_states``
  [S, Hv, Dk, Dv] in float32.

The engine keeps the GDN states in the KV pool's pages (``gdn_in_pages=True``,
vLLM's one-pool layout of a hybrid model): the GDN layers are split into
``num_gdn_groups`` groups of as many layers as there are attention layers
(``gdn_layer_groups``), and every group takes its state pages from the same
block pool as the attention layers (the scheduler's ``group_block_ids``). A
GDN layer's state row *is* the block id of its group's page: its pools have
``num_blocks`` rows, and the layers of different groups at the same position
in their group share one pair of pools (a block belongs to one group at a time,
so their rows never collide), as the attention layer at that position owns the
K/V page of the same block id. So a block carries, per attention layer, one
attention page and one GDN state row, and ``plan_memory`` counts both for every
block: there is no separate state pool.

Why not vLLM's exact aliasing (one page of bytes read as K/V by attention and as
conv + recurrent state by GDN): the ops take contiguous caches and state pools
[rows, ...] addressed by index; a GDN row inside an attention page would be a
strided view the ops' contracts refuse. Mapping pages to state rows keeps the
ops unchanged; the price is that each block holds both kinds (with the block
size raised until an attention page holds a GDN state, ``pool_block_size``, at
most twice vLLM's bytes per block).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...scheduling import hybrid_block_size
from ..loading.config import Qwen35Config
from ..loading.quantization import int8_weight_bytes
from ..loading.weights import LM_HEAD, expected_shapes, stored_dtype
from ..network.kv_cache_groups import gdn_layer_groups

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
    # With GDN states in the pool's pages: the state rows are block ids (num_state_slots == num_blocks).
    gdn_in_pages: bool = False
    # The "chunk" prefix-caching mode's GDN checkpoints per GDN layer (gdn_checkpoint_rows.py), else empty.
    checkpoint_conv: dict[int, torch.Tensor] = field(default_factory=dict)
    checkpoint_ssm: dict[int, torch.Tensor] = field(default_factory=dict)

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


def attention_bytes_per_token(config: Qwen35Config, kv_dtype: torch.dtype) -> int:
    """Bytes of one token's K and V in one full-attention layer."""
    return 2 * config.num_key_value_heads * config.head_dim * _dtype_bytes(kv_dtype)


def gdn_page_bytes(config: Qwen35Config, dtype: torch.dtype) -> int:
    """Bytes of one request's state in one GDN layer: the conv tail (model dtype) plus the float32
    recurrent state. This is the GDN page of vLLM's page-size rule (vLLM's default keeps the recurrent
    state in the model dtype; here it is float32, so the page is the bytes this model really keeps)."""
    return bytes_per_state_slot(config, dtype) // max(len(config.linear_attention_layers), 1)


def _gdn_pool_sets(config: Qwen35Config) -> int:
    """How many (conv, recurrent) pool pairs the paged layout allocates: one per position in a group."""
    return len({position for _, position in gdn_layer_groups(config).values()})


def pool_block_size(config: Qwen35Config, block_size: int, dtype: torch.dtype, kv_dtype: torch.dtype) -> int:
    """The block size of the one page pool (vLLM's rule, ``scheduling.hybrid_block_size``): the requested
    ``block_size`` raised, in steps of itself, until one attention layer's page (K and V of block_size
    tokens, in ``kv_dtype``: an int8 cache halves it) holds one GDN layer's state. A model without GDN or
    without attention layers keeps ``block_size``."""
    if not config.linear_attention_layers or not config.full_attention_layers:
        return block_size
    raised, _ = hybrid_block_size(block_size, attention_bytes_per_token(config, kv_dtype),
                                  gdn_page_bytes(config, dtype))
    return raised


def bytes_per_pool_block(config: Qwen35Config, block_size: int, kv_dtype: torch.dtype,
                         dtype: torch.dtype, num_mtp_layers: int = 0) -> int:
    """Bytes of one block of the one page pool: every attention layer's K/V page (the ``num_mtp_layers`` MTP
    layers' too) plus, per position in a GDN group, one GDN state row (``allocate_caches(gdn_in_pages=True)``)."""
    return bytes_per_block(config, block_size, kv_dtype, num_mtp_layers) \
        + _gdn_pool_sets(config) * gdn_page_bytes(config, dtype)


def weight_bytes(config: Qwen35Config, dtype: torch.dtype, int8_schemes: dict[str, str] | None = None) -> int:
    """Bytes of the loaded text model's weights in ``dtype``: every tensor ``expected_shapes`` lists,
    so a MoE model's router, all its experts (fused [E, 2I, H] and [E, H, I] per layer) and its shared
    experts are counted. The memory left for caches on an accelerator is what the weights leave.
    ``int8_schemes`` (``loading.weights.int8_schemes``): the projections kept as INT8 count their int8
    weight and float32 scales (``quantization.int8_weight_bytes``) instead."""
    total = 0
    int8_schemes = int8_schemes or {}
    if config.tie_word_embeddings and LM_HEAD in int8_schemes:  # an INT8 head beside the float embedding
        total += int8_weight_bytes((config.vocab_size, config.hidden_size), int8_schemes[LM_HEAD])
    for name, shape in expected_shapes(config).items():
        if name in int8_schemes:
            total += int8_weight_bytes(shape, int8_schemes[name])
            continue
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
    """How a memory budget is split into blocks of the one page pool (null block included).

    kv_bytes: the attention pages of all blocks; state_bytes: the GDN state rows
    of all blocks (``bytes_per_pool_block``); both are the pool, nothing else is
    allocated for GDN states. num_state_slots is 0: there is no separate state
    pool (a request's GDN states are in the pages the scheduler gives it).
    state_rows_per_request: 1 + k with k speculative tokens (those rows are pages
    too: ``gdn_pages_per_request`` counts them).
    """

    num_blocks: int
    num_state_slots: int
    max_num_seqs: int
    kv_bytes: int
    state_bytes: int
    budget_bytes: int | None
    state_rows_per_request: int = 1
    # "chunk" prefix caching: the GDN checkpoint pool's slots, and the bytes of the GDN states kept outside
    # the page pool (num_state_slots running rows plus the checkpoints, each a state slot's bytes).
    gdn_checkpoints: int = 0
    state_bytes_outside: int = 0


def plan_memory(config: Qwen35Config, *, budget_bytes: int | None, block_size: int, max_num_seqs: int,
                max_model_len: int, dtype: torch.dtype, kv_dtype: torch.dtype,
                num_blocks: int | None = None, gdn_pages_per_request: int = 0,
                state_rows_per_request: int = 1, num_mtp_layers: int = 0,
                gdn_in_pages: bool = True) -> MemoryPlan:
    """Size the one page pool.

    Every block costs ``bytes_per_pool_block`` (its attention pages and its GDN
    state rows; with ``gdn_in_pages=False``, the "chunk" prefix-caching layout whose
    GDN states live outside the pool, its attention pages only: ``state_bytes`` is 0).
    The blocks take the budget, capped at what ``max_num_seqs`` requests of
    ``max_model_len`` tokens can use, each also holding ``gdn_pages_per_request``
    pages for its GDN states (the scheduler's count: one per GDN group and state
    row in "none" and "chunk" modes; align mode holds at most 2 per group and
    caches more, which the cap does not limit); ``num_blocks``
    overrides that. ``state_rows_per_request`` (1 + k with k speculative tokens)
    is checked; its rows are among ``gdn_pages_per_request``. ``num_mtp_layers``
    MTP layers (speculation) keep their own KV caches on the same blocks: a block
    costs theirs too, and ``kv_bytes`` includes them.
    """
    _check_state_rows(state_rows_per_request)
    attention_block = bytes_per_block(config, block_size, kv_dtype, num_mtp_layers)
    block_bytes = _pool_block_bytes(config, block_size, kv_dtype, dtype, num_mtp_layers, gdn_in_pages)
    blocks_per_seq = -(-max_model_len // block_size) + _gdn_pages(gdn_pages_per_request)
    if num_blocks is None:
        useful = max_num_seqs * blocks_per_seq + NUM_RESERVED_BLOCKS
        num_blocks = useful if budget_bytes is None else min(useful, budget_bytes // block_bytes)
        # At least one full-length request must fit, or nothing can be served.
        num_blocks = max(num_blocks, min(useful, blocks_per_seq + NUM_RESERVED_BLOCKS))
        if budget_bytes is not None and num_blocks * block_bytes > budget_bytes:
            raise ValueError(
                f"the KV cache memory budget of {budget_bytes / 2**30:.3f} GiB cannot hold one request of "
                f"max_model_len={max_model_len} tokens ({num_blocks} blocks of {block_bytes} bytes"
                f"{', GDN state pages included' if gdn_in_pages else ''}): raise kv_cache_memory_gib or lower "
                "max_model_len"
            )
    if num_blocks < 1 + NUM_RESERVED_BLOCKS:
        raise ValueError(f"num_blocks must be >= {1 + NUM_RESERVED_BLOCKS} (block 0 is reserved), got {num_blocks}")
    return MemoryPlan(num_blocks=num_blocks, num_state_slots=0, max_num_seqs=max_num_seqs,
                      kv_bytes=num_blocks * attention_block,
                      state_bytes=num_blocks * (block_bytes - attention_block),
                      budget_bytes=budget_bytes, state_rows_per_request=state_rows_per_request)


def _pool_block_bytes(config: Qwen35Config, block_size: int, kv_dtype: torch.dtype, dtype: torch.dtype,
                      num_mtp_layers: int, gdn_in_pages: bool) -> int:
    """Bytes of one pool block: ``bytes_per_pool_block`` with the GDN states in the pages, else the
    attention pages alone (``bytes_per_block``); at least 1."""
    if gdn_in_pages:
        return max(bytes_per_pool_block(config, block_size, kv_dtype, dtype, num_mtp_layers), 1)
    return max(bytes_per_block(config, block_size, kv_dtype, num_mtp_layers), 1)


def _gdn_pages(gdn_pages_per_request: int) -> int:
    """A request's GDN pages in the pool: an int >= 0 (0 for a model without GDN groups)."""
    if isinstance(gdn_pages_per_request, bool) or not isinstance(gdn_pages_per_request, int) \
            or gdn_pages_per_request < 0:
        raise ValueError(f"plan_memory: gdn_pages_per_request must be an int >= 0, got {gdn_pages_per_request!r}")
    return gdn_pages_per_request


def _check_state_rows(state_rows_per_request: int) -> None:
    """A request's GDN state rows: an int >= 1 (1 + k with k speculative tokens)."""
    if isinstance(state_rows_per_request, bool) or not isinstance(state_rows_per_request, int) \
            or state_rows_per_request < 1:
        raise ValueError(f"plan_memory: state_rows_per_request must be an int >= 1, got {state_rows_per_request!r}")


def allocate_caches(config: Qwen35Config, *, num_blocks: int, block_size: int, num_state_slots: int,
                    dtype: torch.dtype, kv_dtype: torch.dtype, device: torch.device,
                    kv_scales: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None,
                    gdn_in_pages: bool = False) -> ModelCaches:
    """Zero-filled caches and pools (zeros: kernels that read whole blocks never meet NaNs).

    kv_scales: for an int8 cache, the (k_scale, v_scale) float32 [Hkv, D] of every
    full-attention layer.
    gdn_in_pages: False: each GDN layer has its own pools of ``num_state_slots``
    rows (a state row per request, for scratch runs and tests that drive layers
    by hand). True: the GDN states live in the pool's pages (see the module
    docstring): pools of ``num_blocks`` rows indexed by block id, shared by the
    layers at the same position of different GDN groups; ``num_state_slots`` is
    ignored and set to ``num_blocks``. The block size must let an attention page
    hold a GDN state (``pool_block_size``), as vLLM's one pool requires.
    """
    if gdn_in_pages:
        needed = pool_block_size(config, block_size, dtype, kv_dtype)
        if needed != block_size:
            raise ValueError(
                f"allocate_caches: block_size={block_size} cannot hold a GDN page: an attention page of "
                f"{block_size} tokens is {block_size * attention_bytes_per_token(config, kv_dtype)} bytes, one GDN "
                f"layer's state {gdn_page_bytes(config, dtype)} bytes; use block_size={needed} "
                f"(pool_block_size)")
        num_state_slots = num_blocks
    caches = ModelCaches(block_size=block_size, num_blocks=num_blocks, num_state_slots=num_state_slots,
                         gdn_in_pages=gdn_in_pages)
    kv_shape = (num_blocks, config.num_key_value_heads, block_size, config.head_dim)
    for i in config.full_attention_layers:
        caches.key_caches[i] = torch.zeros(kv_shape, dtype=kv_dtype, device=device)
        caches.value_caches[i] = torch.zeros(kv_shape, dtype=kv_dtype, device=device)
        if kv_dtype == torch.int8:
            if kv_scales is None or i not in kv_scales:
                raise ValueError(f"an int8 KV cache needs k/v scales for full-attention layer {i}")
            caches.k_scales[i], caches.v_scales[i] = (s.to(device) for s in kv_scales[i])
    shared: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for i, (_, position) in gdn_layer_groups(config).items():
        if gdn_in_pages and position in shared:
            caches.conv_states[i], caches.ssm_states[i] = shared[position]
            continue
        caches.conv_states[i] = torch.zeros(
            (num_state_slots, config.linear_conv_kernel_dim - 1, config.gdn_conv_dim), dtype=dtype, device=device)
        caches.ssm_states[i] = torch.zeros(
            (num_state_slots, config.linear_num_value_heads, config.linear_key_head_dim,
             config.linear_value_head_dim), dtype=torch.float32, device=device)
        shared[position] = caches.conv_states[i], caches.ssm_states[i]
    return caches


def fit_max_model_len(config: Qwen35Config, *, budget_bytes: int, block_size: int, max_num_seqs: int,
                      dtype: torch.dtype, kv_dtype: torch.dtype, num_blocks: int | None = None,
                      gdn_pages_per_request: int = 0, state_rows_per_request: int = 1,
                      num_mtp_layers: int = 0, gdn_in_pages: bool = True) -> int:
    """The longest request (in tokens, a whole number of blocks) that ``plan_memory`` can hold in the budget.

    The blocks the budget holds (``bytes_per_pool_block`` each, or ``num_blocks``),
    less the null block and the request's GDN state pages (``gdn_pages_per_request``),
    all go to one request. 0 when not even one block fits. ``max_num_seqs`` does not
    change it (kept for the caller's symmetry with ``plan_memory``), nor does
    ``state_rows_per_request`` (checked; its rows are pages). ``num_mtp_layers``, ``gdn_in_pages``:
    ``plan_memory``'s.
    """
    _check_state_rows(state_rows_per_request)
    if num_blocks is None:
        num_blocks = budget_bytes // _pool_block_bytes(config, block_size, kv_dtype, dtype, num_mtp_layers,
                                                       gdn_in_pages)
    return max(0, num_blocks - NUM_RESERVED_BLOCKS - _gdn_pages(gdn_pages_per_request)) * block_size
