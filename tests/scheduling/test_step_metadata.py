"""The Ascend step layout: decode rows first, slots, positions, attention state, GDN slots."""

import pytest
import torch
from sched_helpers import make_request, make_scheduler, step
from step_metadata_reference import reference_attention_state

from qwen_ops.scheduling import AttentionState, build_step_metadata
from qwen_ops.scheduling.step_metadata import attention_state


def test_layout_puts_decodes_first_and_maps_slots():
    s = make_scheduler(max_num_batched_tokens=6, block_size=4, num_blocks=16)
    s.add_request(make_request("d", 4, max_tokens=10))
    step(s)
    s.add_request(make_request("p", 12, max_tokens=3, arrival=1.0, token=5))
    out = s.schedule()
    m = build_step_metadata(out)
    d_blocks, p_blocks = out.block_ids["d"], out.block_ids["p"]

    assert m.req_ids == ["d", "p"]
    assert (m.num_decodes, m.num_decode_tokens, m.num_prefills, m.num_prefill_tokens) == (1, 1, 1, 5)
    assert m.query_start_loc.tolist() == [0, 1, 6]
    assert m.seq_lens.tolist() == [5, 5] and m.context_lens.tolist() == [4, 0]
    assert m.positions.tolist() == [4, 0, 1, 2, 3, 4]
    assert m.token_request_indices.tolist() == [0, 1, 1, 1, 1, 1]
    assert m.input_ids.tolist() == [1, 5, 5, 5, 5, 5]
    expected_slots = [d_blocks[1] * 4 + 0] + [p_blocks[0] * 4 + i for i in range(4)] + [p_blocks[1] * 4]
    assert m.slot_mapping.tolist() == expected_slots
    assert m.block_tables.dtype == torch.int32 and m.block_tables.shape == (2, 2)
    assert m.block_tables[0].tolist() == d_blocks
    assert m.logits_indices.tolist() == [0]  # p's partial chunk samples nothing
    assert m.sampling_req_ids == ["d"]
    assert m.attn_state is AttentionState.ChunkedPrefill
    assert m.query_start_loc.dtype == torch.int32 and m.seq_lens.dtype == torch.int32


def test_a_decode_listed_after_a_prefill_is_moved_first():
    s = make_scheduler(max_num_batched_tokens=8, long_prefill_token_threshold=4)
    s.add_request(make_request("p", 20, token=3))
    s.add_request(make_request("d", 2, arrival=1.0, token=4))
    step(s, token=9)  # p: 4-token chunk, d: whole prompt, samples 9
    out = s.schedule()
    assert list(out.num_scheduled_tokens.items()) == [("p", 4), ("d", 1)]
    m = build_step_metadata(out)
    assert m.req_ids == ["d", "p"]
    assert m.query_start_loc.tolist() == [0, 1, 5]
    assert m.positions.tolist() == [2, 4, 5, 6, 7]
    assert m.input_ids.tolist() == [9, 3, 3, 3, 3]
    assert m.logits_indices.tolist() == [0]


def test_padding_rows_and_block_table_width():
    s = make_scheduler()
    s.add_request(make_request("a", 3))
    out = s.schedule()
    m = build_step_metadata(out, num_padded_tokens=8, max_blocks_per_request=5)
    assert m.slot_mapping.tolist()[3:] == [-1] * 5
    assert m.token_request_indices.tolist()[3:] == [-1] * 5
    assert m.block_tables.shape == (1, 5) and m.block_tables[0, 1:].tolist() == [0, 0, 0, 0]
    assert m.num_actual_tokens == 3
    with pytest.raises(ValueError, match="num_padded_tokens"):
        build_step_metadata(out, num_padded_tokens=2)
    with pytest.raises(ValueError, match="max_blocks_per_request"):
        build_step_metadata(out, max_blocks_per_request=0)


