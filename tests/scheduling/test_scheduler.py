"""Hand-checked traces of the scheduler's rules (vLLM V1 semantics)."""

import pytest
from sched_helpers import make_request, make_scheduler, step

from qwen_ops.scheduling import Request, RequestStatus


def test_twelve_token_prompt_joins_a_running_decode_under_a_six_token_budget():
    s = make_scheduler(max_num_batched_tokens=6, max_num_seqs=4, block_size=4, num_blocks=16)
    s.add_request(make_request("d", 4, max_tokens=10))
    step(s)  # d's prefill
    s.add_request(make_request("p", 12, max_tokens=3, arrival=1.0))

    out, _ = step(s)
    assert out.num_scheduled_tokens == {"d": 1, "p": 5}  # running first, then a chunk of what is left
    assert out.sampling_req_ids == ["d"]  # a partial prefill chunk samples nothing
    out, _ = step(s)
    assert out.num_scheduled_tokens == {"d": 1, "p": 5}
    out, results = step(s)
    assert out.num_scheduled_tokens == {"d": 1, "p": 2}
    assert out.total_num_scheduled_tokens == 3
    assert {r.request_id for r in results} == {"d", "p"}


def test_cursor_advances_inside_schedule():
    s = make_scheduler(max_num_batched_tokens=8)
    s.add_request(make_request("a", 20))
    s.schedule()
    assert s.requests["a"].num_computed_tokens == 8  # before update_from_output
    assert s.requests["a"].num_output_tokens == 0


def test_request_with_nothing_to_do_is_skipped_not_a_reason_to_stop():
    # The model returned no token for "a" (its cursor is at num_tokens): it gets 0
    # tokens and is skipped; "b" behind it in the running list is still served.
    s = make_scheduler()
    s.add_request(make_request("a", 4))
    s.add_request(make_request("b", 4, arrival=1.0))
    out = s.schedule()
    s.update_from_output(out, {"b": [1]})
    out = s.schedule()
    assert out.num_scheduled_tokens == {"b": 1}


def test_long_prefill_threshold_caps_each_request_only_when_others_compete():
    s = make_scheduler(max_num_batched_tokens=16, long_prefill_token_threshold=5)
    s.add_request(make_request("alone", 12))
    out = s.schedule()
    assert out.num_scheduled_tokens == {"alone": 12}  # nobody to starve

    s = make_scheduler(max_num_batched_tokens=16, long_prefill_token_threshold=5)
    s.add_request(make_request("a", 12))
    s.add_request(make_request("b", 12, arrival=1.0))
    out = s.schedule()
    assert out.num_scheduled_tokens == {"a": 5, "b": 5}


def test_budget_is_shared_in_running_order():
    s = make_scheduler(max_num_batched_tokens=10)
    s.add_request(make_request("a", 7))
    s.add_request(make_request("b", 7, arrival=1.0))
    out, _ = step(s)
    assert out.num_scheduled_tokens == {"a": 7, "b": 3}
    out, _ = step(s)
    assert out.num_scheduled_tokens == {"a": 1, "b": 4}


def test_max_num_seqs_limits_admission():
    s = make_scheduler(max_num_seqs=2)
    for i in range(3):
        s.add_request(make_request(f"r{i}", 2, arrival=float(i)))
    out = s.schedule()
    assert list(out.num_scheduled_tokens) == ["r0", "r1"]


def test_without_chunked_prefill_a_prompt_that_does_not_fit_stops_admission():
    s = make_scheduler(max_num_batched_tokens=64, enable_chunked_prefill=False)
    s.add_request(make_request("a", 40))
    s.add_request(make_request("b", 30, arrival=1.0))  # 24 tokens left: does not fit
    s.add_request(make_request("c", 4, arrival=2.0))  # would fit, but is behind b
    out = s.schedule()
    assert out.num_scheduled_tokens == {"a": 40}


