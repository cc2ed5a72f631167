"""Tiny random Qwen3.5 checkpoints saved by transformers, for parity tests.

Every norm weight, ``A_log`` and ``dt_bias`` is re-drawn before saving: their
initial values (zeros, ones) would hide a wrong norm formula or gate.
"""
from __future__ import annotations

import json
import os

import torch

TINY_TEXT = dict(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
    layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    num_attention_heads=4, num_key_value_heads=2, head_dim=32,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
    linear_conv_kernel_dim=4, max_position_embeddings=512, rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
)
TINY_VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64)


def randomise(model: torch.nn.Module, seed: int) -> None:
    """Draw every norm weight, A_log and dt_bias afresh (seeded) and scale up the weights a little.

    Larger projection weights make the layers' contributions visible next to the residual stream.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(0.5, 3.0, generator=gen).log())
            elif name.endswith("dt_bias"):
                p.copy_(torch.empty(p.shape).uniform_(-1.0, 1.0, generator=gen))
            elif name.endswith("linear_attn.norm.weight"):
                p.copy_(torch.empty(p.shape).uniform_(0.5, 1.5, generator=gen))
            elif "norm" in name and p.dim() == 1 and "visual" not in name:
                p.copy_(torch.empty(p.shape).uniform_(-0.5, 0.5, generator=gen))
            elif p.dim() >= 2 and "visual" not in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.08)


def save_text_checkpoint(path, seed: int = 0, **overrides) -> str:
    """A ``qwen3_5_text`` ``Qwen3_5ForCausalLM`` checkpoint in ``path``."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**{**TINY_TEXT, **overrides})).eval()
    randomise(model, seed + 1)
    model.save_pretrained(path)
    return os.fspath(path)


def save_multimodal_checkpoint(path, seed: int = 0) -> str:
    """A multimodal ``qwen3_5`` checkpoint (weights under model.language_model., a vision tower)
    plus an ``mtp.*`` tensor, as published checkpoints carry one."""
    from safetensors.torch import load_file, save_file
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    torch.manual_seed(seed)
    config = Qwen3_5Config(text_config=TINY_TEXT, vision_config=TINY_VISION)
    model = Qwen3_5ForConditionalGeneration(config).eval()
    randomise(model, seed + 1)
    model.save_pretrained(path)
    file = os.path.join(path, "model.safetensors")
    tensors = load_file(file)
    tensors["mtp.fc.weight"] = torch.randn(8, 8)
    save_file(tensors, file, metadata={"format": "pt"})
    return os.fspath(path)


def hf_model(path):
    """The transformers model of a saved checkpoint (either layout), in eval mode."""
    from transformers import AutoConfig, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration

    with open(os.path.join(path, "config.json")) as f:
        model_type = json.load(f)["model_type"]
    cls = Qwen3_5ForConditionalGeneration if model_type == "qwen3_5" else Qwen3_5ForCausalLM
    return cls.from_pretrained(path, config=AutoConfig.from_pretrained(path)).eval()


def hf_greedy(model, prompt: list[int], max_new_tokens: int) -> tuple[list[int], torch.Tensor]:
    """transformers' greedy generate: the new tokens and the raw logits [new, vocab] of each step."""
    with torch.no_grad():
        ids = torch.tensor([prompt])
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False,
                             output_logits=True, return_dict_in_generate=True, pad_token_id=0,
                             eos_token_id=None)
    return out.sequences[0, len(prompt):].tolist(), torch.cat(out.logits).float()


# ----------------------------------------------------------------------------- MoE (qwen3_5_moe*)

# TINY_TEXT's shape with a MoE block in every layer (transformers 5.24's MoE config has no intermediate_size).
TINY_MOE_TEXT = {**{k: v for k, v in TINY_TEXT.items() if k != "intermediate_size"},
                 "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
                 "num_experts": 8, "num_experts_per_tok": 2}
EXPERT_LAYOUTS = ("per_expert", "fused")