def test_attention_states():
    s = make_scheduler()
    s.add_request(make_request("a", 4, max_tokens=10))
    s.add_request(make_request("b", 4, max_tokens=10, arrival=1.0))
    out = s.schedule()
    assert build_step_metadata(out).attn_state is AttentionState.PrefillNoCache
    s.update_from_output(out, {"a": [1], "b": [1]})
    out = s.schedule()
    assert build_step_metadata(out).attn_state is AttentionState.DecodeOnly
    s.update_from_output(out, {"a": [1], "b": [1]})
    s.add_request(make_request("c", 4, arrival=2.0))
    assert build_step_metadata(s.schedule()).attn_state is AttentionState.ChunkedPrefill

    s = make_scheduler(enable_chunked_prefill=False, max_num_batched_tokens=64)
    s.add_request(make_request("a", 4, max_tokens=10))
    step(s)
    s.add_request(make_request("b", 4, arrival=1.0))
    assert build_step_metadata(s.schedule()).attn_state is AttentionState.PrefillCacheHit


def test_spec_decoding_state_and_logits_rows():
    s = make_scheduler(num_speculative_tokens=2)
    s.add_request(make_request("a", 4, max_tokens=10))
    s.add_request(make_request("b", 4, max_tokens=10, arrival=1.0))
    step(s)
    s.update_draft_token_ids({"a": [3, 4], "b": [5]})
    out = s.schedule()
    m = build_step_metadata(out)
    assert m.attn_state is AttentionState.SpecDecoding
    assert m.num_decodes == 2 and m.num_decode_tokens == 5
    assert m.logits_indices.tolist() == [0, 1, 2, 3, 4]  # every draft row plus the bonus row
    assert m.input_ids.tolist() == [1, 3, 4, 1, 5]


def test_gdn_state_pages_follow_requests():
    # 3 GDN groups and attention share 8 usable blocks: a 4-token request takes one page per
    # GDN group plus one attention block, so two fit and r2 waits for blocks.
    s = make_scheduler(num_gdn_groups=3, max_num_seqs=4, num_blocks=9)
    for i in range(3):
        s.add_request(make_request(f"r{i}", 4, max_tokens=1, arrival=float(i)))
    out = s.schedule()
    assert out.group_block_ids == {"r0": ([1], [2], [3], [4]), "r1": ([5], [6], [7], [8])}
    assert out.state_slots == {"r0": 0, "r1": 1}  # compact state rows, for engines keeping states apart
    assert out.num_free_blocks == 0
    m = build_step_metadata(out)
    assert m.state_indices.tolist() == [0, 1]
    assert m.has_initial_state.tolist() == [False, False]
    s.update_from_output(out, {"r0": [1], "r1": [1]})  # both finish (max_tokens=1)
    out = s.schedule()
    # Freed group by group, each to the front of the free queue: the last freed is reused first.
    assert out.group_block_ids == {"r2": ([8], [7], [6], [5])}
    assert out.state_slots == {"r2": 1}  # the most recently freed row is reused first
    assert s.num_free_blocks == 4


def test_has_initial_state_after_a_chunk():
    s = make_scheduler(num_gdn_groups=3, max_num_batched_tokens=4)
    s.add_request(make_request("a", 10))
    step(s)
    m = build_step_metadata(s.schedule())
    assert m.has_initial_state.tolist() == [True]
    assert m.context_lens.tolist() == [4]


def test_empty_step_is_refused():
    s = make_scheduler()
    with pytest.raises(ValueError, match="no tokens"):
        build_step_metadata(s.schedule())


def test_a_padded_one_token_prompt_is_a_prefill_row_with_zero_placeholder_ids():
    # b, a new 1-token prompt, joins the decode a padded with 2 draft placeholders (-1 in the output).
    s = make_scheduler(num_speculative_tokens=2)
    s.add_request(make_request("a", 4, max_tokens=10))
    step(s)
    s.update_draft_token_ids({"a": [3, 4]})
    s.add_request(make_request("b", 1, max_tokens=10, arrival=1.0))
    out = s.schedule()
    assert out.scheduled_spec_decode_tokens == {"a": [3, 4], "b": [-1, -1]}
    m = build_step_metadata(out, num_padded_tokens=8)
    assert (m.num_decodes, m.num_prefills) == (1, 1)
    assert m.attn_state is AttentionState.SpecDecoding  # one valid token per request; the state ignores rows
    assert m.input_ids.tolist() == [1, 3, 4, 7, 0, 0, 0, 0]  # placeholders and padding run as token 0
    assert m.has_initial_state.tolist() == [True, False]
    assert m.logits_indices.tolist() == [0, 1, 2, 3, 4, 5]


