"""The drafts the engine's MTP proposer makes in a run equal the head's drafts computed from scratch.

Greedy tokens are the same whatever the drafts are (a wrong draft is only rejected), so the engine's output
tests cannot see a drafter that feeds the head the wrong token, position or hidden state. Here every draft the
proposer returns during a run with chunked prefills, mixed batches and accepted drafts is compared with the
head run over the whole sequence known at that point (``mtp_reference.reference_drafts``, transformers'
modules). Random weights accept almost no drafts, so the verifier is made to accept a varying number of them
(the logits of the accepted drafts raised): the proposer then places the new token after accepted drafts too.
"""
import pytest
import torch
from mtp_reference import HFReference, reference_drafts

from qwen_ops import LLM, SamplingParams
from qwen_ops.model.network.qwen3_5 import Qwen35ForCausalLM

K = 3  # 3 drafts: the third draft step's input is the second draft, not the first
ENGINE = dict(num_blocks=32, block_size=4, max_num_seqs=3, max_num_batched_tokens=8)  # chunked prefills


def _accepting(verify, counts):
    """``verify`` with the logits raised on the first n drafts of each request (n cycling through ``counts``),
    so that greedy verification accepts exactly those."""
    calls = iter(counts * 1000)

    def forced(logits, out, sampling_req_ids, params, generators):
        logits = logits.clone()
        row = 0
        for request_id in sampling_req_ids:
            drafts = [t for t in out.scheduled_spec_decode_tokens.get(request_id, ()) if t >= 0]
            for i, token in enumerate(drafts[: next(calls)]):
                logits[row + i, token] = 1e9
            row += len(drafts) + 1
        return verify(logits, out, sampling_req_ids, params, generators)

    return forced


def _recording(propose, records):
    """``propose`` that also records, per request that sampled, (tokens known after the step, its drafts)."""

    def recorded(inputs, hidden, out, emitted, *args, **kwargs):
        drafts = propose(inputs, hidden, out, emitted, *args, **kwargs)
        for request_id, tokens in emitted.items():
            scheduled = out.token_ids[request_id]
            known_in_step = len(scheduled) - len(out.scheduled_spec_decode_tokens.get(request_id, ()))
            known = out.num_computed_tokens[request_id] + known_in_step + len(tokens)
            records.append((request_id, known, list(drafts[request_id])))
        return drafts

    return recorded


@pytest.mark.parametrize("counts", [[0, 1, 2, 3], [3, 2]])
def test_every_draft_equals_the_head_over_the_whole_sequence(text_mtp_checkpoint, counts):
    gen = torch.Generator().manual_seed(7)
    prompts = [torch.randint(1, 256, (n,), generator=gen).tolist() for n in (9, 5, 13)]
    llm = LLM(text_mtp_checkpoint, speculative_config={"method": "mtp", "num_speculative_tokens": K}, **ENGINE)
    spec = llm.model_runner.spec
    records = []
    spec.verify = _accepting(spec.verify, counts)
    spec.propose = _recording(spec.propose, records)
    outputs = llm.generate(prompts, SamplingParams(max_tokens=10, temperature=0, detokenize=False))

    sequences = {o.request_id: list(o.prompt_token_ids) + list(o.outputs[0].token_ids) for o in outputs}
    target = Qwen35ForCausalLM.from_pretrained(text_mtp_checkpoint)
    ref = HFReference(text_mtp_checkpoint, layer=0)
    checked = 0
    for request_id, known, drafts in records:
        sequence = sequences[request_id]
        if known > len(sequence):  # the step that finished the request: tokens past max_tokens were dropped
            continue
        assert drafts == reference_drafts(ref, target, sequence[:known], K), (request_id, known)
        checked += 1
    assert checked >= 10
    assert spec.total.num_accepted_tokens > 0  # the proposer ran after steps that accepted drafts