def fuse_experts_file(file: str) -> None:
    """Rewrite a safetensors file's per-expert tensors ``...mlp.experts.{e}.{gate,up,down}_proj.weight``
    as the fused ``...mlp.experts.gate_up_proj`` [E, 2I, H] (gate rows first) and ``down_proj`` [E, H, I]."""
    import re

    from safetensors.torch import load_file, save_file

    pattern = re.compile(r"^(.*\.mlp\.experts\.)(\d+)\.(gate|up|down)_proj\.weight$")
    tensors = load_file(file)
    groups: dict[str, dict[str, dict[int, torch.Tensor]]] = {}
    for name in list(tensors):
        match = pattern.match(name)
        if match:
            prefix, expert, proj = match.group(1), int(match.group(2)), match.group(3)
            groups.setdefault(prefix, {}).setdefault(proj, {})[expert] = tensors.pop(name)
    for prefix, projs in groups.items():
        n = len(projs["down"])
        tensors[prefix + "gate_up_proj"] = torch.stack(
            [torch.cat([projs["gate"][e], projs["up"][e]], dim=0) for e in range(n)]).contiguous()
        tensors[prefix + "down_proj"] = torch.stack([projs["down"][e] for e in range(n)]).contiguous()
    save_file(tensors, file, metadata={"format": "pt"})


def save_moe_checkpoint(path, seed: int = 0, *, multimodal: bool = False, layout: str = "per_expert",
                        **overrides) -> str:
    """A tiny random Qwen3.5 MoE checkpoint: ``qwen3_5_moe_text`` (``Qwen3_5MoeForCausalLM``) or, with
    ``multimodal``, ``qwen3_5_moe`` (vision tower, weights under model.language_model., plus an
    ``mtp.*`` tensor). ``layout``: "per_expert" (what transformers 5.24's save_pretrained writes) or
    "fused" (3-D expert tensors). Norms, gates, router and experts are randomised."""
    from safetensors.torch import load_file, save_file
    from transformers import (Qwen3_5MoeConfig, Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration,
                              Qwen3_5MoeTextConfig)

    if layout not in EXPERT_LAYOUTS:
        raise ValueError(f"layout must be one of {EXPERT_LAYOUTS}, got {layout!r}")
    torch.manual_seed(seed)
    text = {**TINY_MOE_TEXT, **overrides}
    if multimodal:
        model = Qwen3_5MoeForConditionalGeneration(Qwen3_5MoeConfig(text_config=text, vision_config=TINY_VISION))
    else:
        model = Qwen3_5MoeForCausalLM(Qwen3_5MoeTextConfig(**text))
    randomise(model.eval(), seed + 1)
    model.save_pretrained(path)
    file = os.path.join(path, "model.safetensors")
    if layout == "fused":
        fuse_experts_file(file)
    if multimodal:
        tensors = load_file(file)
        tensors["mtp.fc.weight"] = torch.randn(8, 8)
        save_file(tensors, file, metadata={"format": "pt"})
    return os.fspath(path)


def hf_moe_model(path):
    """The transformers MoE model of a saved MoE checkpoint (either prefix, either expert layout), in eval mode."""
    from transformers import AutoConfig, Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration

    with open(os.path.join(path, "config.json")) as f:
        model_type = json.load(f)["model_type"]
    cls = Qwen3_5MoeForConditionalGeneration if model_type == "qwen3_5_moe" else Qwen3_5MoeForCausalLM
    return cls.from_pretrained(path, config=AutoConfig.from_pretrained(path)).eval()


def record_hf_routing(model) -> dict[int, list[torch.Tensor]]:
    """Hook every transformers MoE router; returns {layer: [topk_ids of each forward call]} filled as it runs."""
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeTopKRouter

    found: dict[int, list[torch.Tensor]] = {}
    routers = [m for m in model.modules() if isinstance(m, Qwen3_5MoeTopKRouter)]
    for layer, router in enumerate(routers):  # modules() walks the layers in order
        router.register_forward_hook(lambda _m, _i, out, layer=layer: found.setdefault(layer, []).append(out[2]))
    return found


# ----------------------------------------------------------------------------- MTP (mtp.*)

