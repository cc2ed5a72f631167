"""INT8 weights: msModelSlim's W8A8 checkpoints (vllm-ascend's ``quantization="ascend"``) and the weight-only
per-channel INT8 mode of any float checkpoint (``quantization="int8_weight_only"``).

msModelSlim's layout, per quantized projection ``<p>`` (``<p>.weight`` marked ``"W8A8"`` or ``"W8A8_DYNAMIC"``
in the checkpoint's ``quant_model_description.json``, which maps every tensor name to its scheme, ``"FLOAT"``
for those left in float, beside a ``"model_quant_type"`` entry):

* both schemes: ``<p>.weight`` int8 [N, K]; ``<p>.weight_scale`` [N, 1] and ``<p>.weight_offset`` [N, 1]
  (per output channel; the weights are symmetric, so the offset is 0, which is checked here);
* ``W8A8`` (static activations): ``<p>.input_scale`` [1] and ``<p>.input_offset`` [1] (one calibrated scale and
  integer zero point for the layer's input), ``<p>.quant_bias`` int32 [N] (added to the int32 sums; it takes
  away the zero point's share ``input_offset * sum_k w[n, k]``), ``<p>.deq_scale`` [N] (``input_scale *
  weight_scale``: float32 for bfloat16 models, the float32's bits in int64 for float16 ones);
* ``W8A8_DYNAMIC``: activations quantized per token at run time (symmetric, ``max|x| / 127``).

The layer then computes ``float(int8(x) @ weight^T + quant_bias) * deq_scale`` (static) or
``float(int8(x) @ weight^T) * token_scale * weight_scale`` (dynamic): ``ops.int8_linear``.

Only the projections the model runs through ``layers.linear`` can be INT8 (``quantizable_names``): attention
q/k/v/o, the GDN input (qkv, z, b, a) and output projections, the dense MLP's and the shared expert's. A tensor the
description marks quantized anywhere else (router, routed experts, embedding, lm_head, norms) is refused with
its name, as is a bad or missing scale.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

import torch

from .config import Qwen35Config

QUANT_DESCRIPTION_FILE = "quant_model_description.json"
ASCEND = "ascend"
INT8_WEIGHT_ONLY = "int8_weight_only"
QUANTIZATION_METHODS = (ASCEND, INT8_WEIGHT_ONLY)
# The schemes of msModelSlim this loader reads; "FLOAT" marks a tensor left unquantized.
W8A8, W8A8_DYNAMIC, FLOAT = "W8A8", "W8A8_DYNAMIC", "FLOAT"
WEIGHT_ONLY = "W8A16"  # vllm-ascend's name of per-channel INT8 weights with float activations
INT8_SCHEMES = (W8A8, W8A8_DYNAMIC)
# The per-projection tensors each scheme adds beside ``<p>.weight``.
SCHEME_TENSORS = {
    W8A8: ("weight_scale", "weight_offset", "input_scale", "input_offset", "quant_bias", "deq_scale"),
    W8A8_DYNAMIC: ("weight_scale", "weight_offset"),
}
ALL_SCHEME_TENSORS = frozenset(SCHEME_TENSORS[W8A8])


class QuantizationError(ValueError):
    """A quantized checkpoint this loader cannot take: the message names the tensor."""


@dataclass(frozen=True)
class Int8Weight:
    """A projection's INT8 weight, as ``layers.linear`` takes it in place of a float [N, K] weight.

    weight: int8 [N, K]; weight_scale: float32 [N] (for static W8A8 the checkpoint's ``deq_scale``, i.e.
    input_scale * weight_scale, so that one multiply dequantizes); scheme: ``W8A8`` (static activations:
    input_scale, input_offset float32 [1], quant_bias int32 [N]), ``W8A8_DYNAMIC`` (per-token activations)
    or ``W8A16`` (weight-only: float activations).
    """

    weight: torch.Tensor
    weight_scale: torch.Tensor
    scheme: str
    input_scale: torch.Tensor | None = None
    input_offset: torch.Tensor | None = None
    quant_bias: torch.Tensor | None = None

    @property
    def shape(self) -> torch.Size:
        return self.weight.shape

    @property
    def device(self) -> torch.device:
        return self.weight.device


# A projection's weight: ``q_proj``, ``out_proj``, ``in_proj_qkv``, ``shared_expert.down_proj``... (not the router
# ``mlp.gate``, the ``shared_expert_gate``, the embedding or the lm_head).
PROJECTION = re.compile(r"\.[a-z_]*proj[a-z_]*\.weight$")


def is_projection(name: str, ndim: int) -> bool:
    """Whether a weight (text-model or checkpoint name) is a 2-D projection ``layers.linear`` can run in INT8."""
    return ndim == 2 and PROJECTION.search(name) is not None and ".experts." not in name \
        and not name.startswith("mtp.")


def quantizable_names(config: Qwen35Config, shapes: dict[str, tuple[int, ...]]) -> list[str]:
    """The 2-D projection weights the model runs through ``layers.linear`` (``is_projection``)."""
    del config  # the names alone decide; kept for callers that may narrow it by config later
    return [n for n, s in shapes.items() if is_projection(n, len(s))]


def read_description(model_dir: str) -> dict[str, str] | None:
    """The checkpoint's ``quant_model_description.json`` (tensor name -> scheme), or None where there is none."""
    path = os.path.join(model_dir, QUANT_DESCRIPTION_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            description = json.load(f)
    except json.JSONDecodeError as exc:
        raise QuantizationError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(description, dict):
        raise QuantizationError(f"{path} must map tensor names to schemes, got a {type(description).__name__}")
    return {str(k): v for k, v in description.items() if isinstance(v, str)}


def resolve_quantization(model_dir: str, quantization: str | None) -> tuple[str | None, dict[str, str] | None]:
    """(method, description): ``None`` finds msModelSlim's description file if the checkpoint has one (as
    vllm-ascend does on an NPU), ``"ascend"`` requires it, ``"int8_weight_only"`` quantizes float weights."""
    if quantization is not None and quantization not in QUANTIZATION_METHODS:
        raise ValueError(f"LLM(quantization=...) must be None or one of {QUANTIZATION_METHODS}, got {quantization!r}")
    description = read_description(model_dir)
    if quantization == INT8_WEIGHT_ONLY:
        if description is not None and any(v in INT8_SCHEMES for v in description.values()):
            raise ValueError(f"LLM(quantization='int8_weight_only') needs a float checkpoint; {model_dir!r} is "
                             f"already quantized ({QUANT_DESCRIPTION_FILE}): use quantization='ascend' or None")
        return INT8_WEIGHT_ONLY, None
    if description is None:
        if quantization == ASCEND:
            raise ValueError(f"LLM(quantization='ascend') needs msModelSlim's {QUANT_DESCRIPTION_FILE} in "
                             f"{model_dir!r}; there is none")
        return None, None
    return ASCEND, description


def quantized_schemes(description: dict[str, str] | None, text_names: dict[str, str]) -> dict[str, str]:
    """Text-model weight name -> INT8 scheme, from the description (``text_names``: checkpoint -> text name)."""
    if description is None:
        return {}
    schemes = {}
    for ckpt_name, scheme in description.items():
        if not ckpt_name.endswith(".weight") or scheme == FLOAT:
            continue
        name = text_names.get(ckpt_name)
        if name is None:
            continue
        if scheme not in INT8_SCHEMES:
            raise QuantizationError(f"{QUANT_DESCRIPTION_FILE} marks {ckpt_name!r} as {scheme!r}; qwen_ops reads "
                                    f"{INT8_SCHEMES} and {FLOAT!r}")
        schemes[name] = scheme
    return schemes


def check_quantizable(schemes: dict[str, str], allowed: list[str], name_of) -> None:
    """Refuse a quantized tensor outside the projections ``layers.linear`` runs (``name_of``: its checkpoint name)."""
    bad = sorted(set(schemes) - set(allowed))
    if bad:
        raise QuantizationError(f"{QUANT_DESCRIPTION_FILE} marks {name_of(bad[0])!r} as {schemes[bad[0]]!r}, but "
                                f"qwen_ops runs that tensor in float only (INT8 projections: attention q/k/v/o, GDN "
                                f"in/out, dense and shared-expert MLP); {len(bad)} such tensor(s)")


def _vector(name: str, t: torch.Tensor | None, n: int, what: str) -> torch.Tensor:
    """[N] or [N, 1] -> float32 [N], present and finite, or QuantizationError naming the tensor."""
    if t is None:
        raise QuantizationError(f"tensor {name!r} is missing: {what}")
    if t.numel() != n or t.dim() not in (1, 2) or (t.dim() == 2 and t.shape[1] != 1):
        raise QuantizationError(f"tensor {name!r} must be [{n}, 1] or [{n}] ({what}), got shape {tuple(t.shape)}")
    v = t.reshape(n).float()
    if not bool(torch.isfinite(v).all()):
        raise QuantizationError(f"tensor {name!r} has a NaN or infinite value ({what})")
    return v


def _positive(name: str, v: torch.Tensor, what: str) -> torch.Tensor:
    if not bool((v > 0).all()):
        raise QuantizationError(f"tensor {name!r} must be > 0 everywhere ({what}), got min {float(v.min())}")
    return v


def _scalar(name: str, t: torch.Tensor | None, what: str) -> torch.Tensor:
    if t is None:
        raise QuantizationError(f"tensor {name!r} is missing: {what}")
    if t.numel() != 1:
        raise QuantizationError(f"tensor {name!r} must hold one value ({what}), got shape {tuple(t.shape)}")
    v = t.reshape(1).float()
    if not bool(torch.isfinite(v).all()):
        raise QuantizationError(f"tensor {name!r} is NaN or infinite ({what})")
    return v


def _deq_scale(name: str, t: torch.Tensor | None, n: int) -> torch.Tensor:
    """msModelSlim's deq_scale: float32 [N], or [N] int64 holding float32 bits (float16 models)."""
    if t is not None and t.dtype == torch.int64:
        t = t.to(torch.int32).view(torch.float32)
    return _positive(name, _vector(name, t, n, "input_scale * weight_scale per output channel"), "a scale")


def msmodelslim_weight(prefix: str, scheme: str, tensors: dict[str, torch.Tensor], shape: tuple[int, int],
                       device) -> Int8Weight:
    """One projection's INT8 weight from its checkpoint tensors (``tensors``: suffix -> tensor), all checked.

    prefix: the projection's checkpoint name without ``.weight`` (for the messages); shape: the config's [N, K].
    """
    n, k = shape
    w = tensors.get("weight")
    wname = f"{prefix}.weight"
    if w is None:
        raise QuantizationError(f"tensor {wname!r} is missing")
    if w.dtype != torch.int8:
        raise QuantizationError(f"tensor {wname!r} is marked {scheme!r} but has dtype {w.dtype}, expected int8")
    if tuple(w.shape) != (n, k):
        raise QuantizationError(f"tensor {wname!r} has shape {tuple(w.shape)}, expected {(n, k)} for this config")
    weight_scale = _positive(f"{prefix}.weight_scale",
                             _vector(f"{prefix}.weight_scale", tensors.get("weight_scale"), n, "per-channel scale"),
                             "a scale")
    offset = _vector(f"{prefix}.weight_offset", tensors.get("weight_offset"), n, "per-channel weight zero point")
    if bool((offset != 0).any()):
        raise QuantizationError(f"tensor {prefix + '.weight_offset'!r} is not all zero: asymmetric INT8 weights are "
                                f"not supported (msModelSlim's W8A8 weights are symmetric)")
    if scheme == W8A8_DYNAMIC:
        return Int8Weight(w.to(device).contiguous(), weight_scale.to(device), scheme)
    input_scale = _positive(f"{prefix}.input_scale", _scalar(f"{prefix}.input_scale", tensors.get("input_scale"),
                                                             "the layer's activation scale"), "a scale")
    input_offset = _scalar(f"{prefix}.input_offset", tensors.get("input_offset"), "the activation zero point")
    if float(input_offset) != round(float(input_offset)) or not -128 <= float(input_offset) <= 127:
        raise QuantizationError(f"tensor {prefix + '.input_offset'!r} must be an integer in [-128, 127], "
                                f"got {float(input_offset)}")
    qb = tensors.get("quant_bias")
    if qb is None or qb.dtype not in (torch.int32, torch.int64) or qb.numel() != n:
        got = "missing" if qb is None else f"{qb.dtype} of shape {tuple(qb.shape)}"
        raise QuantizationError(f"tensor {prefix + '.quant_bias'!r} must be int32 [{n}], got {got}")
    deq = _deq_scale(f"{prefix}.deq_scale", tensors.get("deq_scale"), n)
    expected = input_scale * weight_scale
    if not torch.allclose(deq, expected, rtol=1e-3, atol=0.0):
        bad = int(((deq - expected).abs() > 1e-3 * expected.abs()).nonzero()[0])
        raise QuantizationError(f"tensor {prefix + '.deq_scale'!r} disagrees with input_scale * weight_scale at "
                                f"channel {bad}: {float(deq[bad])} vs {float(expected[bad])}")
    return Int8Weight(w.to(device).contiguous(), deq.to(device), scheme, input_scale.to(device),
                      input_offset.to(device), qb.reshape(n).to(device=device, dtype=torch.int32))


def weight_only_int8(weight: torch.Tensor) -> Int8Weight:
    """Per-channel symmetric INT8 of a float [N, K] weight: ``scale[n] = max_k |w[n, k]| / 127`` (1 for an all-zero
    row), ``q = round(w / scale)`` in [-127, 127]; the float weight it stands for is ``q * scale[:, None]``."""
    w = weight.float()
    absmax = w.abs().amax(dim=1)
    if not bool(torch.isfinite(absmax).all()):
        raise QuantizationError("int8_weight_only: a weight has a NaN or infinite value")
    scale = torch.where(absmax > 0, absmax / 127.0, torch.ones_like(absmax))
    q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return Int8Weight(q.contiguous(), scale, WEIGHT_ONLY)


def int8_weight_bytes(shape: tuple[int, ...], scheme: str) -> int:
    """Bytes an ``Int8Weight`` of [N, K] keeps: the int8 weight, the float32 scales, static W8A8's quant_bias."""
    n, k = shape
    extra = 4 * n + 8 if scheme == W8A8 else 0  # quant_bias [N] int32, input scale and offset
    return n * k + 4 * n + extra
