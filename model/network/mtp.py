"""Qwen3.5's multi-token-prediction (MTP) head, the drafter of speculative decoding.

What vLLM 0.33 runs as ``Qwen3_5MTP`` (``model_executor/models/qwen3_5_mtp.py``).
A draft step at position t takes the next token x_{t+1} and a hidden state
h_t [H] and computes

    h = fc(cat[norm_e(embed(x_{t+1})), norm_h(h_t)])          # fc: [H, 2H], no bias
    h = decoder_layer_{step % num_layers}(h)                  # full attention + MLP, pre-norm, residuals
    h = norm(h);  logits = lm_head(h)                         # the draft of x_{t+2}

For the first draft, h_t is the target's final-normed hidden state at
position t; each further draft reuses the MTP's own output h of the
previous draft. Norms are Qwen3.5's zero-centred ``(1 + w)`` RMSNorm. The
embedding and the lm_head are the target's (shared, not in ``mtp.*``). The
decoder layer attends over its own paged KV cache, with the target's block
tables and slot mapping: its KV layer id is ``num_hidden_layers + i`` (vLLM's
``mtp_start_layer_idx``), so ``ModelCaches.key_caches`` holds it next to the
target's layers (``add_mtp_kv_caches``).

Checkpoint names. Published Qwen3.5 checkpoints keep the head at the top
level in both layouts: ``mtp.fc.weight``, ``mtp.pre_fc_norm_embedding.weight``,
``mtp.pre_fc_norm_hidden.weight``, ``mtp.norm.weight`` and
``mtp.layers.{i}.{input_layernorm, self_attn.*, post_attention_layernorm,
mlp.*}`` -- transformers 5.24 skips exactly ``^mtp.*`` when it loads either
``Qwen3_5ForCausalLM`` or ``Qwen3_5ForConditionalGeneration``, and vLLM's
``Qwen3_5MTP.load_weights`` maps ``mtp.`` to its own module in both. The
layouts differ only in where the shared embedding lives (``model.`` or
``model.language_model.``), which ``weights.load_weights`` already resolves.
The number of layers is the config's ``mtp_num_hidden_layers`` (under
``text_config`` for the multimodal layout), else counted from the names.

On a MoE checkpoint (``qwen3_5_moe*``) each MTP layer's MLP is the MoE block
of the target's layers (``mlp.gate``, ``mlp.experts.*``, ``mlp.shared_expert.*``,
``mlp.shared_expert_gate``; run by ``moe.SparseMoeBlock``), its experts either
fused or per expert, as ``weights.load_weights`` accepts them.
"""
from __future__ import annotations

import os
import re

import torch
import torch.nn.functional as F

from ..loading.config import Qwen35Config
from ..loading.quantization import Int8Weight
from ..loading.weights import (WeightsError, _check_expert_pieces, _open, _per_expert_target, checkpoint_files,
                               expected_shapes)
from .attention import FullAttention
from .greedy_head import head_logits
from .layers import rms_norm_zero_centred, rope_cos_sin, swiglu_mlp
from .moe import SparseMoeBlock

PREFIX = "mtp."
_LAYER_NAME = re.compile(r"^mtp\.layers\.(\d+)\.")


class MTPWeightsError(WeightsError):
    """A checkpoint whose ``mtp.*`` tensors are missing, incomplete or mis-shaped for speculative decoding."""


def configured_num_layers(config: Qwen35Config) -> int | None:
    """``mtp_num_hidden_layers`` from the checkpoint's config.json (text settings), or None if absent."""
    raw = config.extra.get("raw", {})
    text = raw.get("text_config", raw) if config.multimodal else raw
    value = text.get("mtp_num_hidden_layers")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MTPWeightsError(f"config.json 'mtp_num_hidden_layers' must be an int >= 0, got {value!r}")
    return value


