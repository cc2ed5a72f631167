"""A small quantizer that writes msModelSlim's W8A8 checkpoint layout from a float checkpoint, for the tests.

Written from the format's facts (model/loading/quantization.py states them), not from msModelSlim's code:
per quantized projection ``<p>``, ``<p>.weight`` int8 [N, K] (per-channel symmetric, ``round(w / scale)`` in
[-127, 127] with ``scale = max|w[n]| / 127``), ``<p>.weight_scale`` and ``<p>.weight_offset`` [N, 1] (offset 0);
for the static ``W8A8`` scheme also ``<p>.input_scale`` / ``<p>.input_offset`` [1] (asymmetric over the input
range seen on calibration tokens through transformers' float32 model: ``scale = (max - min) / 255``,
``offset = round(-128 - min / scale)``), ``<p>.quant_bias`` int32 [N] (``-offset * sum_k q[n, k]``) and
``<p>.deq_scale`` [N] (``input_scale * weight_scale``: float32, or its bits in int64 as for float16 models);
and ``quant_model_description.json`` naming every tensor's scheme (``"FLOAT"`` for the rest).
"""
from __future__ import annotations

import json
import os
import shutil

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from qwen_ops.model.loading.quantization import is_projection
from qwen_ops.model.loading.weights import checkpoint_files


def read_tensors(model_dir: str) -> dict[str, torch.Tensor]:
    tensors = {}
    for name, path in checkpoint_files(model_dir).items():
        with safe_open(path, framework="pt") as f:
            tensors[name] = f.get_tensor(name)
    return tensors


def input_ranges(model_dir: str, prefixes: list[str], calibration_ids: list[int]) -> dict[str, tuple[float, float]]:
    """(min, max) of each projection's input over the calibration tokens, from transformers' float32 model."""
    from transformers import AutoConfig, Qwen3_5ForCausalLM

    model = Qwen3_5ForCausalLM.from_pretrained(model_dir, config=AutoConfig.from_pretrained(model_dir),
                                               dtype=torch.float32).eval()
    ranges: dict[str, list[float]] = {}
    handles = []
    modules = dict(model.named_modules())
    for prefix in prefixes:
        module = modules[prefix]

        def record(_module, args, prefix=prefix):
            x = args[0].detach()
            lo, hi = ranges.setdefault(prefix, [float("inf"), float("-inf")])
            ranges[prefix] = [min(lo, float(x.min())), max(hi, float(x.max()))]
        handles.append(module.register_forward_pre_hook(record))
    with torch.no_grad():
        model(torch.tensor([calibration_ids]))
    for h in handles:
        h.remove()
    return {p: (lo, hi) for p, (lo, hi) in ranges.items()}


def quantize_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    wf = w.float()
    absmax = wf.abs().amax(dim=1)
    scale = torch.where(absmax > 0, absmax / 127.0, torch.ones_like(absmax))
    return torch.round(wf / scale[:, None]).clamp_(-127, 127).to(torch.int8), scale


def write_w8a8_checkpoint(src: str, dst: str, scheme: str = "W8A8_DYNAMIC", *, calibration_ids=None,
                          float_names=(), deq_scale_int64: bool = False) -> str:
    """Write ``src`` (a float checkpoint directory) quantized in msModelSlim's ``scheme`` layout to ``dst``.

    float_names: projections (checkpoint names of their weights) left in float, marked ``"FLOAT"``.
    """
    assert scheme in ("W8A8", "W8A8_DYNAMIC"), scheme
    os.makedirs(dst, exist_ok=True)
    for entry in os.listdir(src):  # config.json, tokenizer files: everything but the weights
        if not entry.endswith(".safetensors") and not entry.endswith(".safetensors.index.json"):
            path = os.path.join(src, entry)
            if os.path.isfile(path):
                shutil.copy(path, os.path.join(dst, entry))
    tensors = read_tensors(src)
    chosen = [n for n, t in tensors.items() if is_projection(n, t.dim()) and n not in float_names]
    ranges = {}
    if scheme == "W8A8":
        prefixes = [n[:-len(".weight")] for n in chosen]
        ranges = input_ranges(src, prefixes, list(calibration_ids or range(1, 33)))
    out, description = {}, {"model_quant_type": scheme, "version": "1.0.0"}
    for name, t in tensors.items():
        if name not in chosen:
            out[name] = t
            description[name] = "FLOAT"
            continue
        prefix = name[:-len(".weight")]
        q, scale = quantize_weight(t)
        part = {"weight": q, "weight_scale": scale[:, None].clone(), "weight_offset": torch.zeros(len(scale), 1)}
        if scheme == "W8A8":
            lo, hi = ranges[prefix]
            lo, hi = min(lo, 0.0), max(hi, 0.0)
            in_scale = torch.tensor([max(hi - lo, 1e-8) / 255.0], dtype=torch.float32)
            offset = float(torch.round(torch.tensor(-128.0 - lo / float(in_scale))).clamp(-128, 127))
            deq = (in_scale * scale).float()
            part.update(input_scale=in_scale, input_offset=torch.tensor([offset]),
                        quant_bias=(-int(offset) * q.to(torch.int64).sum(dim=1)).to(torch.int32),
                        deq_scale=deq.view(torch.int32).to(torch.int64) if deq_scale_int64 else deq)
        for suffix, value in part.items():
            out[f"{prefix}.{suffix}"] = value.contiguous()
            description[f"{prefix}.{suffix}"] = scheme
    save_file(out, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(dst, "quant_model_description.json"), "w", encoding="utf-8") as f:
        json.dump(description, f, indent=2)
    return dst
