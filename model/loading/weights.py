"""Load a Qwen3.5 checkpoint's text weights from safetensors, with clear errors.

Checkpoints come as one ``model.safetensors`` or as shards listed in
``model.safetensors.index.json``. Names are mapped to the text model's own
names (``embed_tokens.weight``, ``layers.3.self_attn.q_proj.weight``,
``lm_head.weight``...): the prefix is ``model.`` for ``qwen3_5_text`` and
``model.language_model.`` for the multimodal ``qwen3_5`` layout, whose vision
tower (``model.visual.*``) and multi-token-prediction head (``mtp.*``) are
ignored. A missing, unexpected or mis-shaped tensor raises ``WeightsError``
naming it.

MoE checkpoints hold the routed experts in either of two layouts, both
accepted: fused 3-D tensors ``mlp.experts.gate_up_proj`` [E, 2I, H] (gate rows
first) and ``mlp.experts.down_proj`` [E, H, I], as transformers 5.24 keeps them
in memory; or one 2-D tensor per expert and projection,
``mlp.experts.{e}.{gate,up,down}_proj.weight`` (what transformers' own
``save_pretrained`` writes and what quantised checkpoints use). Per-expert
tensors are stacked into the fused names at load time, so the model always sees
the fused layout.
"""
from __future__ import annotations

import json
import os
import re

import torch

from .config import Qwen35Config
from .quantization import (ALL_SCHEME_TENSORS, INT8_WEIGHT_ONLY, SCHEME_TENSORS, WEIGHT_ONLY, Int8Weight,
                           QuantizationError, check_quantizable, msmodelslim_weight, quantizable_names,
                           quantized_schemes, resolve_quantization, weight_only_int8)

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# Tensors of the published multimodal checkpoints that the text model does not use.
IGNORED_PREFIXES = ("model.visual.", "mtp.", "visual.")
# msModelSlim's per-channel INT8 KV calibration: optional.
KV_SCALE_PATTERN = re.compile(r"^layers\.(\d+)\.self_attn\.([kv])_proj\.kv_cache_scale$")
# One expert's projection in the per-expert MoE layout.
PER_EXPERT_PATTERN = re.compile(r"^layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight$")


class WeightsError(ValueError):
    """A checkpoint that does not hold exactly the tensors the config describes."""


def int8_schemes(model_dir: str, config: Qwen35Config, quantization: str | None) -> dict[str, str]:
    """Text-model weight name -> its INT8 scheme (``W8A8``, ``W8A8_DYNAMIC``, ``W8A16``) for ``quantization``
    (None: msModelSlim's description if the checkpoint has one; see ``quantization.resolve_quantization``).
    Read from the description file and the config alone (no tensor), so the memory plan can count the weights."""
    method, description = resolve_quantization(os.fspath(model_dir), quantization)
    allowed = quantizable_names(config, expected_shapes(config))
    if method == INT8_WEIGHT_ONLY:
        # The lm_head too (LM_HEAD; with tied embeddings an INT8 copy beside the float embedding, whose
        # lookups read a row a token): a decode step reads it whole, a third of the 0.8B model's bytes.
        return {**{name: WEIGHT_ONLY for name in allowed}, LM_HEAD: WEIGHT_ONLY}
    if description is None:
        return {}
    text_names = {c: text_model_name(c, config.multimodal) for c in description}
    by_text = {n: c for c, n in text_names.items() if n is not None}
    try:
        schemes = quantized_schemes(description, {c: n for c, n in text_names.items() if n is not None})
        check_quantizable(schemes, allowed, lambda name: by_text.get(name, name))
    except QuantizationError as exc:
        raise WeightsError(str(exc)) from exc
    return schemes


def _scheme_part(name: str, schemes: dict[str, str]) -> tuple[str, str] | None:
    """(weight name, suffix) when ``name`` is one of the scale tensors of a quantized projection, else None."""
    prefix, _, suffix = name.rpartition(".")
    if suffix not in ALL_SCHEME_TENSORS:
        return None
    weight = prefix + ".weight"
    scheme = schemes.get(weight)
    return (weight, suffix) if scheme is not None and suffix in SCHEME_TENSORS.get(scheme, ()) else None


# The head's text-model name; present in the weights with tied embeddings only when it is an INT8 copy.
LM_HEAD = "lm_head.weight"


