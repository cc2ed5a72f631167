"""Scheduler.rollback_step: a failed step's requests go back as preemption by recompute (or end with "error"),
what the step registered in the prefix cache is dropped, the rest goes on untouched, nothing leaks."""
import pytest
from sched_helpers import make_request, make_scheduler, step

from qwen_ops.scheduling import Request, RequestStatus


def assert_pool_clean(s):
    pool = s.kv_cache.pool
    assert s.num_free_blocks == s.config.num_blocks - 1 and not any(pool.ref_cnt)
    if s.state_rows is not None:
        assert s.state_rows.num_free_slots == s.config.max_num_seqs


def serve_to_the_end(s):
    while s.has_unfinished_requests():
        out, _ = step(s, token=7)
        s.step_succeeded(out)
    assert not s.step_failures
    assert_pool_clean(s)


@pytest.mark.parametrize("gdn_groups", [0, 2])
def test_a_failed_step_goes_back_as_recompute_and_drops_its_registrations(gdn_groups):
    s = make_scheduler(enable_prefix_caching=True, num_gdn_groups=gdn_groups, max_num_seqs=2)
    a, c, d = (Request(r, list(range(base, base + n)), 8) for r, n, base in (("a", 9, 100), ("c", 5, 300),
                                                                                ("d", 6, 400)))
    s.add_request(a)
    while a.num_output_tokens < 2:
        step(s, token=5)
    s.add_request(c)
    s.add_request(d)
    out = s.schedule()  # a decodes, c is admitted, d waits (max_num_seqs): this step fails
    assert list(out.num_scheduled_tokens) == ["a", "c"]
    registered = list(s.kv_cache.pool.registered_in_step)
    assert registered  # c's full prompt block at least
    a_tokens = list(a.all_token_ids)
    with pytest.raises(ValueError, match=r"\['c'\] ran in the failed step"):
        s.rollback_step(out, {"a": 1}, 2)
    assert s.rollback_step(out, {"a": a.num_output_tokens - 1, "c": 0}, max_consecutive_failures=2) == []
    # a and c: nothing computed, no pages, back at the front in serving order; a lost its last token.
    assert [r.request_id for r in s.waiting] == ["a", "c", "d"] and not s.running
    for r in (a, c):
        assert r.status is RequestStatus.PREEMPTED and r.num_computed_tokens == 0 and not r.block_ids
        assert r.state_slot is None and not r.spec_token_ids
    assert a.all_token_ids == a_tokens[:-1] and len(a.block_hashes) == len(a.all_token_ids) // 4
    # Nothing the step registered is reachable; d (not in the step) is as it was.
    assert all(s.kv_cache.pool.block_hash[block] is None for block in registered)
    assert d.status is RequestStatus.WAITING and not d.block_ids
    ends = {r: out.num_computed_tokens[r] + n for r, n in out.num_scheduled_tokens.items()}
    assert s.step_failures == {"a": (1, ends["a"]), "c": (1, ends["c"])}  # where the failed step took them
    serve_to_the_end(s)


def test_the_second_failure_in_a_row_ends_the_request_with_error():
    s = make_scheduler()
    a, b = make_request("a", 6), make_request("b", 6)
    s.add_request(a)
    s.add_request(b)
    out = s.schedule()
    assert s.rollback_step(out, {"a": 0, "b": 0}, 2) == []
    # One retried request at a time: b waits while a runs until it gets past its failure.
    out = s.schedule()
    assert list(out.num_scheduled_tokens) == ["a"]
    assert s.rollback_step(out, {"a": 0}, 2) == ["a"]
    assert a.status is RequestStatus.FINISHED_ERROR and a.status.finish_reason == "error"
    out = s.schedule()
    assert "a" not in s.requests and out.finished_req_ids == {"a"} and list(out.num_scheduled_tokens) == ["b"]
    s.update_from_output(out, {"b": [1]})
    s.step_succeeded(out)
    serve_to_the_end(s)
    assert b.status is RequestStatus.FINISHED_LENGTH_CAPPED


def test_a_retry_is_cleared_only_past_its_failure():
    """The re-prefill of a retry steps fine but does not break the row of failures; getting past it does."""
    s = make_scheduler(max_num_batched_tokens=4)
    a = make_request("a", 10)
    s.add_request(a)
    out, _ = step(s)
    s.step_succeeded(out)
    out = s.schedule()  # tokens 4..8 fail
    s.rollback_step(out, {"a": 0}, 2)
    assert s.step_failures == {"a": (1, 8)}
    for expected in ({"a": (1, 8)}, {"a": (1, 8)}, {}):  # cursor 4, 8 (not past), then 10
        out, _ = step(s)
        s.step_succeeded(out)
        assert s.step_failures == expected
    serve_to_the_end(s)


def test_a_schedule_that_raised_half_way_is_repaired():
    """schedule() raising after the pool handed out blocks to nobody: every request is rolled back and the
    pool and state rows are whole again."""
    s = make_scheduler(num_gdn_groups=1)
    a, b = make_request("a", 5), make_request("b", 7)
    s.add_request(a)
    step(s)
    s.add_request(b)
    pool = s.kv_cache.pool
    allocate = pool.allocate

    def allocate_then_raise(num):
        allocate(num)  # taken from the free queue, given to nobody
        raise RuntimeError("device error")

    pool.allocate = allocate_then_raise
    with pytest.raises(RuntimeError):
        s.schedule()
    del pool.allocate
    assert s.num_free_blocks < s.config.num_blocks - 1 - len(a.block_ids) - 1  # blocks owned by nobody
    with pytest.raises(ValueError, match="every unfinished request"):
        s.rollback_step(None, {"a": 1}, 2)
    assert s.rollback_step(None, {"a": 1, "b": 0}, 2) == []
    assert [r.request_id for r in s.waiting] == ["a", "b"] and not s.running
    assert_pool_clean(s)
    serve_to_the_end(s)


def test_bad_arguments_change_nothing():
    s = make_scheduler()
    a = make_request("a", 5)
    s.add_request(a)
    out = s.schedule()
    for args, match in [(({"zz": 0}, 2), "unknown"), (({"a": 3}, 2), r"\[0, 0\]"), (({"a": 0}, 0), ">= 1")]:
        with pytest.raises(ValueError, match=match):
            s.rollback_step(out, *args)
    assert a.status is RequestStatus.RUNNING and a.num_computed_tokens == 5 and not s.step_failures
