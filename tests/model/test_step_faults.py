"""A fault inside a step: the step is rolled back, the engine serves on, and every request still gives its tokens.

Faults are injected at each stage of a step by wrapping the engine's parts (``bench/reliability/
fault_injection.py``), after the stage did its work: pages allocated, KV and GDN pages written (then
overwritten with garbage: nothing a failed step wrote may be trusted), tokens sampled, drafts made, tokens
applied by the scheduler, tokens recorded by the engine. Each scenario runs three requests sharing a prefix:
one fault on r1 (retried: exactly its solo tokens), then faults on r2 until two come in a row (it ends with "error",
its tokens so far a prefix of its solo tokens), and checks that each failed step raised StepFailedError
once, that r0 and r1 give exactly what each gives served alone, that no page, state row or batch row is
left behind, and that the prefix cache holds nothing bad (the prompts served again, from it, give the same).

Exactness: a retried request re-prefills its prompt and the tokens it had in one pass where the solo run
decoded them one by one; in float32 that leaves the greedy tokens identical on these models (checked
exactly here, as preemption by recompute is in ``test_equivalence.py``), and so with an INT8 KV cache
(the same per-channel scales; a token's K/V quantise the same unless a value sits on a rounding edge).
"""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "reliability"))

from fault_injection import STAGES, FaultInjector, InjectedFault  # noqa: E402

from qwen_ops import LLM, SamplingParams  # noqa: E402
from qwen_ops.model.engine.step_failure import MAX_CONSECUTIVE_STEP_FAILURES, StepFailedError  # noqa: E402

GREEDY = SamplingParams(max_tokens=8, temperature=0, detokenize=False)
ENGINE = dict(num_blocks=40, max_num_seqs=4, max_num_batched_tokens=24, block_size=16)
CONFIGS = {
    "plain": dict(enable_prefix_caching=False),
    "prefix-caching": dict(enable_prefix_caching=True),
    "int8-kv": dict(kv_cache_dtype="int8", enable_prefix_caching=True),
    "mtp": dict(enable_prefix_caching=True, speculative_config={"method": "mtp", "num_speculative_tokens": 2}),
}


def make_prompts(seed: int = 5) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    shared = torch.randint(1, 256, (20,), generator=gen).tolist()
    return [shared + torch.randint(1, 256, (n,), generator=gen).tolist() for n in (5, 14, 9)]


@pytest.fixture(scope="module")
def engines(request):
    """Per config, the engine the cases share (each leaves it empty; what they cached stays) and a reference
    engine of the same config serving each case's prompts alone: engines(name) -> (llm, solo(prompts))."""
    cache = {}

    def get(name):
        if name not in cache:
            checkpoint = request.getfixturevalue("text_mtp_checkpoint" if name == "mtp" else "text_checkpoint")
            llm, reference = (LLM(checkpoint, **ENGINE, **CONFIGS[name]) for _ in range(2))

            def solo(prompts):
                return [reference.generate([p], GREEDY)[0].outputs[0].token_ids for p in prompts]

            cache[name] = llm, solo
        return cache[name]

    return get


def drive(llm, injector, stage, prompts):
    """Serve r0, r1, r2; one fault on r1 at ``stage``, then two in a row on r2. Returns outputs and failures."""
    engine = llm.llm_engine
    for i, prompt in enumerate(prompts):
        engine.add_request(prompt, GREEDY, f"r{i}")
    injector.arm(stage, "r1")
    outputs, failures = {}, []
    for _ in range(300):
        if not engine.has_unfinished_requests():
            break
        if len(failures) == 1 and injector.armed is None and not engine.scheduler.step_failures:
            injector.arm(stage, "r2")  # once every retried request stepped fine: a fault on r2...
        elif len(failures) >= 2 and injector.armed is None and "r2" not in outputs:
            # ...and another on its retry. A retry's partial prefill chunk that steps fine breaks the row (an
            # "output" fault needs r2 to sample), so r2 is hit until it ends.
            injector.arm(stage, "r2")
        try:
            for output in engine.step():
                assert output.request_id not in outputs, "a finished request's output came twice"
                if output.finished:  # its record is taken (forgotten): the next case reuses the ids
                    outputs[output.request_id] = engine._output(output.request_id, forget=True)
        except StepFailedError as failure:
            assert isinstance(failure.__cause__, InjectedFault)
            failures.append(failure)
    else:
        pytest.fail("the engine did not finish")
    return outputs, failures


def assert_nothing_left(llm):
    engine = llm.llm_engine
    assert engine.step() == []  # hands the last finished ids to the model runner
    scheduler = engine.scheduler
    assert not scheduler.requests and not scheduler.step_failures and not engine.has_unfinished_requests()
    assert scheduler.num_free_blocks == scheduler.config.num_blocks - 1
    assert not any(scheduler.kv_cache.pool.ref_cnt)
    assert scheduler.state_rows.num_free_slots == scheduler.config.max_num_seqs
    assert len(engine.input_batch) == 0 and not engine.model_runner.sampling


# Every stage in every config; drafting exists only with MTP speculation.
CASES = [(stage, name) for stage in STAGES for name in CONFIGS if stage != "drafting" or name == "mtp"]


