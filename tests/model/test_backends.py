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


def test_partial_backend_runs_the_model_with_device_fallback(text_checkpoint, gen, monkeypatch):
    """Ascend C implements only the decode-path ops: the model runs those on it
    (through the CPU stand-in here) and the rest on the device default, with the
    torch backend's greedy tokens."""
    from qwen_ops.model.backends import backend_chooser
    from qwen_ops.ops import _backend

    assert "ascendc" in ops.available_backends(), "the Ascend C kernels are built into qwen_ops._C everywhere"
    choose = backend_chooser("ascendc")
    assert choose("paged_decode_attention") == "ascendc" and choose("mixed_attention") is None
    prompts = [torch.randint(1, 256, (n,), generator=gen).tolist() for n in (3, 9)]
    runs, used = {}, set()
    load = _backend._load

    def recording_load(target):
        implementation = load(target)

        def run(**arguments):
            used.add(target)
            return implementation(**arguments)

        return run

    for backend in ("torch", "ascendc"):
        llm = LLM(text_checkpoint, num_blocks=32, max_num_seqs=2, max_num_batched_tokens=6, backend=backend)
        if backend == "ascendc":
            monkeypatch.setattr(_backend, "_load", recording_load)
        runs[backend] = [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY)]
    assert "mixed_attention" in llm.backend_summary()
    # The decode-path Ascend C kernels really ran; the other ops used torch.
    assert {f"ascendc_backend:{op}" for op in ("reshape_and_cache", "causal_conv1d_update",
                                               "fused_recurrent_gated_delta_rule")} <= used
    assert "attention.reference:mixed_attention" in used
    assert runs["ascendc"] == runs["torch"]
