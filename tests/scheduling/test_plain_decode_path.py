"""update_from_output's inline path for a plain decode token (Request.plain_append_below,
Request.finish_token_ids) must stop, hash and report exactly as the general path does."""

import pytest
from sched_helpers import make_request, make_scheduler, step

from qwen_ops.scheduling import Request


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_every_completed_block_is_hashed_and_the_length_limit_stops_the_request(prefix_caching):
    s = make_scheduler(enable_prefix_caching=prefix_caching)  # block_size 4
    s.add_request(make_request("a", 3, max_tokens=14))
    request = s.requests["a"]
    finished = []
    for _ in range(14):
        _, results = step(s, token=5)
        assert [r.request_id for r in results] == ["a"] and results[0].new_token_ids == [5]
        if results[0].finished:
            finished.append(results[0].finish_reason)
            break
        # With caching, a block is hashed in the very step its last token arrives (the inline
        # path must hand such a token to the general path); without caching, never.
        expected = len(request.all_token_ids) // 4 if prefix_caching else 0
        assert len(request.block_hashes) == expected
    assert finished == ["length"]
    assert request.num_output_tokens == 14


def test_a_later_request_hits_the_blocks_completed_during_decode():
    s = make_scheduler(enable_prefix_caching=True)
    s.add_request(make_request("a", 3, max_tokens=20))
    # The prefill and 9 decodes: 13 tokens, and the 10th step computed position 11, so the
    # blocks of positions 0-11 are hashed (in update_from_output) and cached (in schedule()).
    for _ in range(10):
        step(s, token=7)
    prompt = s.requests["a"].all_token_ids[:12] + [9]
    s.add_request(Request("b", prompt, 2))
    out = s.schedule()
    assert out.num_cached_tokens["b"] == 12


@pytest.mark.parametrize("kwargs, token, reason", [
    (dict(eos_token_id=9), 9, "stop"),
    (dict(eos_token_id=9, ignore_eos=True), 9, None),
    (dict(stop_token_ids=(4, 6)), 6, "stop"),
    (dict(eos_token_id=9, stop_token_ids=(4,)), 5, None),
])
def test_eos_and_stop_tokens_stop_a_decode(kwargs, token, reason):
    s = make_scheduler()
    s.add_request(make_request("a", 4, max_tokens=10, **kwargs))
    step(s, token=5)  # the prefill's token
    _, results = step(s, token=token)
    assert results[0].new_token_ids == [token]
    assert results[0].finish_reason == reason
    assert results[0].stop_reason == (token if reason and "stop_token_ids" in kwargs else None)
    assert ("a" in s.requests) == (reason is None)