@pytest.mark.parametrize("stage,name", CASES)
def test_a_fault_at_any_stage_leaves_the_engine_correct(engines, stage, name):
    llm, reference = engines(name)
    prompts = make_prompts(seed=STAGES.index(stage))  # new to the engine's prefix cache: the faults hit its writes
    solo = reference(prompts)
    injector = FaultInjector(llm.llm_engine)
    try:
        outputs, failures = drive(llm, injector, stage, prompts)
    finally:
        injector.close()

    # One StepFailedError per fault, naming the stage and the requests it touched; r2 ended at the second in a row.
    assert len(failures) == len(injector.fired) and 3 <= len(failures) <= 5
    assert all(f.stage == stage for f in failures)
    assert "r1" in failures[0].request_ids and not failures[0].errored_request_ids
    assert all("r2" in f.request_ids for f in failures[1:])
    assert [f.errored_request_ids for f in failures[1:]] == [[]] * (len(failures) - 2) + [["r2"]]
    if stage != "output":
        assert len(failures) == 3  # r2's retry failed at once: the second failure in a row
    assert MAX_CONSECUTIVE_STEP_FAILURES == 2

    # Every request came out once, finished; the others as served alone, r2 with an error and a valid prefix.
    assert set(outputs) == {"r0", "r1", "r2"}
    for i, rid in enumerate(("r0", "r1")):
        assert outputs[rid].outputs[0].token_ids == solo[i], rid
        assert outputs[rid].outputs[0].finish_reason == "length"
    errored = outputs["r2"].outputs[0]
    assert errored.finish_reason == "error" and errored.token_ids == solo[2][:len(errored.token_ids)]
    assert_nothing_left(llm)

    # Nothing a failed step wrote is reachable from the prefix cache: served again, the prompts give the same.
    again = llm.generate(prompts, GREEDY)
    assert [o.outputs[0].token_ids for o in again] == solo
    assert_nothing_left(llm)


def test_generate_returns_every_request_and_the_errored_one(engines):
    """LLM.generate goes on after a failed step: a request hit twice comes back with "error", the rest whole."""
    llm, reference = engines("plain")
    prompts = make_prompts()
    expected = reference(prompts)
    engine = llm.llm_engine
    forward, failed = engine.model_runner._forward, []

    def failing_with_the_last_prompt(meta, *args, **kwargs):  # its first two steps fail (a poisoned request)
        result = forward(meta, *args, **kwargs)
        if len(failed) < 2 and any(engine._tracked[r].prompt_token_ids == prompts[2] for r in meta.req_ids):
            failed.append(list(meta.req_ids))
            raise InjectedFault("device error")
        return result

    engine.model_runner._forward = failing_with_the_last_prompt
    try:
        outs = llm.generate(prompts, GREEDY)
    finally:
        del engine.model_runner._forward
    assert len(failed) == 2
    assert [o.outputs[0].finish_reason for o in outs] == ["length", "length", "error"]
    assert [o.outputs[0].token_ids for o in outs[:2]] == expected[:2]
    assert outs[2].finished and outs[2].outputs[0].token_ids == []
    assert_nothing_left(llm)


def test_a_retried_sampled_request_draws_what_it_would_have(engines):
    """A sampling fault rewinds the generators the step drew from: a seeded random request retried gives the
    tokens it gives without a fault."""
    params = SamplingParams(max_tokens=8, temperature=0.9, top_k=40, seed=3, detokenize=False)
    llm, _ = engines("plain")
    expected = [o.outputs[0].token_ids for o in llm.generate(make_prompts(), params)]
    engine = llm.llm_engine
    injector = FaultInjector(engine)
    for i, prompt in enumerate(make_prompts()):
        engine.add_request(prompt, params, f"s{i}")
    done = {}
    injector.arm("update", "s1")  # after the step sampled and the scheduler applied its tokens
    while engine.has_unfinished_requests():
        if len(injector.fired) == 1 and injector.armed is None and not engine.scheduler.step_failures:
            injector.arm("sampling", "s0")
        try:
            done.update({o.request_id: engine._output(o.request_id, forget=True).outputs[0].token_ids
                         for o in engine.step() if o.finished})
        except StepFailedError:
            pass
    injector.close()
    assert len(injector.fired) == 2
    assert [done[f"s{i}"] for i in range(3)] == expected
    assert_nothing_left(llm)


def test_the_failure_is_raised_once_and_the_next_step_serves(engines):
    llm, _ = engines("plain")
    engine = llm.llm_engine
    injector = FaultInjector(engine)
    engine.add_request(make_prompts()[0], GREEDY, "a")
    injector.arm("forward")
    with pytest.raises(StepFailedError, match="'forward'.*injected fault") as failure:
        engine.step()
    assert failure.value.request_ids == ["a"] and failure.value.stage == "forward"
    assert engine.has_unfinished_requests()
    while engine.has_unfinished_requests():
        outputs = engine.step()  # no fault armed: nothing raises again
    injector.close()
    assert outputs[0].finished and outputs[0].outputs[0].finish_reason == "length"
    engine._output("a", forget=True)
    assert_nothing_left(llm)
