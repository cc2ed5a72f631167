"""Which KV cache group each GDN layer reads: the layers' side of the hybrid cache layout.

The layer reads its group's block table (``GatedDeltaNet.group``) and the worker's caches allocate one
state pool per position in a group (``worker/kv_cache.py``): both follow this one map.
"""
from __future__ import annotations

from ..loading.config import Qwen35Config


def gdn_layer_groups(config: Qwen35Config) -> dict[int, tuple[int, int]]:
    """layer -> (GDN group, position in the group) of every GDN layer: the GDN layers in order, in groups of as
    many layers as there are full-attention layers (vLLM's grouping of a hybrid model's KV cache; 3 groups for
    Qwen3.5's 3:1 layout). All layers of one group read the same block ids; layers at the same position of
    different groups share state pools."""
    size = max(len(config.full_attention_layers), 1)
    return {layer: (j // size, j % size) for j, layer in enumerate(config.linear_attention_layers)}


def num_gdn_groups(config: Qwen35Config) -> int:
    """How many GDN KV cache groups the model has (0 without GDN layers)."""
    size = max(len(config.full_attention_layers), 1)
    return -(-len(config.linear_attention_layers) // size)
