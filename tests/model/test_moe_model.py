"""Qwen3.5 MoE outside the parity tests: config parsing, both weight layouts and their errors, the router,
the memory planner's weight count, and ``qwen-generate`` on a tiny MoE checkpoint."""
import json
import os

import pytest
import torch
from checkpoints import TINY_MOE_TEXT, fuse_experts_file
from safetensors.torch import load_file, save_file
from test_errors import copy_checkpoint
from test_generate_cli import byte_level_tokenizer

from qwen_ops import LLM
from qwen_ops.model.loading.config import ConfigError, Qwen35Config
from qwen_ops.model.worker.kv_cache import expert_bytes_per_layer, weight_bytes
from qwen_ops.model.network.moe import route
from qwen_ops.model.loading.weights import WeightsError, load_weights

MOE = {**TINY_MOE_TEXT, "model_type": "qwen3_5_moe_text"}


# ----------------------------------------------------------------------------- config


def test_config_of_both_model_types():
    text = Qwen35Config.from_dict(MOE)
    assert text.is_moe and not text.multimodal and text.intermediate_size == 0
    assert (text.num_experts, text.num_experts_per_tok, text.moe_intermediate_size,
            text.shared_expert_intermediate_size) == (8, 2, 32, 48)
    mm = Qwen35Config.from_dict({"model_type": "qwen3_5_moe", "text_config": MOE})
    assert mm.is_moe and mm.multimodal and mm.num_experts == 8
    assert not Qwen35Config.from_dict({**TINY_MOE_TEXT, "model_type": "qwen3_5_text",
                                       "intermediate_size": 64}).is_moe


