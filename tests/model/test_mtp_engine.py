"""MTP speculative decoding through ``LLM``: greedy tokens equal plain greedy, in mixed batches and under preemption.

Random weights accept few drafts, so the verification path with accepted drafts
is also driven by drafters that are right (or wrong) by construction: the
engine's MTP proposer replaced by one replaying the plain greedy answer.
"""
import pytest
import torch

import qwen_ops.ops as ops
from qwen_ops import LLM, SamplingParams
from qwen_ops.model.engine.generate import main

GREEDY = SamplingParams(max_tokens=10, temperature=0, detokenize=False)
ENGINE = dict(num_blocks=32, block_size=4, max_num_seqs=3, max_num_batched_tokens=8)  # chunked prefills


def mtp(k):
    return {"method": "mtp", "num_speculative_tokens": k}


def prompts(lengths, seed=11):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 256, (n,), generator=gen).tolist() for n in lengths]


def tokens(outputs):
    return [o.outputs[0].token_ids for o in outputs]


@pytest.fixture(scope="module")
def batch():
    return prompts([9, 5, 13])


@pytest.fixture(scope="module")
def plain(text_mtp_checkpoint, batch):
    return tokens(LLM(text_mtp_checkpoint, **ENGINE).generate(batch, GREEDY))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_mixed_batch_with_chunks_equals_plain_greedy(text_mtp_checkpoint, batch, plain, k):
    llm = LLM(text_mtp_checkpoint, speculative_config=mtp(k), **ENGINE)
    outputs = llm.generate(batch, GREEDY)
    assert tokens(outputs) == plain
    # Verify rows and prefill chunks shared steps.
    assert any(s.num_decodes and s.num_prefills for s in llm.step_stats)
    for o in outputs:
        m = o.metrics
        assert m["spec_num_drafts"] > 0
        assert m["spec_num_drafts"] <= m["spec_num_draft_tokens"] <= k * m["spec_num_drafts"]
        assert 0 <= m["spec_num_accepted_tokens"] <= m["spec_num_draft_tokens"]
        assert m["spec_mean_acceptance_length"] == 1 + m["spec_num_accepted_tokens"] / m["spec_num_drafts"]
        assert len([key for key in m if key.startswith("spec_acceptance_rate_pos_")]) == k
    total = llm.model_runner.spec.total
    assert total.num_drafts == sum(o.metrics["spec_num_drafts"] for o in outputs)


def test_preemption_equals_plain_greedy(text_mtp_checkpoint):
    batch = prompts([14, 12, 10], seed=5)
    params = SamplingParams(max_tokens=14, temperature=0, detokenize=False)
    expected = tokens(LLM(text_mtp_checkpoint, num_blocks=64, max_num_seqs=3).generate(batch, params))
    # k = 2: each request holds 3 GDN groups x (1 + k) state pages besides its KV blocks (of 16 tokens: the
    # requested 8 is raised until an attention page holds a GDN page: align mode's rule, named); 21 usable
    # blocks admit two requests, which outgrow them.
    scarce = LLM(text_mtp_checkpoint, num_blocks=22, block_size=8, max_num_seqs=3, speculative_config=mtp(2),
                 mamba_cache_mode="align")
    assert tokens(scarce.generate(batch, params)) == expected
    assert sum(s.num_preempted for s in scarce.step_stats) > 0


def test_multimodal_layout_and_two_mtp_layers(multimodal_mtp_checkpoint, two_layer_mtp_checkpoint):
    batch = prompts([7, 11], seed=2)
    for path, k in ((multimodal_mtp_checkpoint, 2), (two_layer_mtp_checkpoint, 2)):
        want = tokens(LLM(path, **ENGINE).generate(batch, GREEDY))
        assert tokens(LLM(path, speculative_config=mtp(k), **ENGINE).generate(batch, GREEDY)) == want


def replaying_drafter(llm, answers, shift):
    """Replace the MTP proposer with one that drafts ``answers[request](+shift mod 256)`` after the sequence."""
    spec = llm.model_runner.spec

    def propose(inputs, hidden, out, emitted, token_at, caches, step_inputs, meta=None):
        drafts = {}
        for request_id, new in emitted.items():
            known = out.num_computed_tokens[request_id] + len(out.token_ids[request_id]) \
                - len(out.scheduled_spec_decode_tokens.get(request_id, ()))
            full = answers[request_id]
            drafts[request_id] = [(t + shift) % 256 for t in full[known + len(new): known + len(new) + spec.k]]
        return drafts

    spec.propose = propose