A = AttentionState


@pytest.mark.parametrize(
    "context, query, drafts, chunked, expected",
    [
        ([0, 0], [3, 1], [0, 0], True, A.PrefillNoCache),  # no row has context
        ([0, 4], [3, 1], [0, 0], True, A.ChunkedPrefill),  # one row has context
        ([4, 0], [1, 3], [0, 0], False, A.PrefillCacheHit),  # ... the first one, chunked prefill off
        ([4, 5], [1, 1], [0, 0], True, A.DecodeOnly),  # every row one token with context
        ([4, 5], [1, 2], [0, 0], True, A.ChunkedPrefill),  # the last row two tokens
        ([4, 5], [2, 1], [0, 0], False, A.PrefillCacheHit),  # the first row two tokens
        ([4, 0], [1, 1], [0, 0], True, A.DecodeOnly),  # every query one token, a new prompt included
        ([4, 5], [3, 2], [2, 1], True, A.SpecDecoding),  # every row one valid token plus drafts
        ([4, 5], [3, 1], [2, 0], True, A.SpecDecoding),  # a row without drafts is still a decode
        ([4, 5], [3, 3], [2, 1], True, A.ChunkedPrefill),  # the last row has two valid tokens
        ([4, 5], [3, 3], [1, 2], False, A.PrefillCacheHit),  # the first row has two valid tokens
        ([4, 0], [3, 3], [2, 2], True, A.SpecDecoding),  # one valid token each, a padded new prompt included
    ],
)
def test_attention_state_rule_boundaries(context, query, drafts, chunked, expected):
    assert attention_state(context, query, drafts, chunked) is expected
    assert reference_attention_state(context, query, drafts, chunked) is expected


@pytest.mark.parametrize(
    "context, query, hits, expected",
    [
        ([16, 32], [4, 3], [16, 32], A.PrefillCacheHit),  # every request starts at its prefix hit
        ([16, 0], [4, 3], [16, 0], A.ChunkedPrefill),  # one starts from scratch
        ([16, 20], [4, 1], [16, 0], A.ChunkedPrefill),  # a decode joins
        ([16, 32], [4, 3], [16, 16], A.ChunkedPrefill),  # one continues past its hit (an earlier chunk)
        ([16, 32], [1, 1], [16, 32], A.DecodeOnly),  # one-token tails after their hits: the query rule first
    ],
)
def test_prefix_hit_prefills_are_prefill_cache_hit(context, query, hits, expected):
    assert attention_state(context, query, [0] * len(query), True, hits) is expected
    assert reference_attention_state(context, query, [0] * len(query), True, hits) is expected


def test_a_repeated_prompt_on_a_hybrid_model_is_a_prefill_cache_hit_step():
    s = make_scheduler(num_gdn_groups=3, enable_prefix_caching=True, max_num_batched_tokens=32, num_blocks=40)
    s.add_request(make_request("a", 10, max_tokens=1))
    while s.has_unfinished_requests():
        step(s)
    s.add_request(make_request("b", 10, max_tokens=1))
    out = s.schedule()
    assert out.num_cached_tokens == {"b": 8}  # two blocks of 4; the last token is always computed
    assert build_step_metadata(out).attn_state is AttentionState.PrefillCacheHit


def test_bad_arguments_are_named():
    s = make_scheduler()
    s.add_request(make_request("a", 3))
    out = s.schedule()
    with pytest.raises(TypeError, match="scheduler_output"):
        build_step_metadata(None)
    with pytest.raises(TypeError, match="num_padded_tokens"):
        build_step_metadata(out, num_padded_tokens=5.5)
    with pytest.raises(TypeError, match="max_blocks_per_request"):
        build_step_metadata(out, max_blocks_per_request=2.5)
    with pytest.raises(ValueError, match="num_padded_tokens"):
        build_step_metadata(out, num_padded_tokens=-1)
