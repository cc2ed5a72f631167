"""A MoE checkpoint on every backend that can serve a step here: Triton (interpreter) gives the torch
backend's greedy tokens; Ascend C, which has no expert kernel, runs the experts on the device default."""
import pytest
import torch

import qwen_ops.ops as ops
from qwen_ops import LLM, SamplingParams
from qwen_ops.model.network.backends import backend_chooser, describe

GREEDY = SamplingParams(max_tokens=4, temperature=0, logprobs=2, detokenize=False)


@pytest.mark.skipif("triton" not in ops.available_backends(), reason="no Triton package installed")
def test_triton_backend_matches_torch(moe_text_checkpoint, gen):
    prompts = [torch.randint(1, 256, (n,), generator=gen).tolist() for n in (3, 9)]
    runs = {}
    for backend in ("torch", "triton"):
        llm = LLM(moe_text_checkpoint, num_blocks=32, max_num_seqs=2, max_num_batched_tokens=6, backend=backend)
        assert llm.model.layers[0][3].backend == backend  # the MoE block asks for it
        runs[backend] = llm.generate(prompts, GREEDY)
        assert any(s.num_decodes and s.num_prefills for s in llm.step_stats)
    for ref, tri in zip(runs["torch"], runs["triton"]):
        assert tri.outputs[0].token_ids == ref.outputs[0].token_ids
        for ref_lp, tri_lp in zip(ref.outputs[0].logprobs, tri.outputs[0].logprobs):
            assert ref_lp.keys() == tri_lp.keys()
            for token in ref_lp:
                assert tri_lp[token] == pytest.approx(ref_lp[token], abs=1e-3)


def test_ascendc_runs_the_experts_on_the_device_default(moe_text_checkpoint, gen):
    assert backend_chooser("ascendc")("fused_experts") is None
    assert "fused_experts" in describe("ascendc", is_moe=True).partition("device default for ")[2]
    assert "fused_experts" not in describe("ascendc")
    prompts = [torch.randint(1, 256, (n,), generator=gen).tolist() for n in (3, 9)]
    runs = {b: [o.outputs[0].token_ids for o in LLM(moe_text_checkpoint, num_blocks=32, max_num_seqs=2,
                                                    max_num_batched_tokens=6, backend=b).generate(prompts, GREEDY)]
            for b in ("torch", "ascendc")}
    assert runs["ascendc"] == runs["torch"]
