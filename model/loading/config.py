"""Qwen3.5 text settings read from a Hugging Face ``config.json``.

Published Qwen3.5 checkpoints are multimodal (``model_type`` ``qwen3_5``, the
text settings under ``text_config``); text-only ones use ``qwen3_5_text``. The
mixture-of-experts models are ``qwen3_5_moe`` (multimodal) and
``qwen3_5_moe_text``, as transformers 5.24 defines them: every decoder layer's
MLP is a routed MoE block plus a gated shared expert. Only what the text model
computes with is kept here.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

TEXT_MODEL_TYPE = "qwen3_5_text"
MULTIMODAL_MODEL_TYPE = "qwen3_5"
MOE_TEXT_MODEL_TYPE = "qwen3_5_moe_text"
MOE_MULTIMODAL_MODEL_TYPE = "qwen3_5_moe"
SUPPORTED_MODEL_TYPES = (TEXT_MODEL_TYPE, MULTIMODAL_MODEL_TYPE, MOE_TEXT_MODEL_TYPE, MOE_MULTIMODAL_MODEL_TYPE)
# multimodal model_type -> the model_type its text_config must have
TEXT_TYPE_OF = {MULTIMODAL_MODEL_TYPE: TEXT_MODEL_TYPE, MOE_MULTIMODAL_MODEL_TYPE: MOE_TEXT_MODEL_TYPE}
LAYER_TYPES = ("linear_attention", "full_attention")


class ConfigError(ValueError):
    """A config.json that does not describe a Qwen3.5 model this package can run."""


@dataclass(frozen=True)
class Qwen35Config:
    """The text model's hyper-parameters (Hugging Face names).

    ``layer_types[i]`` is "linear_attention" (a Gated DeltaNet layer) or
    "full_attention". ``multimodal`` says whether the weights live under
    ``model.language_model.`` (the ``qwen3_5`` / ``qwen3_5_moe`` layout).

    MoE models (``num_experts > 0``) have no dense MLP: ``intermediate_size`` is
    0 and every layer routes each token to ``num_experts_per_tok`` of
    ``num_experts`` SwiGLU experts of width ``moe_intermediate_size``, plus a
    shared expert of width ``shared_expert_intermediate_size``.
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    layer_types: tuple[str, ...]
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 0.25
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 32768
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    hidden_act: str = "silu"
    eos_token_id: tuple[int, ...] = ()
    multimodal: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def rotary_dim(self) -> int:
        """Leading dims of each head rotated by RoPE (``head_dim * partial_rotary_factor``)."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def is_moe(self) -> bool:
        """True for the mixture-of-experts models (every layer's MLP is a MoE block)."""
        return self.num_experts > 0

    @property
    def full_attention_layers(self) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == "full_attention"]

    @property
    def linear_attention_layers(self) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == "linear_attention"]

    @property
    def gdn_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def gdn_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def gdn_conv_dim(self) -> int:
        """Channels of the GDN convolution: [q | k | v]."""
        return 2 * self.gdn_key_dim + self.gdn_value_dim

    @classmethod
    def from_dict(cls, raw: dict) -> "Qwen35Config":
        """Parse a config.json dict (either layout); raises ``ConfigError`` naming the problem."""
        if not isinstance(raw, dict):
            raise ConfigError(f"config must be a JSON object, got {type(raw).__name__}")
        model_type = raw.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(
                f"unsupported model_type {model_type!r}: this engine runs Qwen3.5 models, "
                f"model_type one of {SUPPORTED_MODEL_TYPES}"
            )
        multimodal = model_type in TEXT_TYPE_OF
        moe = model_type in (MOE_TEXT_MODEL_TYPE, MOE_MULTIMODAL_MODEL_TYPE)
        text = raw.get("text_config") if multimodal else raw
        if multimodal and not isinstance(text, dict):
            raise ConfigError(f"model_type {model_type!r} needs the text settings under 'text_config'")
        if multimodal and text.get("model_type", TEXT_TYPE_OF[model_type]) != TEXT_TYPE_OF[model_type]:
            raise ConfigError(f"text_config.model_type must be {TEXT_TYPE_OF[model_type]!r} for model_type "
                              f"{model_type!r}, got {text.get('model_type')!r}")

        def need(name, kind=int):
            if name not in text:
                raise ConfigError(f"config.json is missing {name!r}" + (" (in text_config)" if multimodal else ""))
            value = text[name]
            if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ConfigError(f"config.json {name!r} must be a positive int, got {value!r}")
            return value

        num_layers = need("num_hidden_layers")
        layer_types = text.get("layer_types")
        if layer_types is None:
            interval = text.get("full_attention_interval", 4)
            layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                           for i in range(num_layers)]
        layer_types = tuple(layer_types)
        if len(layer_types) != num_layers or any(t not in LAYER_TYPES for t in layer_types):
            raise ConfigError(f"config.json 'layer_types' must list {num_layers} entries from {LAYER_TYPES}, "
                              f"got {list(layer_types)}")

        rope = dict(text.get("rope_parameters") or text.get("rope_scaling") or {})
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", "mrope"):
            raise ConfigError(f"rope_parameters.rope_type {rope_type!r} is not supported (only plain RoPE)")
        theta = rope.get("rope_theta", text.get("rope_theta", 10000.0))
        partial = rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))

        heads = need("num_attention_heads")
        kv_heads = text.get("num_key_value_heads", heads)
        hidden = need("hidden_size")
        head_dim = text.get("head_dim") or hidden // heads
        if heads % kv_heads:
            raise ConfigError(f"num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})")
        nk, nv = need("linear_num_key_heads"), need("linear_num_value_heads")
        if nv % nk:
            raise ConfigError(f"linear_num_value_heads ({nv}) must be a multiple of linear_num_key_heads ({nk})")
        act = text.get("hidden_act", "silu")
        if act != "silu":
            raise ConfigError(f"hidden_act {act!r} is not supported (Qwen3.5 uses 'silu')")
        eos = text.get("eos_token_id", raw.get("eos_token_id"))
        eos = () if eos is None else tuple(eos) if isinstance(eos, (list, tuple)) else (int(eos),)
        moe_fields = {}
        if moe:
            moe_fields = {name: need(name) for name in (
                "num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size")}
            if moe_fields["num_experts_per_tok"] > moe_fields["num_experts"]:
                raise ConfigError(f"config.json 'num_experts_per_tok' ({moe_fields['num_experts_per_tok']}) must be "
                                  f"<= 'num_experts' ({moe_fields['num_experts']})")
        tie = raw.get("tie_word_embeddings", text.get("tie_word_embeddings", False)) if multimodal \
            else text.get("tie_word_embeddings", False)
        return cls(
            vocab_size=need("vocab_size"),
            hidden_size=hidden,
            # MoE configs have no dense MLP (transformers 5.24 has no intermediate_size for them).
            intermediate_size=0 if moe else need("intermediate_size"),
            num_hidden_layers=num_layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            linear_num_key_heads=nk,
            linear_num_value_heads=nv,
            linear_key_head_dim=need("linear_key_head_dim"),
            linear_value_head_dim=need("linear_value_head_dim"),
            linear_conv_kernel_dim=text.get("linear_conv_kernel_dim", 4),
            layer_types=layer_types,
            rope_theta=float(theta),
            partial_rotary_factor=float(partial),
            rms_norm_eps=float(text.get("rms_norm_eps", 1e-6)),
            max_position_embeddings=int(text.get("max_position_embeddings", 32768)),
            tie_word_embeddings=bool(tie),
            attention_bias=bool(text.get("attention_bias", False)),
            hidden_act=act,
            eos_token_id=eos,
            multimodal=multimodal,
            **moe_fields,
            extra={"raw": raw},
        )

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike) -> "Qwen35Config":
        """Read ``<model_dir>/config.json``."""
        path = os.path.join(os.fspath(model_dir), "config.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no config.json in model directory {os.fspath(model_dir)!r}")
        try:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
        return cls.from_dict(raw)
