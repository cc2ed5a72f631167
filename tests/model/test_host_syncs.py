"""A decode step makes no host-device round trip that grows with the number of layers.

The engine checks a step's metadata once on the host and derives the per-step
tables there (``StepMetadata.validate``, ``StepInputs.build``), and the ops
run inside ``trusted_metadata()``. Scalar reads of tensor data (``aten::item``
and ``aten::_local_scalar_dense``, a device synchronisation each on an
accelerator) are counted under ``torch.profiler`` in decode steps on the
Triton backend (the CPU interpreter here) for a 4-layer and a 12-layer model:
the counts must be equal (40 and 40 here; 76 and 204 before the engine
checked the step once, at 3269faf, where every op checked values). To keep this cheap, the prompts' prefills
and the warm-up run on the torch backend and only the counted decode steps on
Triton: the interpreter takes over a second per chunked GDN prefill.
"""
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import qwen_ops.ops as ops
from checkpoints import TINY_TEXT, save_text_checkpoint
from qwen_ops import LLM, SamplingParams
from qwen_ops.model.network.backends import backend_chooser

SYNC_EVENTS = ("aten::item", "aten::_local_scalar_dense")
DECODE_STEPS = 2


def switch_backend(llm: LLM, backend: str) -> None:
    """Run every op of the model on ``backend`` from now on (as ``LLM(backend=...)`` would have)."""
    for mixer, *_ in llm.model.layers:
        mixer.backend = backend_chooser(backend)
    llm.model_runner.backend = backend


def decode_step_syncs(checkpoint: str, backend: str) -> int:
    llm = LLM(checkpoint, num_blocks=16, max_num_seqs=2, max_model_len=64, backend="torch")
    params = SamplingParams(max_tokens=DECODE_STEPS + 1, temperature=0, ignore_eos=True, detokenize=False)
    for prompt in ([5, 6, 7], [8, 9, 10, 11, 12]):
        llm.add_request(prompt, params)
    llm.step()  # both prompts' prefills
    switch_backend(llm, backend)
    first = len(llm.step_stats)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(DECODE_STEPS):
            assert len(llm.step()) == 2  # both requests got a token
    steps = llm.step_stats[first:]
    assert len(steps) == DECODE_STEPS and all(s.num_decodes == 2 and s.num_prefills == 0 for s in steps)
    return sum(e.count for e in prof.key_averages() if e.key in SYNC_EVENTS)


@pytest.mark.skipif("triton" not in ops.available_backends(), reason="no Triton package installed")
def test_decode_step_syncs_do_not_grow_with_layers(tmp_path):
    four = save_text_checkpoint(tmp_path / "four", seed=3)
    twelve = save_text_checkpoint(tmp_path / "twelve", seed=3, num_hidden_layers=12,
                                  layer_types=TINY_TEXT["layer_types"] * 3)
    counts = {layers: decode_step_syncs(path, "triton") for layers, path in ((4, four), (12, twelve))}
    assert counts[4] == counts[12], counts