def test_reserve_full_prompt_needs_room_for_the_whole_prompt():
    # 8 usable blocks of 4 tokens. x decodes and holds 3 of them, leaving 5 free;
    # a's 24-token prompt needs 6 in all, its first 8-token chunk only 2.
    for reserve, expected in ((True, {"x": 1}), (False, {"x": 1, "a": 8})):
        s = make_scheduler(max_num_batched_tokens=9, num_blocks=9, max_model_len=32, reserve_full_prompt=reserve)
        s.add_request(make_request("x", 8, max_tokens=8))
        s.update_from_output(s.schedule(), {"x": [7]})
        s.add_request(make_request("a", 24))
        assert s.schedule().num_scheduled_tokens == expected


def test_a_request_that_could_outgrow_the_cache_is_rejected():
    # 5 usable blocks of 4 tokens hold 20 tokens: alone, a 24-token prompt would
    # preempt itself forever, so it is refused when it is added.
    s = make_scheduler(max_num_batched_tokens=8, num_blocks=6, max_model_len=32)
    with pytest.raises(ValueError, match="more than the KV cache holds"):
        s.add_request(make_request("a", 24))
    with pytest.raises(ValueError, match="more than the KV cache holds"):
        s.add_request(make_request("b", 12, max_tokens=12))
    s.add_request(make_request("c", 12, max_tokens=8))  # 20 tokens at most: fits
    assert not s.requests.keys() - {"c"}


def test_blocks_follow_ceil_of_computed_plus_new_plus_lookahead():
    s = make_scheduler(max_num_batched_tokens=16, block_size=4, num_speculative_tokens=2)
    s.add_request(make_request("a", 5))
    out = s.schedule()
    assert len(out.block_ids["a"]) == 2  # ceil((5 + 2) / 4)
    assert 0 not in out.block_ids["a"]  # the null block is never handed out
    assert s.num_free_blocks == 32 - 2


def test_fcfs_preempts_the_last_running_request():
    # 4 usable blocks of 2 tokens. Three 2-token prompts take 3 blocks; decodes
    # then need a block each: the last running request is preempted.
    s = make_scheduler(max_num_batched_tokens=8, block_size=2, num_blocks=5, max_model_len=16,
                       reserve_full_prompt=False)
    for i in range(3):
        s.add_request(make_request(f"r{i}", 2, max_tokens=5, arrival=float(i)))
    out, _ = step(s)
    assert s.num_free_blocks == 1
    s.add_request(make_request("late", 1, arrival=9.0))
    out, _ = step(s)
    assert out.num_scheduled_tokens == {"r0": 1, "r1": 1}
    assert out.preempted_req_ids == {"r2"}
    assert "late" not in out.num_scheduled_tokens  # no admission in a step that preempted
    r2 = s.requests["r2"]
    assert r2.status is RequestStatus.PREEMPTED and r2.num_computed_tokens == 0 and r2.block_ids == []
    assert s.waiting.peek() is r2  # back at the front
    assert r2.num_output_tokens == 1  # its output so far is kept and recomputed


def test_victim_that_is_the_request_itself_stops_the_running_loop():
    # 3 usable blocks of 2 tokens. a and b fill them; then b, last in the running
    # list, needs a new block: under FCFS the victim is b itself, and scheduling
    # of running requests stops there.
    s = make_scheduler(max_num_batched_tokens=8, block_size=2, num_blocks=4, max_model_len=16,
                       reserve_full_prompt=False)
    s.add_request(make_request("a", 2, max_tokens=4))
    step(s)
    s.add_request(make_request("b", 2, max_tokens=4, arrival=1.0))
    out, _ = step(s)
    assert out.num_scheduled_tokens == {"a": 1, "b": 2}
    assert s.num_free_blocks == 0
    out, _ = step(s)
    assert out.num_scheduled_tokens == {"a": 1}  # a is still inside its second block
    assert out.preempted_req_ids == {"b"}  # b preempted itself
    assert [r.request_id for r in s.waiting] == ["b"]


