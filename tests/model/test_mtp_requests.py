"""What MTP speculation serves besides plain greedy requests: logprobs, and 1-token prompts (which vLLM's
scheduler pads to the decode shape with placeholder drafts), each equal to the run without speculation."""
import pytest
import torch
from test_mtp_engine import ENGINE, mtp, prompts, replaying_drafter, tokens

from qwen_ops import LLM, SamplingParams

LOGPROBS = SamplingParams(max_tokens=8, temperature=0, logprobs=3, detokenize=False)


def run(llm, batch, params):
    ids = [f"r{i}" for i in range(len(batch))]
    params = params if isinstance(params, list) else [params] * len(batch)
    for r, p, sp in zip(ids, batch, params):
        llm.add_request(p, sp, request_id=r)
    while llm.has_unfinished_requests():
        llm.step()
    return [llm._output(r, forget=True) for r in ids]


@pytest.mark.parametrize("drafter", ["mtp", "right"])
def test_logprobs_equal_the_run_without_speculation(text_mtp_checkpoint, drafter):
    """One ``{token: logprob}`` per generated token (top 3 plus the chosen one), from the row that decided the
    token: those of accepted drafts too (the right drafter has every draft accepted), and none past a stop."""
    batch = prompts([9, 5, 13], seed=3)
    plain = LLM(text_mtp_checkpoint, **ENGINE).generate(batch, LOGPROBS)
    llm = LLM(text_mtp_checkpoint, speculative_config=mtp(3), **ENGINE)
    if drafter == "right":
        longer = SamplingParams(max_tokens=8 + 3, temperature=0, detokenize=False)
        answers = tokens(LLM(text_mtp_checkpoint, **ENGINE).generate(batch, longer))
        replaying_drafter(llm, {f"r{i}": p + a for i, (p, a) in enumerate(zip(batch, answers))}, 0)
    outputs = run(llm, batch, LOGPROBS)
    assert tokens(outputs) == tokens(plain)
    if drafter == "right":
        assert all(o.metrics["spec_acceptance_rate"] == 1.0 for o in outputs)
    for want, got in zip(plain, outputs):
        want_lp, got_lp = want.outputs[0].logprobs, got.outputs[0].logprobs
        assert len(got_lp) == len(got.outputs[0].token_ids)
        for a, b, token in zip(want_lp, got_lp, got.outputs[0].token_ids):
            assert token in b and 3 <= len(b) <= 4
            assert set(a) == set(b)
            # float32: verify rows run as short attention chunks, plain decode rows one token at a time.
            assert max(abs(a[t] - b[t]) for t in a) < 1e-4


def test_logprobs_stop_with_the_tokens(text_mtp_checkpoint):
    """A stop token inside a step's accepted drafts ends the output there, and its logprobs with it."""
    batch = prompts([9], seed=3)
    answer = tokens(LLM(text_mtp_checkpoint, **ENGINE).generate(batch, LOGPROBS))[0]
    stop = SamplingParams(max_tokens=8, temperature=0, logprobs=0, stop_token_ids=[answer[3]], detokenize=False)
    llm = LLM(text_mtp_checkpoint, speculative_config=mtp(3), **ENGINE)
    replaying_drafter(llm, {"r0": batch[0] + answer}, 0)
    out = run(llm, batch, stop)[0].outputs[0]
    cut = answer.index(answer[3]) + 1
    assert out.token_ids == answer[:cut] and len(out.logprobs) == cut


def test_one_token_prompts_equal_the_run_without_speculation(text_mtp_checkpoint):
    """1-token prompts join while others decode, so the scheduler pads them with placeholder drafts; they run
    as their one real token, and every request's greedy tokens equal the plain run's."""
    batch = prompts([9, 7, 1, 1, 6], seed=8)
    batch[3] = [batch[2][0] + 1]
    # Two rows: r1 ends early, so r2 joins while r0 decodes; r3 joins when r1's successor ends.
    params = [SamplingParams(max_tokens=n, temperature=0, detokenize=False) for n in (9, 3, 3, 5, 4)]
    engine = dict(ENGINE, max_num_seqs=2)
    plain = tokens(run(LLM(text_mtp_checkpoint, **engine), batch, params))
    llm = LLM(text_mtp_checkpoint, speculative_config=mtp(2), **engine)
    padded = []
    schedule = llm.llm_engine.scheduler.schedule

    def recording_schedule():
        out = schedule()
        padded.extend(r for r, d in out.scheduled_spec_decode_tokens.items() if d and d[0] < 0)
        return out

    llm.llm_engine.scheduler.schedule = recording_schedule
    assert tokens(run(llm, batch, params)) == plain
    assert {"r2", "r3"} <= set(padded), "the 1-token prompts were not padded with placeholder drafts"
