"""The model runs on every kernel backend that can serve a whole step here.

The Triton kernels run under the CPU interpreter (tests/conftest.py sets
TRITON_INTERPRET=1): a few prompts and tokens keep this fast, while still
mixing decode rows with prefill chunks in one step.
"""
import pytest
import torch
from backend_calls import record_backend_calls

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
    """The model runs every op Ascend C implements on it (through the CPU stand-in
    here) and the rest on the device default, with the torch backend's greedy
    tokens and logprobs; the start-up summary names exactly the ops that ran on it."""
    from qwen_ops.model.network import gdn
    from qwen_ops.model.network.backends import MODEL_OPS, backend_chooser
    from qwen_ops.ops import _backend

    assert "ascendc" in ops.available_backends(), "the Ascend C kernels are built into qwen_ops._C everywhere"
    choose = backend_chooser("ascendc")
    served = {op for op in MODEL_OPS if "ascendc" in _backend.IMPLEMENTATIONS[op]}
    assert {"causal_conv1d_fn", "fused_gdn_gating", "causal_conv1d_update", "reshape_and_cache",
            "fused_recurrent_gated_delta_rule"} <= served
    assert all(choose(op) == "ascendc" for op in served)
    prompts = [torch.randint(1, 256, (n,), generator=gen).tolist() for n in (3, 9)]
    runs, used = {}, set()
    # Ascend C twice: the decode rows op by op, and as one gdn_decode_step launch per layer (the default).
    for backend, fused in (("torch", True), ("ascendc", False), ("ascendc", True)):
        llm = LLM(text_checkpoint, num_blocks=32, max_num_seqs=2, max_num_batched_tokens=6, backend=backend)
        if (backend, fused) == ("ascendc", False):  # recorded from the first Ascend C run on, over both
            used = record_backend_calls(monkeypatch)
        previous = gdn.set_fused_gdn_decode(fused)
        try:
            runs[backend, fused] = llm.generate(prompts, GREEDY)
        finally:
            gdn.set_fused_gdn_decode(previous)
    # Every op the model called (over both runs), and on which backend: exactly what the summary says.
    ran_on = {target.split(":")[1]: target.split(":")[0] for target in used}
    assert set(ran_on) == set(MODEL_OPS), "MODEL_OPS must list the ops a step calls"
    on_ascendc = {op for op, module in ran_on.items() if module == "ascendc_backend"}
    assert on_ascendc == served
    summary = llm.backend_summary()
    fallback = set(MODEL_OPS) - on_ascendc
    if not fallback:
        assert summary == "backend: ascendc for every op"
    else:
        head, _, tail = summary.partition("; device default for ")
        assert set(head.removeprefix("backend: ascendc for ").split(", ")) == on_ascendc
        assert set(tail.removesuffix(" (not implemented by ascendc)").split(", ")) == fallback
    for ref, asc in [*zip(runs["torch", True], runs["ascendc", False]), *zip(runs["torch", True], runs["ascendc", True])]:
        assert asc.outputs[0].token_ids == ref.outputs[0].token_ids
        for ref_lp, asc_lp in zip(ref.outputs[0].logprobs, asc.outputs[0].logprobs):
            assert ref_lp.keys() == asc_lp.keys()
            for token in ref_lp:
                # float32 model; the kernels sum in another order than torch: float32 rounding only.
                assert asc_lp[token] == pytest.approx(ref_lp[token], abs=1e-4)