def test_priority_preempts_the_largest_priority_value_and_restores_its_budget():
    s = make_scheduler(max_num_batched_tokens=8, block_size=2, num_blocks=5, max_model_len=16, policy="priority",
                       reserve_full_prompt=False)
    s.add_request(make_request("low", 2, max_tokens=5, priority=5, arrival=0.0))
    s.add_request(make_request("high", 2, max_tokens=5, priority=0, arrival=1.0))
    s.add_request(make_request("mid", 2, max_tokens=5, priority=1, arrival=2.0))
    out, _ = step(s)
    assert list(out.num_scheduled_tokens) == ["high", "mid", "low"]  # (priority, arrival) order
    out, _ = step(s)
    # high takes the last free block; mid needs one too: low goes.
    assert out.preempted_req_ids == {"low"}
    assert out.num_scheduled_tokens == {"high": 1, "mid": 1}
    assert out.total_num_scheduled_tokens == 2


def test_priority_victim_already_scheduled_gives_its_tokens_back():
    # 3 usable blocks of 2 tokens. "low" runs first (alone), so it is first in the
    # running list; "high" joins behind it.
    s = make_scheduler(max_num_batched_tokens=8, block_size=2, num_blocks=4, max_model_len=16, policy="priority",
                       reserve_full_prompt=False)
    s.add_request(make_request("low", 2, max_tokens=4, priority=9, arrival=0.0))
    step(s)
    s.add_request(make_request("high", 2, max_tokens=4, priority=0, arrival=1.0))
    step(s)
    assert s.num_free_blocks == 0
    out, _ = step(s)
    # low is scheduled (no new block needed), then high needs a block: low is the
    # victim although already scheduled, and its token goes back to the budget.
    assert out.preempted_req_ids == {"low"}
    assert out.num_scheduled_tokens == {"high": 1}
    assert out.total_num_scheduled_tokens == 1
    assert s.running == [s.requests["high"]]


def test_priority_orders_the_waiting_queue():
    s = make_scheduler(max_num_seqs=2, policy="priority")
    s.add_request(make_request("late-urgent", 2, priority=0, arrival=5.0))
    s.add_request(make_request("early-lazy", 2, priority=3, arrival=0.0))
    s.add_request(make_request("early-urgent", 2, priority=0, arrival=1.0))
    out = s.schedule()
    assert list(out.num_scheduled_tokens) == ["early-urgent", "late-urgent"]


def test_failed_admission_is_head_of_line_under_fcfs():
    # 6 usable blocks of 4 tokens; x holds 3 after its first decode, so "big"
    # (20 tokens: 5 blocks) does not fit now, and "small" behind it must wait.
    s = make_scheduler(max_num_batched_tokens=64, block_size=4, num_blocks=7, max_model_len=64)
    s.add_request(make_request("x", 8, max_tokens=8))
    s.update_from_output(s.schedule(), {"x": [7]})
    s.add_request(make_request("big", 20))
    s.add_request(make_request("small", 2, arrival=1.0))
    assert s.schedule().num_scheduled_tokens == {"x": 1}


def test_prefix_cache_hit_is_block_aligned_and_keeps_the_last_token():
    s = make_scheduler(enable_prefix_caching=True, block_size=4)
    prompt = list(range(1, 13))  # 3 full blocks
    s.add_request(Request("a", prompt, 1, arrival_time=0))
    step(s)  # a finishes after one token; its blocks stay cached
    s.add_request(Request("b", prompt, 1, arrival_time=1))
    out = s.schedule()
    # All 12 tokens are cached, but the last one is recomputed: 8 hit, 4 computed.
    assert out.num_computed_tokens["b"] == 8
    assert out.num_scheduled_tokens["b"] == 4
    s.add_request(Request("c", prompt[:6] + [99, 98], 1, arrival_time=2))
    out = s.schedule()
    assert out.num_computed_tokens["c"] == 4  # only the first block matches


