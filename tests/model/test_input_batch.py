"""The persistent batch follows the scheduler: its rows equal what the scheduler holds, step after step.

Driven by a bare scheduler (no model, random sampled tokens) so that many steps
with admissions, chunked prefills, preemptions, finishes and aborts run in a
moment; the step tensors are checked against ``build_step_metadata``, which
lays the same step out independently from the scheduler's full lists.
"""
import pytest
import torch

from batch_checks import assert_rows_match_scheduler, assert_step_matches_metadata
from qwen_ops.model.worker.input_batch import InputBatch
from qwen_ops.model.sample.sampling import SamplingParams
from qwen_ops.scheduling import Request, Scheduler, SchedulerConfig

BLOCK_SIZE = 4
MAX_MODEL_LEN = 48
EOS = 0


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_rows_follow_the_scheduler_through_preemption_finish_and_abort(policy, gen):
    config = SchedulerConfig(max_num_batched_tokens=12, max_num_seqs=4, block_size=BLOCK_SIZE, num_blocks=17,
                             max_model_len=MAX_MODEL_LEN, policy=policy, num_gdn_groups=3,
                             long_prefill_token_threshold=5)  # several prefill chunks share a step
    scheduler = Scheduler(config)
    batch = InputBatch(config.max_num_seqs, MAX_MODEL_LEN // BLOCK_SIZE, BLOCK_SIZE)
    state = {}  # request id -> (params, generator), as the engine keeps them

    def add(i):
        request_id = f"r{i}"
        prompt = torch.randint(1, 50, (int(torch.randint(3, 30, (1,), generator=gen)),), generator=gen).tolist()
        max_tokens = int(torch.randint(2, 16, (1,), generator=gen))
        priority = int(torch.randint(0, 3, (1,), generator=gen))
        scheduler.add_request(Request(request_id, prompt, max_tokens, priority=priority, eos_token_id=EOS))
        state[request_id] = (SamplingParams(max_tokens=max_tokens, seed=i), torch.Generator().manual_seed(i))

    for i in range(6):
        add(i)
    next_id, seen = 6, {"preempted": 0, "finished": 0, "aborted": 0, "reordered": 0}
    for step in range(1000):
        if not scheduler.has_unfinished_requests():
            break
        out = scheduler.schedule()
        batch.update(out, state.__getitem__)
        # Scheduled requests' cursors advanced in schedule(): the rows still hold the old ones.
        assert_rows_match_scheduler(
            batch, scheduler, lambda r: out.num_computed_tokens.get(r.request_id, r.num_computed_tokens))
        seen["preempted"] += len(out.preempted_req_ids)
        if out.total_num_scheduled_tokens == 0:
            continue
        rows_before = list(batch.req_ids)
        prepared = batch.prepare(out)
        seen["reordered"] += rows_before[: len(prepared.req_ids)] != prepared.req_ids
        assert batch.req_ids[: len(prepared.req_ids)] == prepared.req_ids
        assert_step_matches_metadata(prepared, out)
        assert_rows_match_scheduler(batch, scheduler, lambda r: r.num_computed_tokens)
        # Each sampling row carries its own request's settings and generator.
        assert [p for p in prepared.params] == [state[r][0] for r in prepared.sampling_req_ids]
        assert all(g is state[r][1] for g, r in zip(prepared.generators, prepared.sampling_req_ids))
        sampled = {r: [int(torch.randint(0 if step % 3 else 1, 50, (1,), generator=gen))]
                   for r in prepared.sampling_req_ids}
        results = scheduler.update_from_output(out, sampled)
        seen["finished"] += sum(res.finished for res in results)
        if step % 13 == 3 and scheduler.running:  # abort a running request now and then
            seen["aborted"] += scheduler.abort_request(scheduler.running[0].request_id)
        if step % 5 == 0 and next_id < 20:
            add(next_id)
            next_id += 1
    assert not scheduler.has_unfinished_requests()
    out = scheduler.schedule()  # the last finishes reach the batch
    batch.update(out, state.__getitem__)
    assert len(batch) == 0 and not batch.block_table.any()
    assert all(seen.values()), seen  # every kind of change really happened


def test_out_of_step_batch_is_an_error(gen):
    config = SchedulerConfig(max_num_batched_tokens=16, max_num_seqs=2, block_size=BLOCK_SIZE, num_blocks=16,
                             max_model_len=MAX_MODEL_LEN, num_gdn_groups=3)
    scheduler = Scheduler(config)
    batch = InputBatch(2, MAX_MODEL_LEN // BLOCK_SIZE, BLOCK_SIZE)
    scheduler.add_request(Request("a", [1, 2, 3], 4))
    out = scheduler.schedule()
    batch.update(out, lambda r: (SamplingParams(), torch.Generator()))
    batch.num_computed_tokens[0] = 2  # a lost change
    with pytest.raises(RuntimeError, match="out of step"):
        batch.prepare(out)
    with pytest.raises(RuntimeError, match="already holds row"):
        batch.update(out, lambda r: (SamplingParams(), torch.Generator()))
