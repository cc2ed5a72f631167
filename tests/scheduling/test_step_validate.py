"""StepMetadata.validate: the one host-side check of a step's values before the ops run on the trusted path."""
import dataclasses

import pytest
from sched_helpers import make_request, make_scheduler, step

from qwen_ops.scheduling import build_step_metadata

NUM_BLOCKS, BLOCK_SIZE, SLOTS = 16, 4, 4


def mixed_step():
    s = make_scheduler(max_num_batched_tokens=8, block_size=BLOCK_SIZE, num_blocks=NUM_BLOCKS,
                       num_gdn_groups=1, max_num_seqs=SLOTS)  # hybrid: SLOTS GDN state slots
    s.add_request(make_request("d", 5, max_tokens=10))
    step(s)
    s.add_request(make_request("p", 12, max_tokens=3, arrival=1.0, token=5))
    meta = build_step_metadata(s.schedule())
    assert meta.num_decodes == 1 and meta.num_prefills == 1
    return meta


def validate(meta):
    meta.validate(num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, num_state_slots=SLOTS)


def changed(meta, name, edit):
    t = getattr(meta, name).clone()
    edit(t)
    return dataclasses.replace(meta, **{name: t})


def test_a_scheduled_step_is_valid():
    validate(mixed_step())


@pytest.mark.parametrize("name, edit, message", [
    ("block_tables", lambda t: t.__setitem__((1, 0), NUM_BLOCKS), "block id 16 outside"),
    ("block_tables", lambda t: t.__setitem__((0, 0), -1), "block id -1 outside"),
    ("slot_mapping", lambda t: t.__setitem__(2, t[1]), "repeats an index"),
    ("slot_mapping", lambda t: t.__setitem__(0, NUM_BLOCKS * BLOCK_SIZE), "outside"),
    ("state_indices", lambda t: t.__setitem__(1, SLOTS), "state_indices"),
    ("state_indices", lambda t: t.__setitem__(1, t[0]), "repeats an index"),
    ("seq_lens", lambda t: t.__setitem__(0, t[0] + 1), "seq_lens"),
    ("context_lens", lambda t: t.__setitem__(1, -1), "context_lens"),
    ("query_start_loc", lambda t: t.__setitem__(-1, t[-1] + 1), "query_start_loc"),
])
def test_bad_values_are_named(name, edit, message):
    with pytest.raises(ValueError, match=message):
        validate(changed(mixed_step(), name, edit))


def test_decode_rows_have_one_token_and_tensors_stay_on_the_host():
    meta = mixed_step()
    with pytest.raises(ValueError, match="one token each"):
        validate(dataclasses.replace(meta, num_decodes=2))
    with pytest.raises(ValueError, match="on the CPU"):
        validate(meta.to("meta"))
    moved = meta.to("meta")
    assert all(getattr(moved, f).device.type == "meta" for f in ("input_ids", "block_tables", "slot_mapping"))
    assert moved.req_ids == meta.req_ids and moved.num_decodes == meta.num_decodes