def expected_shapes(config: Qwen35Config) -> dict[str, tuple[int, ...]]:
    """Every tensor the text model needs, by its text-model name, with its shape."""
    c = config
    h = c.hidden_size
    shapes: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (c.vocab_size, h), "norm.weight": (h,)}
    if not c.tie_word_embeddings:
        shapes["lm_head.weight"] = (c.vocab_size, h)
    for i, kind in enumerate(c.layer_types):
        p = f"layers.{i}."
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        if c.is_moe:
            shapes.update(moe_shapes(c, i))
        else:
            shapes[p + "mlp.gate_proj.weight"] = (c.intermediate_size, h)
            shapes[p + "mlp.up_proj.weight"] = (c.intermediate_size, h)
            shapes[p + "mlp.down_proj.weight"] = (h, c.intermediate_size)
        if kind == "full_attention":
            a = p + "self_attn."
            q_out = c.num_attention_heads * c.head_dim
            kv_out = c.num_key_value_heads * c.head_dim
            shapes[a + "q_proj.weight"] = (2 * q_out, h)  # [query | gate] per head
            shapes[a + "k_proj.weight"] = (kv_out, h)
            shapes[a + "v_proj.weight"] = (kv_out, h)
            shapes[a + "o_proj.weight"] = (h, q_out)
            if c.attention_bias:
                shapes[a + "q_proj.bias"] = (2 * q_out,)
                shapes[a + "k_proj.bias"] = (kv_out,)
                shapes[a + "v_proj.bias"] = (kv_out,)
                shapes[a + "o_proj.bias"] = (h,)
            shapes[a + "q_norm.weight"] = (c.head_dim,)
            shapes[a + "k_norm.weight"] = (c.head_dim,)
        else:
            g = p + "linear_attn."
            nv = c.linear_num_value_heads
            shapes[g + "in_proj_qkv.weight"] = (c.gdn_conv_dim, h)
            shapes[g + "in_proj_z.weight"] = (c.gdn_value_dim, h)
            shapes[g + "in_proj_b.weight"] = (nv, h)
            shapes[g + "in_proj_a.weight"] = (nv, h)
            shapes[g + "conv1d.weight"] = (c.gdn_conv_dim, 1, c.linear_conv_kernel_dim)
            shapes[g + "A_log"] = (nv,)
            shapes[g + "dt_bias"] = (nv,)
            shapes[g + "norm.weight"] = (c.linear_value_head_dim,)
            shapes[g + "out_proj.weight"] = (h, c.gdn_value_dim)
    return shapes


def stored_dtype(name: str, dtype: torch.dtype) -> torch.dtype:
    """The dtype a weight is kept in: ``dtype``, except the GDN gate parameters (float32, as transformers)."""
    return torch.float32 if name.endswith(("A_log", "dt_bias")) else dtype


def moe_shapes(config: Qwen35Config, layer: int) -> dict[str, tuple[int, ...]]:
    """The MoE block of one layer: router, fused experts, shared expert and its gate."""
    c, h = config, config.hidden_size
    e, i, s = c.num_experts, c.moe_intermediate_size, c.shared_expert_intermediate_size
    m = f"layers.{layer}.mlp."
    return {
        m + "gate.weight": (e, h),
        m + "experts.gate_up_proj": (e, 2 * i, h),
        m + "experts.down_proj": (e, h, i),
        m + "shared_expert.gate_proj.weight": (s, h),
        m + "shared_expert.up_proj.weight": (s, h),
        m + "shared_expert.down_proj.weight": (h, s),
        m + "shared_expert_gate.weight": (1, h),
    }


def _per_expert_target(config: Qwen35Config, name: str, num_layers: int | None = None):
    """Where a per-expert tensor goes in the fused layout: (fused name, expert, rows slice, shape), or None.

    ``num_layers``: how many ``layers.{i}`` there are (default the target's
    ``num_hidden_layers``; the MTP loader passes its own layer count).
    """
    match = PER_EXPERT_PATTERN.match(name)
    if match is None or not config.is_moe:
        return None
    layer, expert, proj = int(match.group(1)), int(match.group(2)), match.group(3)
    if num_layers is None:
        num_layers = config.num_hidden_layers
    if layer >= num_layers or expert >= config.num_experts:
        return None  # reported as unexpected
    h, i = config.hidden_size, config.moe_intermediate_size
    m = f"layers.{layer}.mlp.experts."
    if proj == "down":
        return m + "down_proj", expert, slice(0, h), (h, i)
    rows = slice(0, i) if proj == "gate" else slice(i, 2 * i)
    return m + "gate_up_proj", expert, rows, (i, h)