def test_prefix_blocks_are_shared_within_the_same_step():
    s = make_scheduler(enable_prefix_caching=True, block_size=4, max_num_batched_tokens=32)
    prompt = list(range(1, 11))
    s.add_request(Request("a", prompt, 3, arrival_time=0))
    s.add_request(Request("b", prompt, 3, arrival_time=1))
    out = s.schedule()
    assert out.num_computed_tokens["b"] == 8
    assert out.block_ids["b"][:2] == out.block_ids["a"][:2]
    assert s.kv_cache.pool.ref_cnt[out.block_ids["a"][0]] == 2
    assert s.num_free_blocks == 32 - 3 - 1  # b owns one block of its own


def test_freed_blocks_return_in_reverse_order_cached_ones_to_the_back():
    s = make_scheduler(block_size=4, num_blocks=9)
    s.add_request(make_request("a", 10, max_tokens=1))
    out, _ = step(s)
    blocks = list(out.block_ids["a"])
    assert list(s.kv_cache.pool.free_queue)[:3] == blocks[::-1]  # reused first, tail first

    s = make_scheduler(block_size=4, num_blocks=9, enable_prefix_caching=True)
    s.add_request(make_request("a", 10, max_tokens=1))
    out, _ = step(s)
    blocks = list(out.block_ids["a"])
    queue = list(s.kv_cache.pool.free_queue)
    assert queue[0] == blocks[2]  # the partial block has no hash: front
    assert queue[-2:] == [blocks[1], blocks[0]]  # hashed blocks: back, tail evicted first


def test_rejected_drafts_roll_the_cursor_back():
    s = make_scheduler(max_num_batched_tokens=16, num_speculative_tokens=3)
    s.add_request(make_request("a", 4, max_tokens=20, ignore_eos=True))
    step(s)
    s.update_draft_token_ids({"a": [11, 12, 13]})
    out = s.schedule()
    assert out.num_scheduled_tokens == {"a": 4}  # 1 + 3 drafts
    assert out.scheduled_spec_decode_tokens == {"a": [11, 12, 13]}
    assert out.token_ids["a"] == [1, 11, 12, 13]
    assert s.requests["a"].num_computed_tokens == 8
    # The model accepts 11 and 12, rejects 13, and samples 50 in its place.
    results = s.update_from_output(out, {"a": [11, 12, 50]})
    assert results[0].new_token_ids == [11, 12, 50]
    a = s.requests["a"]
    assert a.num_tokens == 8 and a.num_computed_tokens == 7  # 8 scheduled, 1 rejected


def test_drafts_are_dropped_for_a_request_mid_prefill():
    s = make_scheduler(max_num_batched_tokens=4, num_speculative_tokens=2)
    s.add_request(make_request("a", 10))
    s.schedule()
    s.update_draft_token_ids({"a": [1, 2]})
    assert s.requests["a"].spec_token_ids == []


@pytest.mark.parametrize(
    "kwargs, sampled, reason, kept",
    [
        (dict(eos_token_id=2), [5, 2], "stop", 2),
        (dict(eos_token_id=2, ignore_eos=True), [5, 2], None, 2),
        (dict(stop_token_ids=(5,)), [5], "stop", 1),
        (dict(), [5, 6, 7], "length", 3),  # max_tokens=3
    ],
)
def test_stop_conditions(kwargs, sampled, reason, kept):
    s = make_scheduler()
    s.add_request(make_request("a", 4, max_tokens=3, **kwargs))
    results = []
    for token in sampled:
        out = s.schedule()
        results += s.update_from_output(out, {"a": [token]})
    assert results[-1].finish_reason == reason
    assert results[-1].finished == (reason is not None)
    assert sum(len(r.new_token_ids) for r in results) == kept
    if reason == "stop" and "stop_token_ids" in kwargs:
        assert results[-1].stop_reason == 5
    if reason is not None:
        assert "a" not in s.requests
        assert s.num_free_blocks == 32
        assert s.schedule().finished_req_ids == {"a"}


def test_max_model_len_stops_a_request():
    s = make_scheduler(max_model_len=8)
    s.add_request(make_request("a", 6, max_tokens=100))
    step(s)
    _, results = step(s)
    assert results[0].finish_reason == "length"
    assert results[0].finished


