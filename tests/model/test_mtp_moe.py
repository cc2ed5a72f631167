"""MTP speculative decoding on a Qwen3.5 MoE checkpoint: the head's MoE layer loads (both expert layouts) and runs
as transformers' MoE block, and greedy tokens with drafts equal plain greedy."""
import os

import pytest
import torch
from checkpoints import TINY_MOE_TEXT, save_moe_checkpoint_with_mtp
from safetensors.torch import load_file, save_file

from qwen_ops import LLM, SamplingParams
from qwen_ops.model.loading.config import Qwen35Config
from qwen_ops.model.network.moe import SparseMoeBlock
from qwen_ops.model.network.mtp import Qwen35MTP, load_mtp_weights
from qwen_ops.model.loading.weights import WeightsError

GREEDY = SamplingParams(max_tokens=10, temperature=0, detokenize=False)
ENGINE = dict(num_blocks=32, block_size=4, max_num_seqs=3, max_num_batched_tokens=8)  # chunked prefills
FUSED = ("mtp.layers.0.mlp.experts.gate_up_proj", "mtp.layers.0.mlp.experts.down_proj")


@pytest.fixture(scope="module")
def moe_mtp_checkpoints(tmp_path_factory):
    """The same random MoE target and MTP head (seed 3), experts per expert and fused."""
    return {layout: save_moe_checkpoint_with_mtp(tmp_path_factory.mktemp(f"qwen35_moe_mtp_{layout}"), seed=3,
                                                 layout=layout)
            for layout in ("per_expert", "fused")}


def test_moe_drafter_loads_both_layouts_and_runs_transformers_moe_block(moe_mtp_checkpoints):
    from transformers import Qwen3_5MoeTextConfig
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeDecoderLayer

    per_expert, fused = moe_mtp_checkpoints["per_expert"], moe_mtp_checkpoints["fused"]
    saved = load_file(os.path.join(per_expert, "model.safetensors"))
    assert "mtp.layers.0.mlp.experts.7.down_proj.weight" in saved and FUSED[0] not in saved
    config = Qwen35Config.from_pretrained(per_expert)
    weights = load_mtp_weights(per_expert, config, torch.float32)
    fused_weights = load_mtp_weights(fused, config, torch.float32)
    assert set(weights) == set(fused_weights) and set(FUSED) <= set(weights)
    for name, t in fused_weights.items():
        assert torch.equal(weights[name], t), name

    embed = torch.zeros(config.vocab_size, config.hidden_size)
    drafter = Qwen35MTP(config, weights, embed, embed)
    block = drafter.layers[0][3].__self__
    assert isinstance(block, SparseMoeBlock) and block.layer == config.num_hidden_layers
    # transformers' own MoE layer with the same (fused, as it keeps them) weights.
    hf = Qwen3_5MoeDecoderLayer(Qwen3_5MoeTextConfig(**TINY_MOE_TEXT), 3).eval()
    prefix = "mtp.layers.0."
    hf.load_state_dict({k[len(prefix):]: v for k, v in fused_weights.items() if k.startswith(prefix)})
    x = torch.randn(6, config.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = hf.mlp(x[None])[0]
    # float32 on both sides; only the summation order of the expert matmuls differs.
    torch.testing.assert_close(drafter.layers[0][3](x), want, rtol=1e-5, atol=1e-5)


def test_incomplete_per_expert_mtp_weights_are_named(moe_mtp_checkpoints, tmp_path):
    src = moe_mtp_checkpoints["per_expert"]
    tensors = load_file(os.path.join(src, "model.safetensors"))
    del tensors["mtp.layers.0.mlp.experts.5.up_proj.weight"]
    save_file(tensors, os.fspath(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src, "config.json")) as f:
        (tmp_path / "config.json").write_text(f.read())
    with pytest.raises(WeightsError, match=r"missing 1 per-expert tensor.*mtp\.layers\.0\.mlp\.experts\.gate_up_proj"
                                           r".*expert 5 up_proj"):
        load_mtp_weights(os.fspath(tmp_path), Qwen35Config.from_pretrained(src), torch.float32)


def test_moe_greedy_with_mtp_equals_plain_greedy(moe_mtp_checkpoints):
    path = moe_mtp_checkpoints["per_expert"]
    gen = torch.Generator().manual_seed(11)
    batch = [torch.randint(1, 256, (n,), generator=gen).tolist() for n in (9, 5, 13)]
    want = [o.outputs[0].token_ids for o in LLM(path, **ENGINE).generate(batch, GREEDY)]
    llm = LLM(path, speculative_config={"method": "mtp", "num_speculative_tokens": 2}, **ENGINE)
    outputs = llm.generate(batch, GREEDY)
    assert [o.outputs[0].token_ids for o in outputs] == want
    assert all(o.metrics["spec_num_drafts"] > 0 for o in outputs)