def checkpoint_files(model_dir: str) -> dict[str, str]:
    """Map each checkpoint tensor name to the safetensors file that holds it."""
    index = os.path.join(model_dir, INDEX_FILE)
    single = os.path.join(model_dir, SINGLE_FILE)
    if os.path.isfile(index):
        try:
            with open(index, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise WeightsError(f"{index} is not a valid safetensors index (needs a 'weight_map'): {exc}") from exc
        files = {}
        for name, shard in weight_map.items():
            path = os.path.join(model_dir, shard)
            if not os.path.isfile(path):
                raise WeightsError(f"{index} lists tensor {name!r} in {shard!r}, which does not exist")
            files[name] = path
        return files
    if os.path.isfile(single):
        return {name: single for name in _tensor_names(single)}
    raise WeightsError(f"no {SINGLE_FILE} or {INDEX_FILE} in model directory {model_dir!r}")


def _open(path: str):
    from safetensors import safe_open

    try:
        return safe_open(path, framework="pt")
    except Exception as exc:  # safetensors raises its own error types for bad headers
        raise WeightsError(f"cannot read safetensors file {path!r} (corrupt or truncated?): {exc}") from exc


def _tensor_names(path: str) -> list[str]:
    with _open(path) as f:
        return list(f.keys())


def text_model_name(checkpoint_name: str, multimodal: bool) -> str | None:
    """The text-model name of a checkpoint tensor, or None when it is to be ignored."""
    if checkpoint_name.startswith(IGNORED_PREFIXES):
        return None
    if checkpoint_name == "lm_head.weight":
        return checkpoint_name
    prefix = "model.language_model." if multimodal else "model."
    if checkpoint_name.startswith(prefix):
        return checkpoint_name[len(prefix):]
    return checkpoint_name  # reported as unexpected by the caller


def _check_expert_pieces(model_dir: str, config: Qwen35Config, pieces: dict[str, set[tuple[int, int]]],
                         found: set[str]) -> list[str]:
    """The fused expert tensors that per-expert tensors make up; each must be complete and not also fused."""
    fused = []
    for name, got in sorted(pieces.items()):
        if name in found:
            raise WeightsError(f"checkpoint in {model_dir!r} holds {name!r} both fused and as per-expert tensors; "
                               f"expected one layout")
        starts = (0,) if name.endswith("down_proj") else (0, config.moe_intermediate_size)
        want = {(e, r) for e in range(config.num_experts) for r in starts}
        if got != want:
            e, r = min(want - got)
            proj = "down" if name.endswith("down_proj") else ("gate" if r == 0 else "up")
            raise WeightsError(f"checkpoint in {model_dir!r} is missing {len(want - got)} per-expert tensor(s) of "
                               f"{name!r}, e.g. expert {e} {proj}_proj")
        fused.append(name)
    return fused


def load_weights(model_dir: str, config: Qwen35Config, dtype: torch.dtype,
                 device: torch.device | str = "cpu", quantization: str | None = None,
                 ) -> tuple[dict[str, torch.Tensor | Int8Weight], dict[str, torch.Tensor]]:
    """Read every tensor the text model needs, checked and cast to ``dtype``.

    Returns ``(weights, kv_cache_scales)``: weights by text-model name (see
    ``expected_shapes``); the optional msModelSlim KV scales by their text-model
    name, as float32. ``A_log``, ``dt_bias`` stay float32 (the gates are computed
    in float32 as in transformers). ``quantization`` (``int8_schemes``): the INT8
    projections are ``Int8Weight``s instead of float tensors: read from msModelSlim's
    W8A8 layout (every scale checked, a bad or missing one a ``WeightsError`` naming
    it), or quantized per channel from the float weights (``"int8_weight_only"``).
    """
    model_dir = os.fspath(model_dir)
    shapes = expected_shapes(config)
    schemes = int8_schemes(model_dir, config, quantization)
    weight_only = bool(schemes) and all(s == WEIGHT_ONLY for s in schemes.values())
    stored_int8 = {} if weight_only else schemes  # the projections the checkpoint holds in int8
    int8_parts: dict[str, dict[str, torch.Tensor]] = {name: {} for name in stored_int8}
    files = checkpoint_files(model_dir)
    by_file: dict[str, list[tuple[str, str]]] = {}
    unexpected = []
    # fused name -> the per-expert pieces found for it (expert, rows.start)
    pieces: dict[str, set[tuple[int, int]]] = {}
    for ckpt_name, path in files.items():
        name = text_model_name(ckpt_name, config.multimodal)
        if name is None:
            continue
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue  # tied: the embedding serves as the head
        target = _per_expert_target(config, name)
        if target is not None:
            pieces.setdefault(target[0], set()).add((target[1], target[2].start))
        elif name not in shapes and not KV_SCALE_PATTERN.match(name) and _scheme_part(name, stored_int8) is None:
            unexpected.append(ckpt_name)
            continue
        by_file.setdefault(path, []).append((ckpt_name, name))
    if unexpected:
        raise WeightsError(f"checkpoint in {model_dir!r} has {len(unexpected)} unexpected tensor(s) for this "
                           f"config, e.g. {sorted(unexpected)[:5]}")
    found = {name for pairs in by_file.values() for _, name in pairs if _scheme_part(name, stored_int8) is None}
    fused = _check_expert_pieces(model_dir, config, pieces, found)
    missing = sorted(set(shapes) - found - set(fused))
    if missing:
        raise WeightsError(f"checkpoint in {model_dir!r} is missing {len(missing)} tensor(s), e.g. {missing[:5]}")

    weights: dict[str, torch.Tensor] = {}
    scales: dict[str, torch.Tensor] = {}
    # Per-expert tensors are copied into their fused tensor as they are read; so are the grouped ones.
    for name in fused:
        weights[name] = torch.empty(shapes[name], dtype=dtype, device=device)
    for path, pairs in by_file.items():
        with _open(path) as f:
            for ckpt_name, name in pairs:
                try:
                    t = f.get_tensor(ckpt_name)
                except Exception as exc:
                    raise WeightsError(f"cannot read tensor {ckpt_name!r} from {path!r} "
                                       f"(corrupt or truncated file?): {exc}") from exc
                if KV_SCALE_PATTERN.match(name):
                    scales[name] = t.to(device=device, dtype=torch.float32)
                    continue
                part = _scheme_part(name, stored_int8)
                if part is not None or name in stored_int8:
                    weight_name, suffix = part or (name, "weight")
                    int8_parts[weight_name][suffix] = t
                    continue
                target = _per_expert_target(config, name)
                if target is not None:
                    fused_name, expert, rows, shape = target
                    if tuple(t.shape) != shape:
                        raise WeightsError(f"tensor {ckpt_name!r} in {path!r} has shape {tuple(t.shape)}, "
                                           f"expected {shape} for this config")
                    if not t.is_floating_point():
                        raise WeightsError(f"tensor {ckpt_name!r} in {path!r} has dtype {t.dtype}, expected a float")
                    weights[fused_name][expert, rows] = t.to(device=device, dtype=dtype)
                    continue
                if tuple(t.shape) != shapes[name]:
                    raise WeightsError(f"tensor {ckpt_name!r} in {path!r} has shape {tuple(t.shape)}, "
                                       f"expected {shapes[name]} for this config")
                if not t.is_floating_point():
                    raise WeightsError(f"tensor {ckpt_name!r} in {path!r} has dtype {t.dtype}, expected a float")
                weights[name] = t.to(device=device, dtype=stored_dtype(name, dtype))
    try:
        for name, parts in int8_parts.items():
            weights[name] = msmodelslim_weight(_checkpoint_prefix(name, config), stored_int8[name], parts,
                                               shapes[name], device)
    except QuantizationError as exc:
        raise WeightsError(f"checkpoint in {model_dir!r}: {exc}") from exc
    if weight_only:
        for name in schemes:
            source = "embed_tokens.weight" if name == LM_HEAD and config.tie_word_embeddings else name
            weights[name] = weight_only_int8(weights[source])
    return weights, scales


def _checkpoint_prefix(name: str, config: Qwen35Config) -> str:
    """A text-model weight name back to its checkpoint name, without ``.weight`` (for the messages)."""
    prefix = "model.language_model." if config.multimodal else "model."
    return prefix + name[:-len(".weight")]
