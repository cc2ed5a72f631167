"""The model on ``backend="ascendc"`` (the Ascend C kernels through the CPU stand-in) against transformers,
on tiny checkpoints whose GDN head dims are 16, 24 (not a multiple of the cube tile: padded inside the
kernels), 128 (Qwen3.5's) and a mixed Dk != Dv.

The prompt spans more than one GDN chunk of 64, so prefill runs the chunk kernel with a ragged last chunk
and decode, on the state it left, the fused decode-step kernel and (op by op) the recurrent kernel. Tolerance: ``MODEL_VS_TRANSFORMERS`` (float32 model;
the kernels sum in another order than torch: float32 rounding only).
"""
import pytest
import torch
from backend_calls import record_backend_calls
from checkpoints import hf_greedy, hf_model, save_text_checkpoint
from test_parity import assert_logprobs_match, hf_logprobs, random_prompt
from tolerances import MODEL_VS_TRANSFORMERS

from qwen_ops import LLM, SamplingParams
from qwen_ops.model.network import gdn

GDN_HEAD_DIMS = [(16, 16), (24, 24), (128, 128), (24, 40)]


@pytest.mark.parametrize("dk,dv", GDN_HEAD_DIMS, ids=[f"dk{a}_dv{b}" for a, b in GDN_HEAD_DIMS])
def test_ascendc_generation_matches_transformers(tmp_path, gen, monkeypatch, dk, dv):
    checkpoint = save_text_checkpoint(tmp_path / "ckpt", seed=2, linear_key_head_dim=dk, linear_value_head_dim=dv)
    prompt = random_prompt(gen, 70)
    hf = hf_model(checkpoint)
    ref_tokens, _ = hf_greedy(hf, prompt, 5)
    atol, _ = MODEL_VS_TRANSFORMERS[torch.float32]
    ref_logprobs = None
    # The decode rows twice: as one gdn_decode_step launch per layer (the default) and op by op (the recurrent
    # kernel); the prompt's 70 tokens go through the chunk kernel both times.
    for fused, decode_kernel in ((True, "gdn_decode_step"), (False, "fused_recurrent_gated_delta_rule")):
        ran = record_backend_calls(monkeypatch)
        previous = gdn.set_fused_gdn_decode(fused)
        try:
            llm = LLM(checkpoint, num_blocks=32, max_num_seqs=2, backend="ascendc")
            out = llm.generate([prompt], SamplingParams(max_tokens=5, logprobs=3, temperature=0, detokenize=False))
        finally:
            gdn.set_fused_gdn_decode(previous)
        out = out[0].outputs[0]
        assert {"ascendc_backend:chunk_gated_delta_rule", f"ascendc_backend:{decode_kernel}"} <= ran
        assert out.token_ids == ref_tokens
        if ref_logprobs is None:
            ref_logprobs = hf_logprobs(hf, prompt + out.token_ids)
        assert_logprobs_match(out, prompt, ref_logprobs, atol)
