"""The model's GDN decode rows through one ``gdn_decode_step`` call per layer (``model/network/gdn.py``).

The fused path must be what a CPU float32 or bfloat16 step on the torch backend really takes (decode-only and
mixed steps), give the op-by-op composition's tokens and logprobs, and stay off where a backend that serves the
three decode ops does not serve the fused op. On the triton backend (its interpreter here) and the ascendc
backend (the CPU stand-in) the one-launch kernels serve it, speculative verify rows included: greedy tokens
equal the torch backend's.
"""
import pytest
import torch

from qwen_ops import LLM, SamplingParams
from qwen_ops.model.network import gdn
from qwen_ops.ops._backend import IMPLEMENTATIONS, available_backends
from qwen_ops.ops.gdn.decode_step.op import gdn_decode_step_available

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

    def counting(mixed_qkv, *args, **kwargs):
        calls.append((mixed_qkv.shape[0], kwargs.get("backend"), kwargs.get("num_accepted_tokens") is not None))
        return real(mixed_qkv, *args, **kwargs)

    monkeypatch.setattr(gdn, "gdn_decode_step", counting)
    previous = gdn.set_fused_gdn_decode(fused)
    try:
        outs = LLM(checkpoint, num_blocks=64, max_num_seqs=4, **engine).generate(prompts, PARAMS)
    finally:
        gdn.set_fused_gdn_decode(previous)
    return [o.outputs[0] for o in outs], calls


def _assert_same_tokens_and_logprobs(fused, composed, atol):
    assert [o.token_ids for o in fused] == [o.token_ids for o in composed]
    for ours, theirs in zip(fused, composed):
        for a, b in zip(ours.logprobs, theirs.logprobs):
            common = sorted(set(a) & set(b))
            torch.testing.assert_close(torch.tensor([a[t] for t in common]), torch.tensor([b[t] for t in common]),
                                       atol=atol, rtol=0)


@pytest.mark.parametrize("max_num_batched_tokens", [8192, 8], ids=["decode_steps", "mixed_steps"])
def test_fused_decode_matches_the_ops_one_by_one(text_checkpoint, gen, monkeypatch, max_num_batched_tokens):
    prompts = _prompts(gen, [9, 21, 4])
    fused, calls = _run(text_checkpoint, prompts, True, monkeypatch, max_num_batched_tokens=max_num_batched_tokens)
    composed, none = _run(text_checkpoint, prompts, False, monkeypatch,
                          max_num_batched_tokens=max_num_batched_tokens)
    assert calls and not none  # the switch decides, and a real step takes the fused path
    # float32 rounding of the order of sums over a head; logprobs of order 1-10
    _assert_same_tokens_and_logprobs(fused, composed, atol=1e-4)


def test_bfloat16_decode_takes_the_fused_kernel_and_the_ops_tokens(text_checkpoint, gen, monkeypatch):
    """bfloat16 on the torch backend: the C++ kernel rounds where the ops return, so the greedy tokens are the
    op-by-op path's and the logprobs agree to a bfloat16 rounding tipped the other way."""
    prompts = _prompts(gen, [9, 21, 4])
    fused, calls = _run(text_checkpoint, prompts, True, monkeypatch, dtype="bfloat16")
    composed, none = _run(text_checkpoint, prompts, False, monkeypatch, dtype="bfloat16")
    assert calls and not none and {backend for _, backend, _ in calls} == {"torch"}
    # measured equal on this draw; a bfloat16 rounding tipped the other way moves a logit by 2**-7 relative
    _assert_same_tokens_and_logprobs(fused, composed, atol=5e-2)


FUSED_BACKENDS = [b for b in ("triton", "ascendc") if b in IMPLEMENTATIONS["gdn_decode_step"]
                  and b in available_backends()]


@pytest.mark.parametrize("backend", FUSED_BACKENDS)
def test_one_launch_backends_give_the_torch_greedy_tokens(text_checkpoint, gen, monkeypatch, backend):
    """Decode and mixed steps (max_num_batched_tokens 8: chunked prefills beside decode rows)."""
    prompts = _prompts(gen, [9, 4])
    params = SamplingParams(max_tokens=5, temperature=0, detokenize=False)
    want = [o.outputs[0].token_ids for o in LLM(text_checkpoint, num_blocks=64, max_num_seqs=4,
                                                max_num_batched_tokens=8).generate(prompts, params)]
    calls = []
    real = gdn.gdn_decode_step
    monkeypatch.setattr(gdn, "gdn_decode_step", lambda *a, **kw: calls.append(kw["backend"]) or real(*a, **kw))
    got = LLM(text_checkpoint, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=8,
              backend=backend).generate(prompts, params)
    assert calls and set(calls) == {backend}
    assert [o.outputs[0].token_ids for o in got] == want


@pytest.mark.parametrize("backend", FUSED_BACKENDS)
def test_one_launch_backends_serve_speculative_verify_rows(text_mtp_checkpoint, gen, monkeypatch, backend):
    """MTP with 2 drafts: verify rows of 1 + k tokens go through the fused op's speculative form."""
    prompts = _prompts(gen, [9, 5])
    params = SamplingParams(max_tokens=4, temperature=0, detokenize=False)
    engine = dict(num_blocks=32, block_size=4, max_num_seqs=3, max_num_batched_tokens=8)
    want = [o.outputs[0].token_ids for o in LLM(text_mtp_checkpoint, **engine).generate(prompts, params)]
    spec_calls = []
    real = gdn.gdn_decode_step
    monkeypatch.setattr(gdn, "gdn_decode_step", lambda *a, **kw: spec_calls.append(
        kw.get("num_accepted_tokens") is not None) or real(*a, **kw))
    got = LLM(text_mtp_checkpoint, speculative_config={"method": "mtp", "num_speculative_tokens": 2},
              backend=backend, **engine).generate(prompts, params)
    assert any(spec_calls)
    assert [o.outputs[0].token_ids for o in got] == want


def test_a_backend_without_the_fused_op_keeps_the_ops(text_checkpoint, gen, monkeypatch):
    """With the ops on a backend that lacks ``gdn_decode_step`` the decode rows run op by op."""
    served = dict(IMPLEMENTATIONS["gdn_decode_step"])
    served.pop("ascendc", None)
    monkeypatch.setitem(IMPLEMENTATIONS, "gdn_decode_step", served)
    _, calls = _run(text_checkpoint, _prompts(gen, [5]), True, monkeypatch, backend="ascendc")
    assert not calls
