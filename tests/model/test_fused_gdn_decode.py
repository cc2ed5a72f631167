"""The model's GDN decode rows through one ``gdn_decode_step`` call per layer (``model/network/gdn.py``).

The fused path must be what a CPU float32 step on the torch backend really takes (decode-only and mixed
steps), give the op-by-op composition's tokens and logprobs, and stay off where another backend serves the ops.
"""
import pytest
import torch

from qwen_ops import LLM, SamplingParams
from qwen_ops.model.network import gdn
from qwen_ops.ops.gdn.decode_step_op import gdn_decode_step_available

try:
    from qwen_ops import _C  # noqa: F401
except ImportError:  # a built extension without the kernel fails test_the_kernel_is_built instead
    pytest.skip("qwen_ops._C is not built (QWEN_OPS_BUILD_EXT=0)", allow_module_level=True)

PARAMS = SamplingParams(max_tokens=8, temperature=0, logprobs=3, detokenize=False)


def test_the_kernel_is_built():
    assert gdn_decode_step_available(), "qwen_ops._C is built but has no gdn_decode_step"


def _prompts(gen, lengths):
    return [torch.randint(1, 256, (n,), generator=gen).tolist() for n in lengths]


def _run(checkpoint, prompts, fused, monkeypatch, **engine):
    calls = []
    real = gdn.gdn_decode_step

    def counting(mixed_qkv, *args):
        calls.append(mixed_qkv.shape[0])
        return real(mixed_qkv, *args)

    monkeypatch.setattr(gdn, "gdn_decode_step", counting)
    previous = gdn.set_fused_gdn_decode(fused)
    try:
        outs = LLM(checkpoint, num_blocks=64, max_num_seqs=4, **engine).generate(prompts, PARAMS)
    finally:
        gdn.set_fused_gdn_decode(previous)
    return [o.outputs[0] for o in outs], calls


@pytest.mark.parametrize("max_num_batched_tokens", [8192, 8], ids=["decode_steps", "mixed_steps"])
def test_fused_decode_matches_the_ops_one_by_one(text_checkpoint, gen, monkeypatch, max_num_batched_tokens):
    prompts = _prompts(gen, [9, 21, 4])
    fused, calls = _run(text_checkpoint, prompts, True, monkeypatch, max_num_batched_tokens=max_num_batched_tokens)
    composed, none = _run(text_checkpoint, prompts, False, monkeypatch,
                          max_num_batched_tokens=max_num_batched_tokens)
    assert calls and not none  # the switch decides, and a real step takes the fused path
    assert [o.token_ids for o in fused] == [o.token_ids for o in composed]
    for ours, theirs in zip(fused, composed):
        for a, b in zip(ours.logprobs, theirs.logprobs):
            common = sorted(set(a) & set(b))
            # float32 rounding of the order of sums over a head; logprobs of order 1-10
            torch.testing.assert_close(torch.tensor([a[t] for t in common]), torch.tensor([b[t] for t in common]),
                                       atol=1e-4, rtol=0)


def test_another_backend_keeps_the_ops(text_checkpoint, gen, monkeypatch):
    """With the ops on the ascendc backend (the CPU stand-in) the fused torch-path kernel must not stand in for them."""
    _, calls = _run(text_checkpoint, _prompts(gen, [5]), True, monkeypatch, backend="ascendc")
    assert not calls