@pytest.mark.parametrize("shift, rate", [(0, 1.0), (1, 0.0)])
def test_right_and_wrong_drafters(text_mtp_checkpoint, batch, plain, shift, rate):
    """Drafts that are the greedy answer are all accepted (k + 1 tokens per verify step); wrong ones never are;
    the tokens are the same either way, so the accepted-row rule of the GDN/conv states holds."""
    k = 3
    llm = LLM(text_mtp_checkpoint, speculative_config=mtp(k), **ENGINE)
    long_params = SamplingParams(max_tokens=10 + k, temperature=0, detokenize=False)
    reference = tokens(LLM(text_mtp_checkpoint, **ENGINE).generate(batch, long_params))
    ids = [f"r{i}" for i in range(len(batch))]
    replaying_drafter(llm, {r: p + ref for r, p, ref in zip(ids, batch, reference)}, shift)
    for r, p in zip(ids, batch):
        llm.add_request(p, GREEDY, request_id=r)
    while llm.has_unfinished_requests():
        llm.step()
    outputs = [llm._output(r, forget=True) for r in ids]
    assert tokens(outputs) == plain
    for o in outputs:
        assert o.metrics["spec_acceptance_rate"] == rate
    if rate == 1.0:  # all but the last verify step of a request advance k + 1 tokens
        assert any(o.metrics["spec_mean_acceptance_length"] > k for o in outputs)


def test_triton_backend_equals_plain_greedy(text_mtp_checkpoint, plain, batch):
    if "triton" not in ops.available_backends():
        pytest.skip("no Triton package")  # pragma: no cover - triton is a test dependency
    params = SamplingParams(max_tokens=4, temperature=0, detokenize=False)
    llm = LLM(text_mtp_checkpoint, speculative_config=mtp(2), backend="triton", **ENGINE)
    assert tokens(llm.generate(batch[:2], params)) == [t[:4] for t in plain[:2]]


@pytest.mark.parametrize("config, match", [
    (mtp(0), "must be >= 1"),
    (mtp(8), "must be < max_num_batched_tokens"),
    ({"method": "eagle", "num_speculative_tokens": 1}, "must be one of"),
])
def test_bad_speculative_configs(text_mtp_checkpoint, config, match):
    with pytest.raises(ValueError, match=match):
        LLM(text_mtp_checkpoint, speculative_config=config, **ENGINE)


def test_checkpoint_without_mtp_weights(text_checkpoint):
    with pytest.raises(ValueError, match="needs MTP weights"):
        LLM(text_checkpoint, speculative_config=mtp(1), **ENGINE)


def test_cli_prints_speculation_statistics(text_mtp_checkpoint, capsys):
    # "x#%" is three byte tokens of the built-in tokenizer, inside the tiny checkpoint's 256-token vocabulary.
    assert main(["--model", text_mtp_checkpoint, "--prompt", "x#%", "--max-tokens", "5", "--temperature", "0",
                 "--num-blocks", "32", "--block-size", "4", "--speculative-tokens", "2"]) == 0
    err = capsys.readouterr().err
    assert "speculative decoding: mean acceptance length" in err
    assert main(["--model", text_mtp_checkpoint, "--speculative-tokens", "-1", "--temperature", "0"]) == 2


def test_speculative_metadata_is_validated_on_the_host():
    from qwen_ops.model.worker.model_runner import one_request_output
    from qwen_ops.scheduling import build_step_metadata

    meta = build_step_metadata(one_request_output("r", [5, 6], [1], 4, num_computed_tokens=2, new=False))
    meta.num_decodes, meta.num_prefills = 1, 0  # a verify row of 1 + k = 2 tokens

    def check(rows, accepted):
        meta.spec_state_indices = torch.tensor(rows, dtype=torch.int32)
        meta.num_accepted_tokens = torch.tensor(accepted, dtype=torch.int32)
        meta.validate(num_blocks=4, block_size=4, num_state_slots=4)

    check([[2, 3]], [2])
    with pytest.raises(ValueError, match="num_accepted_tokens"):
        check([[2, 3]], [3])
    with pytest.raises(ValueError, match="repeats an index"):
        check([[2, 2]], [1])
    with pytest.raises(ValueError, match="outside"):
        check([[3, 4]], [1])
    with pytest.raises(ValueError, match="1 \\+ k"):
        check([[2]], [1])  # 2 tokens in a row with room for 1