def test_tokens_after_a_stop_inside_accepted_drafts_are_dropped():
    s = make_scheduler(num_speculative_tokens=3)
    s.add_request(make_request("a", 4, max_tokens=20, eos_token_id=2))
    step(s)
    s.update_draft_token_ids({"a": [8, 2, 9]})
    out = s.schedule()
    results = s.update_from_output(out, {"a": [8, 2, 9, 4]})
    assert results[0].new_token_ids == [8, 2]
    assert results[0].finish_reason == "stop"


def test_add_request_rejects_bad_input():
    s = make_scheduler(max_model_len=16)
    with pytest.raises(ValueError, match="max_model_len"):
        s.add_request(make_request("a", 17))
    # Exactly max_model_len tokens: no room to generate, and a chunked prefill of it could never finish.
    with pytest.raises(ValueError, match="shorter than max_model_len=16"):
        s.add_request(make_request("a", 16))
    s.add_request(make_request("a", 4))
    with pytest.raises(ValueError, match="already"):
        s.add_request(make_request("a", 4))
    with pytest.raises(TypeError, match="request"):
        s.add_request("a")
    with pytest.raises(ValueError, match="prompt_token_ids"):
        Request("x", [], 4)
    with pytest.raises(ValueError, match="max_tokens"):
        Request("x", [1], 0)


def test_update_from_output_rejects_bad_input():
    s = make_scheduler()
    s.add_request(make_request("a", 4))
    out = s.schedule()
    with pytest.raises(ValueError, match="not scheduled"):
        s.update_from_output(out, {"zzz": [1]})
    with pytest.raises(ValueError, match="sampled_token_ids"):
        s.update_from_output(out, {"a": [1, 2]})
    with pytest.raises(TypeError, match="sampled_token_ids"):
        s.update_from_output(out, [[1]])


def test_abort_frees_everything_and_is_reported_once():
    s = make_scheduler(max_num_seqs=1)
    s.add_request(make_request("run", 8, max_tokens=10))
    s.add_request(make_request("wait", 8, arrival=1.0))
    s.schedule()
    assert s.abort_request("run") is True
    assert s.abort_request("wait") is True
    assert s.abort_request("run") is False  # already gone: not an error
    assert not s.has_unfinished_requests()
    assert s.num_free_blocks == 32
    assert s.schedule().finished_req_ids == {"run", "wait"}
    assert s.schedule().finished_req_ids == set()


def test_aborted_mid_step_request_gets_no_output():
    s = make_scheduler()
    s.add_request(make_request("a", 4))
    out = s.schedule()
    s.abort_request("a")
    assert s.update_from_output(out, {"a": [3]}) == []


def test_new_and_resumed_ids_are_reported():
    s = make_scheduler()
    s.add_request(make_request("a", 4))
    out = s.schedule()
    assert out.new_req_ids == ["a"] and out.resumed_req_ids == []


def test_update_from_output_refuses_tokens_it_should_not_take():
    s = make_scheduler(max_num_batched_tokens=4)
    s.add_request(make_request("a", 10))
    out = s.schedule()  # a 4-token chunk of a 10-token prompt: samples nothing
    assert out.sampling_req_ids == []
    with pytest.raises(ValueError, match=r"sampled_token_ids\['a'\].*does not sample"):
        s.update_from_output(out, {"a": [5]})
    assert s.requests["a"].all_token_ids == [7] * 10  # nothing was appended
    s.update_from_output(out, {"a": []})  # empty means "no tokens": accepted

    s = make_scheduler()
    s.add_request(make_request("a", 3, max_tokens=5))
    out = s.schedule()
    for bad, error in [(5, TypeError), (["x"], TypeError), ([1.0], TypeError), ("ab", TypeError), ([True], TypeError)]:
        with pytest.raises(error, match=r"sampled_token_ids\['a'\]"):
            s.update_from_output(out, {"a": bad})
    assert s.requests["a"].all_token_ids == [7, 7, 7]
    s.update_from_output(out, {"a": [1]})
    with pytest.raises(ValueError, match="already applied"):
        s.update_from_output(out, {"a": [1]})
    assert s.requests["a"].all_token_ids == [7, 7, 7, 1] and s.requests["a"].num_computed_tokens == 3