def mtp_expected_shapes(config: Qwen35Config, num_layers: int) -> dict[str, tuple[int, ...]]:
    """Every MTP tensor by its checkpoint name (``mtp.*``), with its shape.

    Each ``mtp.layers.{i}`` has exactly the tensors of one of the target's
    full-attention layers (their shapes come from ``weights.expected_shapes``):
    on a MoE config its MLP is the MoE block, experts in the fused layout here
    (``load_mtp_weights`` also accepts the per-expert one).
    """
    h = config.hidden_size
    shapes = {"mtp.fc.weight": (h, 2 * h), "mtp.pre_fc_norm_embedding.weight": (h,),
              "mtp.pre_fc_norm_hidden.weight": (h,), "mtp.norm.weight": (h,)}
    if not config.full_attention_layers:
        raise MTPWeightsError("the MTP layer is a full-attention layer, but this config has none to model it on")
    template = f"layers.{config.full_attention_layers[0]}."
    layer = {name[len(template):]: shape for name, shape in expected_shapes(config).items()
             if name.startswith(template)}
    for i in range(num_layers):
        shapes.update({f"mtp.layers.{i}.{name}": shape for name, shape in layer.items()})
    return shapes


def _mtp_files(model_dir: str) -> dict[str, str]:
    return {name: path for name, path in checkpoint_files(model_dir).items() if name.startswith(PREFIX)}


def _num_layers(config: Qwen35Config, mtp_names) -> int:
    configured = configured_num_layers(config)
    if configured is not None:
        return configured
    return len({int(m.group(1)) for m in map(_LAYER_NAME.match, mtp_names) if m})


def count_mtp_layers(model_dir: str | os.PathLike, config: Qwen35Config) -> int:
    """MTP layers a checkpoint offers for drafting (0 without ``mtp.*`` tensors), from names alone.

    What ``speculative_config.parse_speculative_config`` takes as ``num_mtp_layers``;
    ``load_mtp_weights`` then checks every tensor.
    """
    files = _mtp_files(os.fspath(model_dir))
    return _num_layers(config, files) if files else 0


