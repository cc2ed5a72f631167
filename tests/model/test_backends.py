"""The model runs on every kernel backend that can serve a whole step here.

The Triton kernels run under the CPU interpreter (tests/conftest.py sets
TRITON_INTERPRET=1): a few prompts and tokens keep this fast, while still
mixing decode rows with prefill chunks in one step.
"""
import pytest
import torch

import qwen_ops.ops as ops
from qwen_ops import LLM, SamplingParams

GREEDY = SamplingParams(max_tokens=4, temperature=0, logprobs=2, detokenize=False)


@pytest.mark.skipif("triton" not in ops.available_backends(), reason="no Triton package installed")
def test_triton_backend_matches_torch(text_checkpoint, gen):
    prompts = [torch.randint(1, 256, (n,), generator=gen).tolist() for n in (3, 9)]
    runs = {}
    for backend in ("torch", "triton"):
        llm = LLM(text_checkpoint, num_blocks=32, max_num_seqs=2, max_num_batched_tokens=6, backend=backend)
        runs[backend] = llm.generate(prompts, GREEDY)
        # Chunked prefill next to a decode: the mixed path was exercised.
        assert any(s.num_decodes and s.num_prefills for s in llm.step_stats)
    for ref, tri in zip(runs["torch"], runs["triton"]):
        assert tri.outputs[0].token_ids == ref.outputs[0].token_ids
        for ref_lp, tri_lp in zip(ref.outputs[0].logprobs, tri.outputs[0].logprobs):
            assert ref_lp.keys() == tri_lp.keys()
            for token in ref_lp:
                assert tri_lp[token] == pytest.approx(ref_lp[token], abs=1e-3)
