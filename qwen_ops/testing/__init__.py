"""Op cases for tests, benchmarks and device checks: one place that builds every op's inputs.

The test suites of every backend (``tests/ops``, ``tests/triton``,
``tests/ascendc``), the kernel benchmarks (``bench/kernels``) and the GPU
device check (``bench/device_check.py``) draw their inputs here, so a paged
cache, a block table or a GDN state pool means the same thing everywhere it
is checked or timed. It is installed with the package (``qwen_ops.testing``)
so that engines built on ``qwen_ops`` can check their own kernels against the
same cases; it needs nothing beyond torch.

* ``draw``: :class:`Draw`, a seeded generator on a device (every builder takes one).
* ``paged_kv``: paged K/V caches (float or INT8), block tables, slot mappings, offsets.
* ``recurrent_state``: GDN q/k/v/g/beta, gating inputs, state pools and their indices.
* ``conv_inputs``: causal conv1d inputs, weights and state pools.
* ``cases``: the calls of the cache and attention ops (keyword arguments
  ready to pass) from a case's parameters.
* ``shapes``: :data:`SHAPES`, the named layer shapes (Qwen3.5's) that the
  benchmarks and the device check time.
* ``poisoned_memory``: fresh host allocations filled with a sentinel, so an
  output a kernel never wrote cannot pass as zeros.
* ``bandwidth``: ``read_bandwidth()``, the memory read rate the benchmarks'
  floors divide by, measured in the same run.

A case table (the named rows a test or benchmark runs) stays with its
runner, where each row says why it exists; what a row *means* -- which
tensors, laid out how, drawn how -- is decided here, once.
"""
from .cases import cache_write_call, decode_call, mixed_call, prefill_call
from .conv_inputs import conv_fn_call, conv_update_call
from .draw import Draw
from .paged_kv import block_tables, blocks_needed, int8_scales, offsets, paged_cache, random_cache, slot_mapping
from .recurrent_state import decode_step_call, gating_inputs, gdn_inputs, pool_indices, state_pool
from .shapes import SHAPES, LayerShapes

__all__ = [
    "Draw", "SHAPES", "LayerShapes", "offsets", "blocks_needed", "block_tables", "random_cache", "int8_scales",
    "paged_cache", "slot_mapping", "cache_write_call", "decode_call", "prefill_call", "mixed_call", "gdn_inputs",
    "gating_inputs", "state_pool", "pool_indices", "conv_fn_call", "conv_update_call", "decode_step_call",
]