@pytest.mark.parametrize("change,match", [
    ({"num_experts": None}, "config.json is missing 'num_experts'"),
    ({"num_experts_per_tok": 9}, r"'num_experts_per_tok' \(9\) must be <= 'num_experts' \(8\)"),
    ({"moe_intermediate_size": 0}, "'moe_intermediate_size' must be a positive int"),
])
def test_bad_moe_config(change, match):
    raw = {k: v for k, v in {**MOE, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=match):
        Qwen35Config.from_dict(raw)


def test_multimodal_moe_needs_moe_text_config():
    with pytest.raises(ConfigError, match="text_config.model_type must be 'qwen3_5_moe_text'"):
        Qwen35Config.from_dict({"model_type": "qwen3_5_moe", "text_config": {**MOE, "model_type": "qwen3_5_text"}})


# ----------------------------------------------------------------------------- weights


def test_both_layouts_load_the_same_fused_tensors(moe_text_checkpoint, tmp_path):
    fused_dir = copy_checkpoint(moe_text_checkpoint, tmp_path)
    fuse_experts_file(os.path.join(fused_dir, "model.safetensors"))
    config = Qwen35Config.from_pretrained(moe_text_checkpoint)
    per_expert, _ = load_weights(moe_text_checkpoint, config, torch.float32)
    fused, _ = load_weights(fused_dir, config, torch.float32)
    assert set(per_expert) == set(fused)
    for name in per_expert:
        assert torch.equal(per_expert[name], fused[name]), name
    # gate rows first, then up rows, as transformers' gate_up_proj
    raw = load_file(os.path.join(moe_text_checkpoint, "model.safetensors"))
    w13 = per_expert["layers.2.mlp.experts.gate_up_proj"]
    assert torch.equal(w13[5, :32], raw["model.layers.2.mlp.experts.5.gate_proj.weight"])
    assert torch.equal(w13[5, 32:], raw["model.layers.2.mlp.experts.5.up_proj.weight"])


def _edit_tensors(path, edit):
    file = os.path.join(path, "model.safetensors")
    tensors = load_file(file)
    edit(tensors)
    save_file(tensors, file, metadata={"format": "pt"})


@pytest.mark.parametrize("edit,match", [
    (lambda t: t.pop("model.layers.1.mlp.experts.3.up_proj.weight"),
     r"missing 1 per-expert tensor\(s\) of 'layers.1.mlp.experts.gate_up_proj', e.g. expert 3 up_proj"),
    (lambda t: t.__setitem__("model.layers.1.mlp.experts.3.down_proj.weight", torch.zeros(64, 31)),
     r"'model.layers.1.mlp.experts.3.down_proj.weight'.*shape \(64, 31\), expected \(64, 32\)"),
    (lambda t: t.__setitem__("model.layers.0.mlp.experts.8.gate_proj.weight", torch.zeros(32, 64)),
     "unexpected tensor.*experts.8.gate_proj"),
    (lambda t: t.__setitem__("model.layers.0.mlp.experts.gate_up_proj", torch.zeros(8, 64, 64)),
     "'layers.0.mlp.experts.gate_up_proj' both fused and as per-expert tensors"),
    (lambda t: t.pop("model.layers.3.mlp.shared_expert_gate.weight"), "missing 1 tensor.*shared_expert_gate"),
])
def test_bad_expert_tensors_are_named(moe_text_checkpoint, tmp_path, edit, match):
    _edit_tensors(copy_checkpoint(moe_text_checkpoint, tmp_path), edit)
    with pytest.raises(WeightsError, match=match):
        LLM(tmp_path)


def test_fused_layout_with_wrong_shape_is_named(moe_text_checkpoint, tmp_path):
    copy_checkpoint(moe_text_checkpoint, tmp_path)
    fuse_experts_file(os.path.join(tmp_path, "model.safetensors"))
    _edit_tensors(tmp_path, lambda t: t.__setitem__("model.layers.0.mlp.experts.down_proj", torch.zeros(8, 64, 16)))
    with pytest.raises(WeightsError, match=r"'model.layers.0.mlp.experts.down_proj'.*expected \(8, 64, 32\)"):
        LLM(tmp_path)


# ----------------------------------------------------------------------------- router


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_router_is_transformers_router(gen, dtype):
    """Same indices, same (renormalised, rounded) weights as ``Qwen3_5MoeTopKRouter`` on the same inputs."""
    from transformers import Qwen3_5MoeTextConfig
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeTopKRouter

    hf = Qwen3_5MoeTopKRouter(Qwen3_5MoeTextConfig(**{**TINY_MOE_TEXT, "num_experts": 16,
                                                      "num_experts_per_tok": 5})).to(dtype)
    with torch.no_grad():
        hf.weight.copy_(torch.randn(16, 64, generator=gen))
    x = torch.randn(50, 64, generator=gen).to(dtype)
    _, hf_weights, hf_ids = hf(x)
    weights, ids = route(x, hf.weight.detach(), 5)
    assert torch.equal(ids, hf_ids)
    assert weights.dtype == hf_weights.dtype == dtype
    assert torch.equal(weights, hf_weights.detach())
    torch.testing.assert_close(weights.float().sum(-1), torch.ones(50), atol=1e-2 if dtype != torch.float32
                               else 1e-6, rtol=0)


# ----------------------------------------------------------------------------- memory planner


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_planner_counts_the_experts(moe_text_checkpoint, dtype):
    llm = LLM(moe_text_checkpoint, dtype=dtype, num_blocks=16, max_num_seqs=2)
    torch_dtype = llm.dtype
    weights, _ = load_weights(moe_text_checkpoint, llm.config, torch_dtype)
    assert weight_bytes(llm.config, torch_dtype) == sum(t.numel() * t.element_size() for t in weights.values())
    experts = expert_bytes_per_layer(llm.config, torch_dtype)
    assert experts == 8 * 3 * 32 * 64 * torch_dtype.itemsize
    # The experts are most of this model: a planner that forgot them would be far off.
    assert weight_bytes(llm.config, torch_dtype) > 4 * experts > 0


def test_dense_model_has_no_expert_bytes(text_checkpoint):
    config = Qwen35Config.from_pretrained(text_checkpoint)
    assert expert_bytes_per_layer(config, torch.float32) == 0
    weights, _ = load_weights(text_checkpoint, config, torch.float32)
    assert weight_bytes(config, torch.float32) == sum(t.numel() * t.element_size() for t in weights.values())


# ----------------------------------------------------------------------------- qwen-generate


def test_qwen_generate_runs_on_a_moe_checkpoint(moe_text_checkpoint, tmp_path, capsys):
    from qwen_ops.model.engine.generate import main

    model_dir = copy_checkpoint(moe_text_checkpoint, tmp_path)
    byte_level_tokenizer(model_dir)
    with open(os.path.join(model_dir, "config.json")) as f:
        assert json.load(f)["model_type"] == "qwen3_5_moe_text"
    assert main(["--model", str(model_dir), "--prompt", "Hi there", "--max-tokens", "6", "--temperature", "0",
                 "--num-blocks", "16", "--kv-cache-dtype", "int8"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("Hi there")
    assert "generated tokens: 6" in err and "INT8 KV scales: calibrated" in err


def test_tokens_are_sorted_by_expert_once_per_layer(moe_text_checkpoint, gen, monkeypatch):
    """One ``sort_by_expert`` per MoE layer and step, whatever the number of tokens (no per-token loop)."""
    from qwen_ops.ops.moe import reference

    llm = LLM(moe_text_checkpoint, num_blocks=16, max_num_seqs=2)
    calls = []
    sort = reference.sort_by_expert
    monkeypatch.setattr(reference, "sort_by_expert", lambda ids, e: calls.append(ids.shape) or sort(ids, e))
    llm.score(torch.randint(1, 256, (40,), generator=gen).tolist())
    assert calls == [(40, 2)] * llm.config.num_hidden_layers