def test_a_generator_prompt_is_kept():
    r = Request("g", (t for t in [4, 5, 6]), 3)
    assert r.prompt_token_ids == [4, 5, 6] and r.num_prompt_tokens == 3 and r.all_token_ids == [4, 5, 6]
    with pytest.raises(ValueError, match="prompt_token_ids"):
        Request("g", 5, 3)


def test_update_draft_token_ids_rejects_non_lists():
    s = make_scheduler(num_speculative_tokens=2)
    s.add_request(make_request("a", 3, max_tokens=8))
    step(s)
    with pytest.raises(TypeError, match=r"draft_token_ids\['a'\]"):
        s.update_draft_token_ids({"a": None})
    with pytest.raises(TypeError, match="draft_token_ids"):
        s.update_draft_token_ids([("a", [1])])


def test_no_waiting_request_is_admitted_in_a_step_that_preempted():
    # 4 usable blocks of 2 tokens. a (1 block) and low (2 blocks) run. Next step a
    # takes the last free block; low needs one and preempts itself, freeing 2
    # blocks, enough for w at the head of the queue: w still waits a step.
    s = make_scheduler(max_num_batched_tokens=8, block_size=2, num_blocks=5, max_model_len=16, policy="priority",
                       reserve_full_prompt=False)
    s.add_request(make_request("a", 2, max_tokens=6, priority=0, arrival=0.0))
    s.add_request(make_request("low", 4, max_tokens=4, priority=9, arrival=1.0))
    step(s)
    s.add_request(make_request("w", 1, max_tokens=4, priority=1, arrival=2.0))
    out, _ = step(s)
    assert out.preempted_req_ids == {"low"}
    assert out.num_scheduled_tokens == {"a": 1}
    assert s.num_free_blocks == 2 and s.waiting.peek().request_id == "w"
    out, _ = step(s)
    assert "w" in out.num_scheduled_tokens  # admitted once no step preempts


def test_priority_victim_tie_breaks_on_the_later_arrival():
    # Same priority: the later arrival ("late") is the victim, even though "early" is the one needing a block.
    s = make_scheduler(max_num_batched_tokens=8, block_size=2, num_blocks=4, max_model_len=16, policy="priority",
                       reserve_full_prompt=False)
    s.add_request(make_request("early", 2, max_tokens=4, priority=3, arrival=0.0))
    s.add_request(make_request("late", 2, max_tokens=4, priority=3, arrival=1.0))
    step(s)
    assert s.num_free_blocks == 1
    out, _ = step(s)
    assert out.preempted_req_ids == {"late"}
    assert out.num_scheduled_tokens == {"early": 1}


def test_running_request_is_capped_one_token_below_max_model_len():
    # 13 tokens, cursor 12, 3 drafts: 4 tokens wanted, but position 15 (the last of
    # max_model_len=16) must be left for the token the step samples: 3 are scheduled.
    s = make_scheduler(max_model_len=16, num_speculative_tokens=3)
    s.add_request(make_request("a", 12, max_tokens=20))
    step(s)
    s.update_draft_token_ids({"a": [5, 6, 7]})
    out = s.schedule()
    assert out.num_scheduled_tokens == {"a": 3}
    assert out.scheduled_spec_decode_tokens == {"a": [5, 6]}


@pytest.mark.parametrize("field, value", [("eos_token_id", "2"), ("stop_token_ids", 5), ("stop_token_ids", "12"),
                                          ("stop_token_ids", [1, "2"]), ("arrival_time", "now"),
                                          ("ignore_eos", "yes")])
def test_request_rejects_mistyped_fields(field, value):
    with pytest.raises(TypeError, match=field):
        Request("a", [1, 2, 3], 4, **{field: value})
