"""GDN state addressing over the scheduler's block tables, checked by simulating the states.

A simulated GDN state is the tuple of tokens it summarises. Every step applies the
planned copies, checks that each request's state block holds exactly the tokens
before the step (so a prefix hit starts from the right cached state, and no live
state was handed to another request), then writes the state after the step.
"""

import random

import pytest

from qwen_ops.scheduling import Request, Scheduler, SchedulerConfig
from qwen_ops.scheduling.block_pool import NULL_BLOCK
from qwen_ops.scheduling.gdn_state_columns import GdnStateColumns


def random_config(rng, align):
    block_size = rng.choice([2, 4, 8, 16])
    max_model_len = rng.randint(24, 120)
    groups = rng.choice([1, 3])
    pages = groups * (2 if align else 1)
    blocks_for_one = -(-max_model_len // block_size) + pages
    return SchedulerConfig(
        max_num_batched_tokens=rng.randint(8, 64), max_num_seqs=rng.randint(1, 6), block_size=block_size,
        num_blocks=1 + rng.randint(blocks_for_one, 3 * blocks_for_one), max_model_len=max_model_len,
        enable_prefix_caching=align, policy=rng.choice(["fcfs", "priority"]),
        long_prefill_token_threshold=rng.choice([0, 0, 5]), reserve_full_prompt=rng.random() < 0.5,
        num_gdn_groups=groups,
    )


def random_requests(rng, config):
    base = [rng.randrange(1, 50) for _ in range(config.max_model_len)]
    requests = []
    for i in range(rng.randint(2, 10)):
        length = rng.randint(1, config.max_model_len - 1)
        shared = rng.choice([0, length, rng.randint(0, length), length // config.block_size * config.block_size])
        prompt = base[:shared] + [rng.randrange(1, 50) for _ in range(length - shared)]
        requests.append((rng.choice([0, 0, rng.randint(0, 15)]), Request(
            f"r{i}", prompt, rng.randint(1, 12), arrival_time=float(i), priority=rng.randint(0, 2), ignore_eos=True)))
    return requests


def simulate(seed, align):
    rng = random.Random(seed)
    config = random_config(rng, align)
    s = Scheduler(config)
    columns = GdnStateColumns(config.num_gdn_groups, config.block_size, align)
    pending = random_requests(rng, config)
    states, hits, steps = {}, 0, 0
    for step in range(600):
        for arrival, request in [p for p in pending if p[0] == step]:
            s.add_request(request)
        pending = [p for p in pending if p[0] > step]
        if not pending and not s.has_unfinished_requests():
            return hits, steps
        out = s.schedule()
        plan = columns.plan(out)
        for group, src, dst in plan.copies:
            assert NULL_BLOCK not in (src, dst)
            states[group, dst] = states[group, src]
        for request_id, num_new in out.num_scheduled_tokens.items():
            tokens = tuple(s.requests[request_id].all_token_ids)
            computed = out.num_computed_tokens[request_id]
            hits += out.num_cached_tokens.get(request_id, 0) > 0
            for group, block in enumerate(plan.state_blocks[request_id]):
                assert block != NULL_BLOCK
                if computed:
                    assert states.get((group, block)) == tokens[:computed], (seed, step, request_id, group)
                states[group, block] = tokens[: computed + num_new]
        steps += 1
        s.update_from_output(out, {r: [rng.randrange(1, 50)] for r in out.sampling_req_ids})
    raise AssertionError(f"seed {seed}: workload did not finish")


@pytest.mark.parametrize("align", [True, False], ids=["align", "none"])
def test_every_step_starts_from_the_state_of_exactly_its_computed_tokens(align):
    total_hits = total_steps = 0
    for seed in range(60):
        hits, steps = simulate(seed, align)
        total_hits, total_steps = total_hits + hits, total_steps + steps
    assert total_steps > 1000
    if align:
        assert total_hits > 20  # prefix hits did start from cached states


def test_a_hit_copies_the_cached_state_into_the_new_column():
    s = Scheduler(SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=2, block_size=4, num_blocks=40,
                                  max_model_len=64, enable_prefix_caching=True, num_gdn_groups=2))
    columns = GdnStateColumns(2, 4, align=True)
    prompt = list(range(1, 11))
    s.add_request(Request("a", prompt, 1))
    while s.has_unfinished_requests():
        out = s.schedule()
        columns.plan(out)
        s.update_from_output(out, {r: [1] for r in out.sampling_req_ids})
    s.add_request(Request("b", prompt, 1))
    out = s.schedule()
    plan = columns.plan(out)
    tables = out.group_block_ids["b"]
    assert out.num_computed_tokens["b"] == 8  # hit: state after 8 tokens in column 1
    assert plan.copies == [(0, tables[0][1], tables[0][2]), (1, tables[1][1], tables[1][2])]
    assert plan.state_blocks["b"] == (tables[0][2], tables[1][2])


def test_speculative_decoding_is_refused():
    s = Scheduler(SchedulerConfig(max_num_batched_tokens=16, max_num_seqs=2, block_size=4, num_blocks=40,
                                  max_model_len=64, num_gdn_groups=1, num_speculative_tokens=1))
    s.add_request(Request("a", [1, 2, 3], 2))
    with pytest.raises(ValueError, match="speculative"):
        GdnStateColumns(1, 4, align=False).plan(s.schedule())