def load_mtp_weights(model_dir: str | os.PathLike, config: Qwen35Config, dtype: torch.dtype,
                     device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Read the ``mtp.*`` tensors, checked and cast to ``dtype``; keys keep their checkpoint names.

    Raises ``MTPWeightsError`` naming what is missing (no ``mtp.*`` at all, or
    some of them), unexpected or mis-shaped.
    """
    model_dir = os.fspath(model_dir)
    files = _mtp_files(model_dir)
    num_layers = _num_layers(config, files)
    shapes = mtp_expected_shapes(config, num_layers) if num_layers else {}
    if not files or not num_layers:
        example = sorted(mtp_expected_shapes(config, 1))
        raise MTPWeightsError(
            f"checkpoint in {model_dir!r} has no multi-token-prediction head for speculative_config method 'mtp': "
            f"it needs the tensors {example[:4]} and mtp.layers.{{i}}.* (config 'mtp_num_hidden_layers' "
            f"= {configured_num_layers(config)}, {len(files)} mtp.* tensor(s) found). Checkpoints re-saved by "
            "transformers drop mtp.*; use the original checkpoint, or run without speculative decoding")
    # Per-expert MoE tensors (mtp.layers.{i}.mlp.experts.{e}.*) are gathered into the fused ones.
    pieces: dict[str, set[tuple[int, int]]] = {}
    targets = {}
    for name in files:
        target = _per_expert_target(config, name[len(PREFIX):], num_layers)
        if target is not None:
            targets[name] = (PREFIX + target[0],) + target[1:]
            pieces.setdefault(targets[name][0], set()).add((target[1], target[2].start))
    fused = _check_expert_pieces(model_dir, config, pieces, set(files))
    missing = sorted(set(shapes) - set(files) - set(fused))
    if missing:
        raise MTPWeightsError(f"checkpoint in {model_dir!r} is missing {len(missing)} MTP tensor(s) for "
                              f"{num_layers} MTP layer(s), e.g. {missing[:5]}")
    unexpected = sorted(set(files) - set(shapes) - set(targets))
    if unexpected:
        raise MTPWeightsError(f"checkpoint in {model_dir!r} has {len(unexpected)} unexpected MTP tensor(s) for "
                              f"{num_layers} MTP layer(s), e.g. {unexpected[:5]}")
    by_file: dict[str, list[str]] = {}
    for name, path in files.items():
        by_file.setdefault(path, []).append(name)
    weights = {name: torch.empty(shapes[name], dtype=dtype, device=device) for name in fused}
    for path, names in by_file.items():
        with _open(path) as f:
            for name in names:
                t = f.get_tensor(name)
                fused_name, expert, rows, shape = targets.get(name, (name, None, None, shapes.get(name)))
                if tuple(t.shape) != shape:
                    raise MTPWeightsError(f"tensor {name!r} in {path!r} has shape {tuple(t.shape)}, expected "
                                          f"{shape} for this config")
                if not t.is_floating_point():
                    raise MTPWeightsError(f"tensor {name!r} in {path!r} has dtype {t.dtype}, expected a float")
                if expert is None:
                    weights[name] = t.to(device=device, dtype=dtype)
                else:
                    weights[fused_name][expert, rows] = t.to(device=device, dtype=dtype)
    return weights


class Qwen35MTP:
    """The MTP drafter over a flat step batch (what the target's forward reads), sharing its embedding and lm_head.

    ``layer_ids[i]`` is the KV-cache layer id of MTP layer i
    (``num_hidden_layers + i``).
    """

    def __init__(self, config: Qwen35Config, weights: dict[str, torch.Tensor], embed: torch.Tensor,
                 lm_head: torch.Tensor, backend: str | None = None):
        self.config = config
        self.embed, self.lm_head = embed, lm_head
        self.fc = weights["mtp.fc.weight"]
        self.norm_embedding = weights["mtp.pre_fc_norm_embedding.weight"]
        self.norm_hidden = weights["mtp.pre_fc_norm_hidden.weight"]
        self.norm = weights["mtp.norm.weight"]
        num_layers = len({int(m.group(1)) for m in map(_LAYER_NAME.match, weights) if m})
        self.layer_ids = [config.num_hidden_layers + i for i in range(num_layers)]
        self.layers = []
        for i, layer_id in enumerate(self.layer_ids):
            # FullAttention reads "layers.{id}.self_attn.*": present the MTP layer under its KV layer id.
            src, dst = f"mtp.layers.{i}.", f"layers.{layer_id}."
            renamed = {dst + name[len(src):]: t for name, t in weights.items() if name.startswith(src)}
            if config.is_moe:  # the MTP layer's MLP is a MoE block, as every target layer's
                mlp = SparseMoeBlock(config, layer_id, renamed, backend).forward
            else:
                dense = (renamed[dst + "mlp.gate_proj.weight"], renamed[dst + "mlp.up_proj.weight"],
                         renamed[dst + "mlp.down_proj.weight"])
                mlp = lambda x, dense=dense: swiglu_mlp(x, *dense)  # noqa: E731
            self.layers.append((
                FullAttention(config, layer_id, renamed, backend),
                renamed[dst + "input_layernorm.weight"],
                renamed[dst + "post_attention_layernorm.weight"],
                mlp,
            ))

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, target, backend: str | None = None) -> "Qwen35MTP":
        """Load the head of ``model_dir`` for ``target`` (a ``Qwen35ForCausalLM``), in its dtype and device."""
        weights = load_mtp_weights(model_dir, target.config, target.dtype, target.device)
        return cls(target.config, weights, target.embed, target.lm_head, backend)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @torch.inference_mode()
    def forward(self, batch, hidden_states: torch.Tensor, caches, step: int = 0,
                kv_observer=None) -> torch.Tensor:
        """One draft step over ``batch``; returns the MTP hidden states [T, H] (after ``mtp.norm``).

        ``batch`` is the step batch the target's layers read (the same fields),
        laid out for the MTP's inputs:
        batch.input_ids [T]: at each row the token after that row's position
        (x_{t+1}, or the previous draft); batch.positions [T]: the row's
        position t, whose slot (``batch.slot_mapping``) receives the MTP
        layer's K/V; hidden_states [T, H] in the model dtype: the target's
        final hidden state at t for the first draft, the previous step's
        output for later ones. ``step`` selects layer ``step % num_layers``.
        ``kv_observer(layer_id, key, value)``, when given, sees the layer's new K/V (INT8 calibration).
        """
        num_tokens = batch.input_ids.shape[0]
        if hidden_states.shape != (num_tokens, self.config.hidden_size):
            raise ValueError(f"Qwen35MTP.forward: 'hidden_states' must be [T, H] = "
                             f"[{num_tokens}, {self.config.hidden_size}], got {tuple(hidden_states.shape)}")
        return self.forward_layers(batch, hidden_states, caches, step, kv_observer)

    def forward_layers(self, batch, hidden_states: torch.Tensor, caches, step: int = 0,
                       kv_observer=None) -> torch.Tensor:
        """``forward`` without its checks and inference-mode wrapper: what graph mode compiles."""
        eps = self.config.rms_norm_eps
        embedded = rms_norm_zero_centred(F.embedding(batch.input_ids, self.embed), self.norm_embedding, eps)
        x = F.linear(torch.cat([embedded, rms_norm_zero_centred(hidden_states, self.norm_hidden, eps)], dim=-1),
                     self.fc)
        attention, in_norm, post_norm, mlp = self.layers[step % self.num_layers]
        cos, sin = rope_cos_sin(batch.positions, self.config.rotary_dim, self.config.rope_theta)
        x = x + attention.forward(rms_norm_zero_centred(x, in_norm, eps), cos, sin, batch, caches, kv_observer)
        x = x + mlp(rms_norm_zero_centred(x, post_norm, eps))
        return rms_norm_zero_centred(x, self.norm, eps)

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[S, H] -> float32 logits [S, V] through the shared lm_head."""
        if isinstance(self.lm_head, Int8Weight):  # "int8_weight_only" heads the drafter with the target's INT8 head
            return head_logits(hidden, self.lm_head)
        return F.linear(hidden, self.lm_head).float()

    def greedy_draft(self, batch, hidden_states: torch.Tensor, caches,
                     step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """``forward`` then the argmax at ``batch.logits_indices``: (draft tokens int64 [S], hidden [T, H])."""
        hidden = self.forward(batch, hidden_states, caches, step)
        return self.compute_logits(hidden[batch.logits_indices]).argmax(dim=-1), hidden


def add_mtp_kv_caches(caches, config: Qwen35Config, layer_ids: list[int], kv_dtype: torch.dtype,
                      device: torch.device | str,
                      kv_scales: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None) -> None:
    """Give each MTP layer a zeroed paged KV cache of the target's shape [NB, Hkv, Bs, D] in ``caches``.

    An int8 cache needs ``kv_scales[layer_id]`` = (k_scale, v_scale) float32 [Hkv, D].
    """
    shape = (caches.num_blocks, config.num_key_value_heads, caches.block_size, config.head_dim)
    # Check everything before adding anything: a refused call leaves ``caches`` as it was.
    for layer_id in layer_ids:
        if layer_id in caches.key_caches:
            raise ValueError(f"add_mtp_kv_caches: layer id {layer_id} already has a KV cache")
        if kv_dtype == torch.int8 and (kv_scales is None or layer_id not in kv_scales):
            raise ValueError(f"add_mtp_kv_caches: an int8 KV cache needs k/v scales for MTP layer id {layer_id}")
    for layer_id in layer_ids:
        caches.key_caches[layer_id] = torch.zeros(shape, dtype=kv_dtype, device=device)
        caches.value_caches[layer_id] = torch.zeros(shape, dtype=kv_dtype, device=device)
        if kv_dtype == torch.int8:
            caches.k_scales[layer_id], caches.v_scales[layer_id] = (s.to(device) for s in kv_scales[layer_id])
