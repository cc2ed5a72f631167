"""Graph mode (``LLM(enforce_eager=False)``): the compiled forward gives eager's tokens, with no graph break.

Most cases compile with ``compile_backend="aot_eager"``: still ``fullgraph=True`` (a graph break fails the
step), still the padding to capture sizes and the static buffers, but no inductor codegen, which takes
~30 s a shape on this machine; one case compiles with inductor.

Tolerances: greedy tokens must be identical. Logprobs within LOGPROB_ATOL: padding changes the row count
M of every projection, and the BLAS sgemm may then sum over K in another order (float32 rounding,
~1e-6 relative a layer); inductor also fuses and reorders the float32 elementwise work (INDUCTOR_ATOL).
"""
import importlib.util
import logging

import pytest
import torch

from qwen_ops import LLM, SamplingParams
from qwen_ops.model.worker import graph_runner
from qwen_ops.model.worker.graph_runner import GraphModeError
from qwen_ops.model.worker.step_padding import capture_sizes, pad_step
from qwen_ops.scheduling import SchedulerOutput, build_step_metadata

LOGPROB_ATOL = 1e-4
INDUCTOR_ATOL = 1e-3
GRAPH = dict(enforce_eager=False, compile_backend="aot_eager")
ENGINE = dict(num_blocks=48, block_size=4, max_num_seqs=3, max_num_batched_tokens=8)  # chunked, mixed steps
PARAMS = SamplingParams(max_tokens=8, temperature=0, logprobs=3, detokenize=False)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test starts with dynamo's caches empty, so that what one test compiled cannot count towards
    another's recompile checks or add up to dynamo's per-process recompile limit."""
    torch._dynamo.reset()
    graph_runner.compiled_shapes.clear()
    yield


def prompts(lengths, seed=11):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 256, (n,), generator=gen).tolist() for n in lengths]


def generate(llm, batch, params=PARAMS):
    outs = llm.generate(batch, params)
    return [o.outputs[0].token_ids for o in outs], [o.outputs[0].logprobs for o in outs]


def assert_equal_outputs(eager, graph, atol=LOGPROB_ATOL):
    (tokens_e, lps_e), (tokens_g, lps_g) = eager, graph
    assert tokens_g == tokens_e
    for req_e, req_g in zip(lps_e, lps_g):
        if req_e is None:
            assert req_g is None
            continue
        for step_e, step_g in zip(req_e, req_g):
            assert step_e.keys() == step_g.keys()
            for token, lp in step_e.items():
                assert abs(step_g[token] - lp) <= atol, (token, lp, step_g[token])


def graphs_of(llm):
    return llm.llm_engine.model_runner.graphs


def compare(checkpoint, batch, params=PARAMS, atol=LOGPROB_ATOL, **engine):
    """Eager and graph engines of the same arguments on ``batch``: equal outputs; returns the graph engine."""
    eager = generate(LLM(checkpoint, **engine), batch, params)
    llm = LLM(checkpoint, **GRAPH, **engine)
    assert_equal_outputs(eager, generate(llm, batch, params), atol)
    g = graphs_of(llm)
    assert g.graph_steps > 0 and g.eager_steps == 0  # every step fit a graph: none ran eager
    return llm


# ----------------------------------------------------------------------------- padding


def one_step(tokens_by_request, computed, block_size=4):
    ids = list(tokens_by_request)
    blocks, next_block = {}, 1
    for r in ids:
        n = -(-(computed[r] + len(tokens_by_request[r])) // block_size)
        blocks[r] = list(range(next_block, next_block + n))
        next_block += n
    return SchedulerOutput(
        num_scheduled_tokens={r: len(t) for r, t in tokens_by_request.items()},
        total_num_scheduled_tokens=sum(map(len, tokens_by_request.values())), num_computed_tokens=computed,
        token_ids=dict(tokens_by_request), block_ids=blocks, new_block_ids=blocks, group_block_ids={},
        num_cached_tokens={}, scheduled_spec_decode_tokens={}, state_slots={r: i for i, r in enumerate(ids)},
        sampling_req_ids=ids, new_req_ids=ids, resumed_req_ids=[], preempted_req_ids=set(), finished_req_ids=set(),
        num_free_blocks=0, block_size=block_size)


def test_padding_is_whole_requests_that_touch_no_state():
    # Two decodes and two prefill chunks (3 and 2 tokens): 7 tokens, 4 requests.
    out = one_step({"d0": [5], "d1": [6], "p0": [1, 2, 3], "p1": [4, 4]}, {"d0": 3, "d1": 7, "p0": 0, "p1": 4})
    meta = build_step_metadata(out)
    padded = pad_step(meta, None, capture_sizes(16), block_table_width=6)
    m = padded.meta
    # decodes 2 -> 2, prefill sequences 2 -> 4 (one more for the leftover tokens, rounded), tokens 5 -> 8.
    assert (m.num_decodes, m.num_prefills, m.num_prefill_tokens) == (2, 4, 8)
    assert m.block_tables.shape == (6, 6)
    real = padded.real_rows
    assert torch.equal(m.input_ids[real], meta.input_ids)
    assert torch.equal(m.slot_mapping[real], meta.slot_mapping)
    assert torch.equal(m.positions[real], meta.positions)
    pad_tokens = torch.ones(m.num_actual_tokens, dtype=torch.bool)
    pad_tokens[real] = False
    assert bool((m.slot_mapping[pad_tokens] == -1).all())  # padding writes no KV page
    assert m.state_indices[4:].tolist() == [-1, -1]  # nor any GDN state
    assert not bool(m.has_initial_state[4:].any())
    assert int(m.query_start_loc[-1]) == m.num_actual_tokens
    assert torch.equal(m.seq_lens, m.context_lens + m.query_start_loc.diff())
    # The real requests keep their rows, lengths and tables.
    assert torch.equal(m.seq_lens[:4], meta.seq_lens)
    assert torch.equal(m.block_tables[:4, :meta.block_tables.shape[1]], meta.block_tables)


def test_padding_refuses_what_the_sizes_cannot_take():
    out = one_step({f"d{i}": [1] for i in range(5)}, {f"d{i}": 2 for i in range(5)})
    assert pad_step(build_step_metadata(out), None, capture_sizes(4), block_table_width=4) is None


def test_capture_sizes_are_few_and_reach_the_maximum():
    assert capture_sizes(8) == [1, 2, 4, 8]
    sizes = capture_sizes(520)
    assert sizes[:6] == [1, 2, 4, 8, 16, 24] and sizes[-1] == 520 and len(sizes) < 24
    with pytest.raises(ValueError, match="capture size"):
        capture_sizes(0)


@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None and importlib.util.find_spec("torchair") is not None,
                    reason="torch_npu and torchair are installed: the NPU-graph backend is available here")
def test_torchair_without_its_packages_is_refused_with_what_it_needs():
    """Without torch_npu/torchair (every machine but an Ascend one), compile_backend="torchair" raises
    GraphModeError naming them and the way out, not a bare ImportError; other names pass through."""
    with pytest.raises(GraphModeError, match="torch_npu and torchair.*enforce_eager=True"):
        graph_runner._torch_backend("torchair")
    assert graph_runner._torch_backend("aot_eager") == "aot_eager"


# ----------------------------------------------------------------------------- outputs equal eager


def test_mixed_batches_both_layouts(checkpoint):
    llm = compare(checkpoint, prompts([9, 5, 13, 3]), **ENGINE)
    assert any(s.num_decodes and s.num_prefills for s in llm.llm_engine.step_stats)  # mixed steps ran


def test_preemption_and_prefix_caching(text_checkpoint):
    shared = prompts([12])[0]
    batch = [shared + t for t in prompts([3, 5, 2], seed=4)] + prompts([10], seed=6)
    # Align mode: its block raised to 12 is what makes 20 blocks preempt (chunk mode: test_chunk_prefix_caching_mode).
    llm = compare(text_checkpoint, batch, num_blocks=20, block_size=4, max_num_seqs=4, max_num_batched_tokens=16,
                  enable_prefix_caching=True, mamba_cache_mode="align")
    stats = llm.llm_engine.step_stats
    assert sum(s.num_preempted for s in stats) > 0


def test_chunk_prefix_caching_mode(text_checkpoint):
    """The default prefix-caching mode ("chunk"): hits of 64-token GDN checkpoints give the eager engine's
    tokens in graph mode. The steps that save checkpoints run eagerly (the graphs save none); the others
    (the decode steps, the hit's prefill) run in graphs."""
    shared = prompts([70], seed=5)[0]
    batch = [shared + t for t in prompts([6, 9], seed=8)]
    engine = dict(num_blocks=40, block_size=16, max_num_seqs=2, max_num_batched_tokens=64)
    params = SamplingParams(max_tokens=4, temperature=0, logprobs=3, detokenize=False)

    def run(llm):  # one request after the other: the second hits the first's checkpoint at 64
        outs = [llm.generate([p], params)[0] for p in batch]
        assert [o.num_cached_tokens for o in outs] == [0, 64]
        return [o.outputs[0].token_ids for o in outs], [o.outputs[0].logprobs for o in outs]

    eager = run(LLM(text_checkpoint, **engine))
    llm = LLM(text_checkpoint, **GRAPH, **engine)
    assert llm.scheduler_config.gdn_cache_mode == "chunk"
    assert_equal_outputs(eager, run(llm))
    assert graphs_of(llm).graph_steps > 0


def test_int8_kv_cache(text_checkpoint):
    compare(text_checkpoint, prompts([7, 11]), kv_cache_dtype="int8", **ENGINE)


def test_moe(moe_text_checkpoint):
    compare(moe_text_checkpoint, prompts([6, 10]), **ENGINE)


def test_mtp_drafter_in_graphs(text_mtp_checkpoint):
    spec = {"method": "mtp", "num_speculative_tokens": 2}
    llm = compare(text_mtp_checkpoint, prompts([9, 5, 13]), speculative_config=spec, **ENGINE)
    drafter = llm.llm_engine.model_runner.spec.graphs
    assert drafter.graph_steps > 0 and drafter.eager_steps == 0


def test_inductor(text_checkpoint):
    # One 2-token prompt, then decodes: the two shapes of the engine's warm-up (a 2-token prefill, a decode),
    # each ~50 s of inductor codegen on 2 shared cores.
    params = SamplingParams(max_tokens=4, temperature=0, logprobs=2, detokenize=False)
    engine = dict(num_blocks=16, block_size=4, max_num_seqs=1, max_num_batched_tokens=8)
    eager = generate(LLM(text_checkpoint, **engine), prompts([2]), params)
    llm = LLM(text_checkpoint, enforce_eager=False, compile_backend="inductor", **engine)
    assert_equal_outputs(eager, generate(llm, prompts([2]), params), INDUCTOR_ATOL)
    g = graphs_of(llm)
    assert g.first_compile_s > 0 and g.eager_steps == 0 and len(g.shapes) == 2


# ----------------------------------------------------------------------------- bounds, caching, bad input


@pytest.mark.parametrize("mode", ["align", "chunk"])
def test_bounded_graphs_and_no_recompile_in_a_second_engine(text_checkpoint, mode):
    engine = dict(num_blocks=96, block_size=4, max_num_seqs=4, max_num_batched_tokens=16, mamba_cache_mode=mode)
    batch = prompts([3, 17, 8, 25, 1, 12, 6, 30, 9, 2, 14, 21], seed=3)
    params = SamplingParams(max_tokens=6, temperature=0, detokenize=False)
    eager = generate(LLM(text_checkpoint, **engine), batch, params)
    llm = LLM(text_checkpoint, **GRAPH, **engine)
    assert generate(llm, batch, params)[0] == eager[0]
    shapes = graphs_of(llm).shapes
    assert len(shapes) <= 16, len(shapes)  # a dozen requests of mixed lengths, many batch shapes
    before = len(graph_runner.compiled_shapes)
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    again = LLM(text_checkpoint, **GRAPH, **engine)
    assert generate(again, batch, params)[0] == eager[0]
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == frames  # no recompile
    assert len(graph_runner.compiled_shapes) == before
    assert graphs_of(again).shapes == shapes


def test_oversize_step_runs_eager_and_says_so_once(text_checkpoint, caplog):
    engine = dict(num_blocks=48, block_size=4, max_num_seqs=4, max_num_batched_tokens=8)
    batch = prompts([2, 3, 4, 5], seed=8)
    eager = generate(LLM(text_checkpoint, **engine), batch)
    with caplog.at_level(logging.WARNING, logger="qwen_ops.engine"):
        llm = LLM(text_checkpoint, **GRAPH, max_capture_size=2, **engine)
        graph = generate(llm, batch)
    assert_equal_outputs(eager, graph)
    g = graphs_of(llm)
    assert g.eager_steps > 1 and g.graph_steps > 0
    warnings = [r for r in caplog.records if "exceeds the largest capture size 2" in r.getMessage()]
    assert len(warnings) == 1


def test_bad_arguments(text_checkpoint):
    with pytest.raises(ValueError, match="compile_backend"):
        LLM(text_checkpoint, enforce_eager=False, compile_backend="no-such-backend", **ENGINE)
    with pytest.raises(ValueError, match="enforce_eager"):
        LLM(text_checkpoint, enforce_eager="yes", **ENGINE)
    with pytest.raises(ValueError, match="max_capture_size"):
        LLM(text_checkpoint, enforce_eager=False, max_capture_size=0, **ENGINE)


def test_a_backend_that_cannot_compile_fails_at_construction(text_checkpoint):
    @torch._dynamo.register_backend(name="qwen_ops_test_failing")
    def failing(gm, example_inputs):  # noqa: ARG001
        raise NotImplementedError("this backend compiles nothing")

    with pytest.raises(GraphModeError, match="enforce_eager=True"):
        LLM(text_checkpoint, enforce_eager=False, compile_backend="qwen_ops_test_failing", **ENGINE)


def test_defaults_by_device(text_checkpoint):
    llm = LLM(text_checkpoint, **ENGINE)
    config = llm.llm_engine.engine_config
    assert config.enforce_eager and graphs_of(llm) is None  # the CPU default, from bench/RESULTS.md
    assert "enforce_eager=True (the CPU default" in llm.llm_engine.budget_summary()


def test_device_check_graph_part_parses_and_its_script_imports():
    import importlib.util
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    subprocess.run(["bash", "-n", str(repo / "bench" / "device_check.sh")], check=True)
    assert "bench_graph_mode.py --device cuda" in (repo / "bench" / "device_check.sh").read_text()
    spec = importlib.util.spec_from_file_location("bench_graph_mode", repo / "bench" / "e2e" / "bench_graph_mode.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert len(module.workload(3, [4, 7])) == 3
