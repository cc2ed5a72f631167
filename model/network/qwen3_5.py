"""The Qwen3.5 text model: embeddings, hybrid decoder layers (GDN and full attention), head.

It computes exactly what transformers' ``Qwen3_5ForCausalLM`` (and, for the MoE
configs, ``Qwen3_5MoeForCausalLM``: see ``moe.py``) computes, over a
flat mixed batch (``StepInputs``: the step's ``StepMetadata`` on the device) with every attention and GDN computation
going through ``qwen_ops.ops``, so any backend serves it.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..loading.config import Qwen35Config
from ..loading.weights import LM_HEAD, load_weights
from .attention import FullAttention, KVObserver
from .dense_mlp import DenseMLP
from .gdn import GatedDeltaNet
from .greedy_head import head_logits, linear_greedy_argmax
from .layers import rms_norm_scaled, rope_cos_sin, zero_centred_scale
from .moe import RoutingObserver, SparseMoeBlock
from .step_inputs import StepInputs


class Qwen35ForCausalLM:
    """Pre-norm decoder blocks with residuals: ``x += mixer(norm(x)); x += mlp(norm(x))``.

    Weights are plain tensors (inference only). Build with ``from_pretrained``
    or from an already loaded weight dict. On MoE configs the MLP of every
    layer is a ``SparseMoeBlock``; ``routing_observer`` (None by default), when
    set, is called with each layer's routing (tests compare it with
    transformers').
    """

    def __init__(self, config: Qwen35Config, weights: dict[str, torch.Tensor], backend: str | None = None,
                 kv_cache_scales: dict[str, torch.Tensor] | None = None):
        self.config = config
        self.backend = backend
        self.embed = weights["embed_tokens.weight"]
        # The head: the embedding when tied, unless the weights hold an INT8 copy of it ("int8_weight_only").
        self.lm_head = weights.get(LM_HEAD, self.embed)
        self.final_norm_scale = zero_centred_scale(weights["norm.weight"])  # 1 + w, made once
        self.kv_cache_scales = kv_cache_scales or {}
        self.routing_observer: RoutingObserver | None = None
        self.layers = []
        for i, kind in enumerate(config.layer_types):
            p = f"layers.{i}."
            mixer = (FullAttention if kind == "full_attention" else GatedDeltaNet)(config, i, weights, backend)
            if config.is_moe:
                mlp = SparseMoeBlock(config, i, weights, backend)
            else:
                mlp = DenseMLP(weights[p + "mlp.gate_proj.weight"], weights[p + "mlp.up_proj.weight"],
                               weights[p + "mlp.down_proj.weight"])
            self.layers.append((
                mixer,
                zero_centred_scale(weights[p + "input_layernorm.weight"]),
                zero_centred_scale(weights[p + "post_attention_layernorm.weight"]),
                mlp,
            ))

    @classmethod
    def from_pretrained(cls, model_dir: str, dtype: torch.dtype = torch.float32, device="cpu",
                        backend: str | None = None) -> "Qwen35ForCausalLM":
        config = Qwen35Config.from_pretrained(model_dir)
        weights, scales = load_weights(model_dir, config, dtype, device)
        return cls(config, weights, backend, scales)

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    @property
    def device(self) -> torch.device:
        return self.embed.device

    @torch.inference_mode()
    def forward(self, batch: StepInputs, caches, kv_observer: KVObserver | None = None) -> torch.Tensor:
        """Run one step; returns the final hidden states [T, hidden] (after the last norm).

        Writes the step's K/V into ``caches`` and advances the GDN states of its requests.
        """
        return self.forward_layers(batch, caches, kv_observer)

    def forward_layers(self, batch: StepInputs, caches, kv_observer: KVObserver | None = None) -> torch.Tensor:
        """``forward`` without its inference-mode wrapper: what graph mode compiles (``worker/graph_runner.py``),
        called inside inference mode."""
        eps = self.config.rms_norm_eps
        x = F.embedding(batch.input_ids, self.embed)
        cos, sin = rope_cos_sin(batch.positions, self.config.rotary_dim, self.config.rope_theta)
        for mixer, in_scale, post_scale, mlp in self.layers:
            h = rms_norm_scaled(x, in_scale, eps)
            if isinstance(mixer, FullAttention):
                h = mixer.forward(h, cos, sin, batch, caches, kv_observer)
            else:
                h = mixer.forward(h, batch, caches)
            x = x + h
            h = rms_norm_scaled(x, post_scale, eps)
            x = x + (mlp.forward(h, self.routing_observer) if isinstance(mlp, SparseMoeBlock) else mlp(h))
        return rms_norm_scaled(x, self.final_norm_scale, eps)

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[S, hidden] -> float32 logits [S, vocab]."""
        return head_logits(hidden, self.lm_head)

    @torch.inference_mode()
    def greedy_tokens(self, hidden: torch.Tensor) -> torch.Tensor:
        """[S, hidden] -> int64 [S]: ``compute_logits(hidden).argmax(-1)`` without making the logits."""
        return linear_greedy_argmax(hidden, self.lm_head)
