"""Invariants over random workloads and configurations (hypothesis)."""

import zlib
from collections import Counter

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from step_metadata_reference import reference_build_step_metadata

from qwen_ops.scheduling import Request, Scheduler, SchedulerConfig, build_step_metadata

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
VOCAB, EOS = 32, 0


def model_token(request_id: str, position: int) -> int:
    """A deterministic 'model': the token depends only on the request and the position."""
    return zlib.crc32(f"{request_id}:{position}".encode()) % VOCAB


@st.composite
def workloads(draw, with_aborts=True):
    block_size = draw(st.sampled_from([1, 2, 4, 8]))
    max_model_len = draw(st.integers(8, 64))
    spec = draw(st.sampled_from([0, 0, 1, 2]))
    max_num_seqs = draw(st.integers(1, 6))
    chunked = draw(st.booleans())
    budget = draw(st.integers(max(max_num_seqs, spec + 1, 2), 48))
    if not chunked:
        budget = max(budget, max_model_len)
    one_request = -(-max_model_len // block_size)  # one request alone always fits
    config = SchedulerConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=max_num_seqs,
        block_size=block_size,
        num_blocks=1 + draw(st.integers(one_request, 3 * one_request)),
        max_model_len=max_model_len,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=draw(st.booleans()),
        policy=draw(st.sampled_from(["fcfs", "priority"])),
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 3])),
        reserve_full_prompt=draw(st.booleans()),
        num_speculative_tokens=spec,
    )
    base = draw(st.lists(st.integers(1, VOCAB - 1), min_size=max_model_len, max_size=max_model_len))
    requests = []
    for i in range(draw(st.integers(1, 8))):
        length = draw(st.integers(1, max_model_len - 1))
        shared = draw(st.integers(0, length))
        prompt = base[:shared] + [(i * 7 + j) % (VOCAB - 1) + 1 for j in range(length - shared)]
        requests.append(dict(
            request_id=f"r{i}", prompt=prompt, max_tokens=draw(st.integers(1, 12)),
            arrival_step=draw(st.integers(0, 6)), priority=draw(st.integers(0, 2)),
            ignore_eos=draw(st.booleans()),
        ))
    aborts = {}
    if with_aborts:
        for r in requests:
            if draw(st.integers(0, 9)) == 0:
                aborts.setdefault(r["arrival_step"] + draw(st.integers(0, 8)), []).append(r["request_id"])
    return config, requests, aborts


def replay(config, requests, aborts, check=None, max_steps=3000):
    """Run a workload to the end; returns (outputs per request, finish reasons, preemption count)."""
    s = Scheduler(config)
    outputs = {r["request_id"]: [] for r in requests}
    reasons, preemptions = {}, 0
    for step_index in range(max_steps):
        for r in requests:
            if r["arrival_step"] == step_index:
                s.add_request(Request(r["request_id"], r["prompt"], r["max_tokens"], arrival_time=step_index,
                                      priority=r["priority"], eos_token_id=EOS, ignore_eos=r["ignore_eos"]))
        for request_id in aborts.get(step_index, ()):
            if s.abort_request(request_id):
                reasons[request_id] = "abort"
        if step_index > max(r["arrival_step"] for r in requests) and not s.has_unfinished_requests():
            break
        out = s.schedule()
        preemptions += len(out.preempted_req_ids)
        if check:
            check(s, out)
        sampled = {}
        for request_id in out.sampling_req_ids:
            request = s.requests[request_id]
            drafts = len(out.scheduled_spec_decode_tokens.get(request_id, ()))
            accepted = model_token(request_id, -request.num_tokens) % (drafts + 1)
            sampled[request_id] = [model_token(request_id, request.num_tokens + i) for i in range(accepted + 1)]
        for result in s.update_from_output(out, sampled):
            outputs[result.request_id] += result.new_token_ids
            if result.finished:
                reasons[result.request_id] = result.finish_reason
        if config.num_speculative_tokens:
            s.update_draft_token_ids({
                r.request_id: [model_token(r.request_id, r.num_tokens + i) for i in range(config.num_speculative_tokens)]
                for r in s.running
            })
    return outputs, reasons, preemptions, s


