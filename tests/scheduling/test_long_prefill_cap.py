"""``long_prefill_token_threshold`` caps the chunk of a request that is already running.

The scheduler applies the cap in two places: to waiting requests as they are
admitted and to running requests still in their prefill. The first step of a
batch only exercises the first; these steps exercise the second.
"""
from sched_helpers import make_request, make_scheduler, step


def test_running_prefill_is_capped_while_others_compete():
    s = make_scheduler(max_num_batched_tokens=16, long_prefill_token_threshold=5)
    s.add_request(make_request("a", 12))
    s.add_request(make_request("b", 12, arrival=1.0))
    out, _ = step(s)
    assert out.num_scheduled_tokens == {"a": 5, "b": 5}  # admitted from the waiting queue
    out, _ = step(s)
    # Both now running, 7 prompt tokens left each, 16 of budget: the cap, not the budget, decides.
    assert out.new_req_ids == []
    assert out.num_scheduled_tokens == {"a": 5, "b": 5}
    out, _ = step(s)
    assert out.num_scheduled_tokens == {"a": 2, "b": 2}  # the rest of each prompt


def test_running_prefill_alone_is_not_capped():
    """With nobody else running or waiting the cap is off, for a running request too (as in vLLM 0.33)."""
    s = make_scheduler(max_num_batched_tokens=16, long_prefill_token_threshold=5)
    s.add_request(make_request("a", 30))
    s.add_request(make_request("b", 3, arrival=1.0, max_tokens=1))
    out, results = step(s)
    assert out.num_scheduled_tokens == {"a": 5, "b": 3}
    assert [r.request_id for r in results if r.finished] == ["b"]  # max_tokens 1: done after its prefill
    out, _ = step(s)
    assert out.num_scheduled_tokens == {"a": 16}  # alone now: the budget, not the cap, decides
