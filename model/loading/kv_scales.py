"""INT8 KV-cache scales: the checkpoint's msModelSlim tensors, else a calibration pass (absmax / 127).

Scales are per layer and per channel, float32 [Hkv, D], for every
full-attention layer. A checkpoint gives them as
``layers.{i}.self_attn.{k,v}_proj.kv_cache_scale`` (one value or Hkv * D
values); otherwise the model runs the calibration prompts as prefills on
scratch caches and the scales are the absmax of the keys and values it wrote.
"""
from __future__ import annotations

from typing import Callable, Iterable

import torch

from ...ops import kv_scales_from_absmax
from .config import Qwen35Config

CALIBRATION_TEXT = (
    "The quick brown fox jumps over the lazy dog. Large language models are served in steps: each step "
    "schedules decode tokens and prefill chunks under a token budget, writes keys and values into a paged "
    "cache, and samples the next token of every request that reached the end of its prompt. "
    "1 2 3 4 5 6 7 8 9 10. 你好，世界。Bonjour le monde! def f(x): return x * 2\n"
)

KVScales = dict[int, tuple[torch.Tensor, torch.Tensor]]
# (token ids, kv_observer) -> runs the prompt as one prefill, calling kv_observer(layer, key, value).
ScoreFn = Callable[[list[int], Callable], object]


def checkpoint_kv_scales(config: Qwen35Config, checkpoint_scales: dict[str, torch.Tensor]) -> KVScales | None:
    """The checkpoint's scales of every full-attention layer, None if it has none; a partial set raises."""
    shape = (config.num_key_value_heads, config.head_dim)
    names = {i: (f"layers.{i}.self_attn.k_proj.kv_cache_scale", f"layers.{i}.self_attn.v_proj.kv_cache_scale")
             for i in config.full_attention_layers}
    if not any(n in checkpoint_scales for pair in names.values() for n in pair):
        return None
    scales = {}
    for i, (kn, vn) in names.items():
        if kn not in checkpoint_scales or vn not in checkpoint_scales:
            raise ValueError(f"checkpoint has INT8 KV scales for some layers but not {kn!r}/{vn!r}")
        scales[i] = tuple(as_channel_scale(checkpoint_scales[n], n, shape) for n in (kn, vn))
    return scales


def calibrate_kv_scales(config: Qwen35Config, prompts: Iterable[list[int]], score: ScoreFn,
                        layers: Iterable[int] | None = None) -> tuple[KVScales, int]:
    """Absmax / 127 over the keys and values of every prompt; returns (scales, tokens seen).

    layers: the KV layer ids to return scales for (default: the config's full-attention layers; the MTP
    head's layers are ``num_hidden_layers + i``)."""
    amax: dict[int, list[torch.Tensor]] = {}

    def observe(layer, key, value):
        found = (kv_scales_from_absmax(key), kv_scales_from_absmax(value))
        amax[layer] = found if layer not in amax else [torch.maximum(a, b) for a, b in zip(amax[layer], found)]

    total = 0
    for ids in prompts:
        total += len(ids)
        score(ids, observe)
    return {i: tuple(amax[i]) for i in (config.full_attention_layers if layers is None else layers)}, total


def as_channel_scale(t: torch.Tensor, name: str, shape) -> torch.Tensor:
    """One checkpoint scale tensor as float32 [Hkv, D] (a single value is broadcast); must be finite and > 0."""
    t = t.to(torch.float32)
    if t.numel() == 1:
        t = t.reshape(1).expand(shape[0] * shape[1])
    if t.numel() != shape[0] * shape[1]:
        raise ValueError(f"INT8 KV scale {name!r} has shape {tuple(t.shape)}; expected one value or "
                         f"{shape[0] * shape[1]} (= Hkv * D) per-channel values")
    t = t.reshape(shape).contiguous()
    # Checked here once: the ops on the engine's trusted path do not check scales again.
    if not bool((torch.isfinite(t) & (t > 0)).all()):
        raise ValueError(f"INT8 KV scale {name!r} must be finite and > 0 everywhere")
    return t
