"""The speculative decoder's bookkeeping on hand-built steps: the placeholder drafts it strips from a step and
the state rows it maps the scheduler's state slots to.

In the engine's runs both are seen only through greedy tokens, which the placeholder rows (always rejected)
and the state rows of the slot layout (overwritten by the GDN page tables) do not change; so here they are
checked directly.
"""
import torch

from qwen_ops.model.spec_decode.drafter import SpeculativeDecoder, strip_placeholder_drafts
from qwen_ops.scheduling import SchedulerOutput


def _step(scheduled: dict[str, list[int]], spec: dict[str, list[int]]) -> SchedulerOutput:
    return SchedulerOutput(
        num_scheduled_tokens={r: len(t) for r, t in scheduled.items()},
        total_num_scheduled_tokens=sum(len(t) for t in scheduled.values()),
        num_computed_tokens={r: 4 for r in scheduled}, token_ids=scheduled, block_ids={r: [1, 2] for r in scheduled},
        new_block_ids={}, group_block_ids={}, num_cached_tokens={}, scheduled_spec_decode_tokens=spec,
        state_slots={}, sampling_req_ids=list(scheduled), new_req_ids=[], resumed_req_ids=[],
        preempted_req_ids=set(), finished_req_ids=set(), num_free_blocks=3, block_size=4, num_speculative_tokens=2)


def test_placeholder_drafts_are_stripped_from_a_copy():
    out = _step({"a": [5, 8, 9], "b": [7, -1, -1]}, {"a": [8, 9], "b": [-1, -1]})
    stripped = strip_placeholder_drafts(out)
    assert stripped is not out
    assert stripped.token_ids == {"a": [5, 8, 9], "b": [7]}
    assert stripped.num_scheduled_tokens == {"a": 3, "b": 1}
    assert stripped.total_num_scheduled_tokens == 4
    assert stripped.scheduled_spec_decode_tokens == {"a": [8, 9]}
    # The scheduler's own output is untouched: it rolls the placeholder rows back as rejected drafts.
    assert out.token_ids["b"] == [7, -1, -1] and out.num_scheduled_tokens["b"] == 3


def test_a_step_without_placeholders_is_returned_as_it_is():
    out = _step({"a": [5, 8, 9]}, {"a": [8, 9]})
    assert strip_placeholder_drafts(out) is out
    empty = _step({"a": [5, 6, 7]}, {})
    assert strip_placeholder_drafts(empty) is empty


def test_state_slots_map_to_one_row_per_token_of_a_verify_row():
    decoder = SpeculativeDecoder(mtp=None, num_speculative_tokens=2)
    decoder.num_accepted["a"] = 3
    meta = type("Meta", (), {})()
    meta.state_indices = torch.tensor([0, 2, -1, 1], dtype=torch.int32)  # decodes a, b; prefills c (padding), d
    meta.req_ids, meta.num_decodes = ["a", "b", "c", "d"], 2
    decoder.lay_out_state_rows(meta)
    assert meta.state_indices.tolist() == [0, 6, -1, 3]  # slot s -> row 3 s (1 + k rows a slot), -1 kept
    assert meta.spec_state_indices.tolist() == [[0, 1, 2], [6, 7, 8]]
    assert meta.num_accepted_tokens.tolist() == [3, 1]  # b has not verified yet: its state is in row 0
    assert decoder.num_accepted["c"] == decoder.num_accepted["d"] == 1  # a prefill leaves it in row 0