def check_invariants(s, out):
    config = s.config
    assert out.total_num_scheduled_tokens <= config.max_num_batched_tokens
    assert len(s.running) <= config.max_num_seqs
    assert all(n > 0 for n in out.num_scheduled_tokens.values())
    pool = s.kv_cache.pool
    owners = Counter(b for r in s.requests.values() for b in r.block_ids)
    assert 0 not in owners  # the null block is never owned
    for block in range(1, config.num_blocks):
        assert pool.ref_cnt[block] == owners[block]  # shared only through prefix-cache hits, never lost
    free = set(pool.free_queue)
    assert not free & set(owners)  # a free block has no owner
    assert len(free) + len(owners) == config.num_usable_blocks
    # A request samples iff its known tokens in this step reach the end of its sequence.
    spec = out.scheduled_spec_decode_tokens
    reaches_end = {
        r for r, n in out.num_scheduled_tokens.items()
        if out.num_computed_tokens[r] + n - len(spec.get(r, ())) == len(s.requests[r].all_token_ids)
    }
    assert set(out.sampling_req_ids) == reaches_end
    for request in s.requests.values():  # every request holds exactly what its cursor needs
        if request.block_ids:
            assert len(request.block_ids) * config.block_size >= request.num_computed_tokens
    if out.total_num_scheduled_tokens:
        meta = build_step_metadata(out)
        assert int(meta.query_start_loc[-1]) == out.total_num_scheduled_tokens
        assert (meta.slot_mapping >= config.block_size).all()  # never the null block's slots


@SETTINGS
@given(workloads())
def test_invariants_hold_and_every_request_ends(workload):
    config, requests, aborts = workload
    outputs, reasons, _, s = replay(config, requests, aborts, check=check_invariants)
    assert set(reasons) == {r["request_id"] for r in requests}  # finished or aborted, all of them
    assert not s.requests and s.num_free_blocks == config.num_usable_blocks
    for r in requests:
        if reasons[r["request_id"]] == "length":
            assert len(outputs[r["request_id"]]) == min(r["max_tokens"], config.max_model_len - len(r["prompt"]))


@SETTINGS
@given(workloads(with_aborts=False))
def test_preemption_does_not_change_outputs(workload):
    config, requests, aborts = workload
    tight_outputs, tight_reasons, _, _ = replay(config, requests, aborts)
    ample = SchedulerConfig(**{**config.__dict__, "num_blocks": 1 + len(requests) * (config.max_model_len + 2)})
    ample_outputs, ample_reasons, ample_preemptions, _ = replay(ample, requests, aborts)
    assert ample_preemptions == 0
    assert tight_outputs == ample_outputs
    assert tight_reasons == ample_reasons


def test_the_generated_workloads_do_preempt():
    # Guard against the property above passing vacuously.
    found = []

    @settings(max_examples=60, deadline=None, derandomize=True)
    @given(workloads(with_aborts=False))
    def count(workload):
        found.append(replay(*workload)[2])

    count()
    assert sum(1 for n in found if n) >= 5


def check_metadata_matches_reference(s, out):
    if not out.total_num_scheduled_tokens:
        return
    widest = max(len(out.block_ids[r]) for r in out.num_scheduled_tokens)
    for args in [(), (out.total_num_scheduled_tokens + 3, widest + 2)]:
        fast, slow = build_step_metadata(out, *args), reference_build_step_metadata(out, *args)
        for name in fast.__dataclass_fields__:
            a, b = getattr(fast, name), getattr(slow, name)
            if isinstance(a, torch.Tensor):
                assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), name
            else:
                assert a == b, name


@settings(SETTINGS, max_examples=60)  # every step builds the metadata four times: keep it short
@given(workloads(), st.booleans())
def test_step_metadata_matches_the_per_row_reference(workload, hybrid):
    config, requests, aborts = workload
    if hybrid:  # 3 GDN groups in the same pool: room for their pages, align mode when chunked
        caching = config.enable_prefix_caching and config.enable_chunked_prefill
        pages = 3 * ((2 if caching else 1) + config.num_speculative_tokens)
        config = SchedulerConfig(**{**config.__dict__, "enable_prefix_caching": caching, "num_gdn_groups": 3,
                                    "num_blocks": config.num_blocks + pages})
    replay(config, requests, aborts, check=check_metadata_matches_reference)