def _mtp_tensors(text_config, num_mtp_layers: int, seed: int, layer_cls=None) -> dict[str, torch.Tensor]:
    """Random ``mtp.*`` tensors as published Qwen3.5 checkpoints name them (top level in both layouts):
    ``mtp.fc`` [H, 2H], the three zero-centred norms, and ``mtp.layers.{i}.*``, each a full-attention
    decoder layer of transformers' own kind (so its names and shapes come from transformers, not from us):
    ``layer_cls``, by default the dense ``Qwen3_5DecoderLayer``."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5DecoderLayer

    layer_cls = layer_cls or Qwen3_5DecoderLayer
    full = text_config.layer_types.index("full_attention")
    tensors = {}
    for i in range(num_mtp_layers):
        layer = layer_cls(text_config, full)
        randomise(layer, seed + 10 + i)
        tensors.update({f"mtp.layers.{i}.{name}": t.detach().clone() for name, t in layer.state_dict().items()})
    gen = torch.Generator().manual_seed(seed + 5)
    h = text_config.hidden_size
    tensors["mtp.fc.weight"] = torch.randn(h, 2 * h, generator=gen) * 0.08
    for name in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        tensors[f"mtp.{name}.weight"] = torch.empty(h).uniform_(-0.5, 0.5, generator=gen)
    return tensors


def _add_mtp(path, text_config, num_mtp_layers: int, seed: int, multimodal: bool, layer_cls=None,
             per_expert: bool = False) -> None:
    """Append MTP tensors to a saved checkpoint and record ``mtp_num_hidden_layers`` in its config.

    ``layer_cls``: see ``_mtp_tensors``; ``per_expert``: write a MoE layer's fused experts per expert."""
    from safetensors.torch import load_file, save_file

    file = os.path.join(path, "model.safetensors")
    tensors = {k: v for k, v in load_file(file).items() if not k.startswith("mtp.")}
    mtp = _mtp_tensors(text_config, num_mtp_layers, seed, layer_cls)
    tensors.update(split_experts(mtp) if per_expert else mtp)
    save_file(tensors, file, metadata={"format": "pt"})
    config_file = os.path.join(path, "config.json")
    with open(config_file) as f:
        raw = json.load(f)
    (raw["text_config"] if multimodal else raw)["mtp_num_hidden_layers"] = num_mtp_layers
    with open(config_file, "w") as f:
        json.dump(raw, f, indent=2)


def save_text_checkpoint_with_mtp(path, seed: int = 0, num_mtp_layers: int = 1, **overrides) -> str:
    """``save_text_checkpoint`` plus random MTP weights (``mtp.*``) and ``mtp_num_hidden_layers``."""
    from transformers import Qwen3_5TextConfig

    save_text_checkpoint(path, seed, **overrides)
    _add_mtp(path, Qwen3_5TextConfig(**{**TINY_TEXT, **overrides}), num_mtp_layers, seed, multimodal=False)
    return os.fspath(path)


def save_multimodal_checkpoint_with_mtp(path, seed: int = 0, num_mtp_layers: int = 1) -> str:
    """``save_multimodal_checkpoint`` with real MTP weights (instead of its one mis-shaped ``mtp.fc.weight``)."""
    from transformers import Qwen3_5TextConfig

    save_multimodal_checkpoint(path, seed)
    _add_mtp(path, Qwen3_5TextConfig(**TINY_TEXT), num_mtp_layers, seed, multimodal=True)
    return os.fspath(path)


def split_experts(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of ``fuse_experts_file`` on a dict: each fused ``...mlp.experts.gate_up_proj`` [E, 2I, H]
    and ``down_proj`` [E, H, I] becomes ``...mlp.experts.{e}.{gate,up,down}_proj.weight``."""
    out = {}
    for name, t in tensors.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            prefix, i = name[:-len("gate_up_proj")], t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{prefix}{e}.gate_proj.weight"] = t[e, :i].contiguous()
                out[f"{prefix}{e}.up_proj.weight"] = t[e, i:].contiguous()
        elif name.endswith("mlp.experts.down_proj"):
            prefix = name[:-len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{prefix}{e}.down_proj.weight"] = t[e].contiguous()
        else:
            out[name] = t
    return out


def save_moe_checkpoint_with_mtp(path, seed: int = 0, num_mtp_layers: int = 1, *, layout: str = "per_expert",
                                 **overrides) -> str:
    """A text-only ``save_moe_checkpoint`` plus random MTP weights whose layers are transformers'
    ``Qwen3_5MoeDecoderLayer`` (router, experts, gated shared expert), experts in ``layout`` as the
    target's, and ``mtp_num_hidden_layers``."""
    from transformers import Qwen3_5MoeTextConfig
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeDecoderLayer

    save_moe_checkpoint(path, seed, layout=layout, **overrides)
    _add_mtp(path, Qwen3_5MoeTextConfig(**{**TINY_MOE_TEXT, **overrides}), num_mtp_layers, seed,
             multimodal=False, layer_cls=Qwen3_5MoeDecoderLayer, per_expert=layout == "per_expert")
    return os.fspath(path)
