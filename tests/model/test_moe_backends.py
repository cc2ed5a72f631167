"""A MoE checkpoint on every backend that can serve a step here: Triton (interpreter) and Ascend C (the CPU
stand-in, experts included) give the torch backend's greedy tokens; on Ascend C also transformers' logits."""
import pytest
import torch

import qwen_ops.ops as ops
from qwen_ops import LLM, SamplingParams
from qwen_ops.model.network.backends import backend_chooser, describe

GREEDY = SamplingParams(max_tokens=4, temperature=0, logprobs=2, detokenize=False)


def assert_same_greedy(reference, outputs, *, abs_logprob):
    """The same greedy tokens and top logprob tokens as the reference run, logprobs within ``abs_logprob``."""
    for ref, out in zip(reference, outputs):
        assert out.outputs[0].token_ids == ref.outputs[0].token_ids
        for ref_lp, out_lp in zip(ref.outputs[0].logprobs, out.outputs[0].logprobs):
            assert ref_lp.keys() == out_lp.keys()
            for token in ref_lp:
                assert out_lp[token] == pytest.approx(ref_lp[token], abs=abs_logprob)


@pytest.mark.skipif("triton" not in ops.available_backends(), reason="no Triton package installed")
def test_triton_backend_matches_torch(moe_text_checkpoint, gen):
    prompts = [torch.randint(1, 256, (n,), generator=gen).tolist() for n in (3, 9)]
    runs = {}
    for backend in ("torch", "triton"):
        llm = LLM(moe_text_checkpoint, num_blocks=32, max_num_seqs=2, max_num_batched_tokens=6, backend=backend)
        assert llm.model.layers[0][3].backend == backend  # the MoE block asks for it
        runs[backend] = llm.generate(prompts, GREEDY)
        assert any(s.num_decodes and s.num_prefills for s in llm.step_stats)
    assert_same_greedy(runs["torch"], runs["triton"], abs_logprob=1e-3)


def test_ascendc_serves_every_op_of_a_moe_model(moe_text_checkpoint, gen):
    """The experts run on the Ascend C kernel (the stand-in here): same greedy tokens as torch, logprobs within
    float32 rounding (the kernels sum in another order than torch)."""
    assert backend_chooser("ascendc")("fused_experts") == "ascendc"
    assert describe("ascendc", is_moe=True) == "backend: ascendc for every op"
    prompts = [torch.randint(1, 256, (n,), generator=gen).tolist() for n in (3, 9)]
    runs = {}
    for backend in ("torch", "ascendc"):
        llm = LLM(moe_text_checkpoint, num_blocks=32, max_num_seqs=2, max_num_batched_tokens=6, backend=backend)
        assert llm.model.layers[0][3].backend == backend
        runs[backend] = llm.generate(prompts, GREEDY)
    assert llm.backend_summary() == "backend: ascendc for every op"
    assert_same_greedy(runs["torch"], runs["ascendc"], abs_logprob=1e-4)


@pytest.mark.parametrize("head_dim", [16, 24, 128])
def test_ascendc_moe_parity_with_transformers(tmp_path, gen, head_dim):
    """A MoE checkpoint (GDN key/value head dim 16, 24 -- padded to the cube tile inside the chunk kernel -- or
    128) on backend="ascendc" against transformers: prompt logits and greedy tokens, within the dense parity
    tolerance (float32). The 70-token prompt spans more than one 64-token GDN chunk."""
    from checkpoints import hf_greedy, hf_moe_model, save_moe_checkpoint
    from tolerances import MODEL_VS_TRANSFORMERS, tol

    path = save_moe_checkpoint(tmp_path / "moe", seed=5, linear_key_head_dim=head_dim,
                               linear_value_head_dim=head_dim)
    hf = hf_moe_model(path)
    prompt = torch.randint(1, 256, (70,), generator=gen).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([prompt])).logits[0].float()
    ref_tokens, _ = hf_greedy(hf, prompt, 5)
    llm = LLM(path, num_blocks=32, max_num_seqs=2, backend="ascendc")
    assert llm.backend_summary() == "backend: ascendc for every op"
    torch.testing.assert_close(llm.score(prompt), ref, **tol(MODEL_VS_TRANSFORMERS, torch.float32))
    out = llm.generate([prompt], SamplingParams(max_tokens=5, temperature=0, detokenize=False))[0].outputs[0]
    assert out.token_ids == ref_tokens


def test_expert_sizes_the_ascendc_kernel_cannot_hold_are_refused_when_the_layer_is_built():
    """A MoE layer whose hidden size the Ascend C expert kernel cannot hold is refused at construction (naming
    the op and the limit), not at its first forward; Qwen3.5 MoE's real sizes pass; torch has no such limit."""
    from types import SimpleNamespace

    from qwen_ops.model.network.moe import SparseMoeBlock
    from qwen_ops.ops import BackendError, ascendc_backend

    for hidden, inter in ((2048, 512), (4096, 1024)):  # 35B-A3B's and a wider MoE's expert shapes
        ascendc_backend.check_fused_experts(hidden=hidden, inter=inter, dtype=torch.bfloat16)
        ascendc_backend.check_fused_experts(hidden=hidden, inter=inter, dtype=torch.float32)
    h, i, e, m = 9000, 8, 2, "layers.0.mlp."
    weights = {m + "gate.weight": torch.zeros(e, h), m + "experts.gate_up_proj": torch.zeros(e, 2 * i, h),
               m + "experts.down_proj": torch.zeros(e, h, i), m + "shared_expert.gate_proj.weight": torch.zeros(i, h),
               m + "shared_expert.up_proj.weight": torch.zeros(i, h),
               m + "shared_expert.down_proj.weight": torch.zeros(h, i), m + "shared_expert_gate.weight": torch.zeros(1, h)}
    config = SimpleNamespace(num_experts_per_tok=1)
    with pytest.raises(BackendError, match=r"fused_experts: backend 'ascendc' keeps 16 rows .*max\(H, I\) = 9000"):
        SparseMoeBlock(config, 0, weights, "ascendc")
    assert SparseMoeBlock(config, 0, weights, "torch").backend == "torch"
