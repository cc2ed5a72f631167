"""Scheduling must not change results: chunking, batching and preemption give identical greedy tokens."""
import torch

from qwen_ops import LLM, SamplingParams

GREEDY = SamplingParams(max_tokens=10, temperature=0, detokenize=False)


def prompts(gen, lengths):
    return [torch.randint(1, 256, (n,), generator=gen).tolist() for n in lengths]


def tokens(outputs):
    return [o.outputs[0].token_ids for o in outputs]


def test_chunked_prefill_equals_whole_prompt(text_checkpoint, gen):
    batch = prompts(gen, [37, 70, 5])
    whole = LLM(text_checkpoint, num_blocks=64, max_num_seqs=4)
    chunked = LLM(text_checkpoint, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=8)
    expected = tokens(whole.generate(batch, GREEDY))
    assert tokens(chunked.generate(batch, GREEDY)) == expected
    # The chunked run really split prompts and mixed decodes with prefill chunks.
    assert max(s.num_tokens for s in chunked.step_stats) <= 8
    assert any(s.num_decodes and s.num_prefills for s in chunked.step_stats)


def test_mixed_batch_equals_each_request_alone(text_checkpoint, gen):
    batch = prompts(gen, [12, 30, 3, 21])
    llm = LLM(text_checkpoint, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=16)
    together = tokens(llm.generate(batch, GREEDY))
    alone = [tokens(llm.generate([p], GREEDY))[0] for p in batch]
    assert together == alone


def test_preemption_equals_plenty_of_blocks(text_checkpoint, gen):
    batch = prompts(gen, [30, 28, 25, 20])
    plenty = LLM(text_checkpoint, num_blocks=64, max_num_seqs=4)
    # 15 usable blocks of 8 tokens, 3 of them each request's GDN state pages (one per GDN group):
    # four requests of ~35 tokens cannot all stay resident.
    scarce = LLM(text_checkpoint, num_blocks=16, block_size=8, max_num_seqs=4)
    params = SamplingParams(max_tokens=20, temperature=0, detokenize=False)  # requests outgrow their blocks
    expected = tokens(plenty.generate(batch, params))
    assert tokens(scarce.generate(batch, params)) == expected
    assert sum(s.num_preempted for s in scarce.step_stats) > 0


def test_persistent_batch_follows_the_scheduler(text_checkpoint, gen):
    """The engine's step tensors come from the persistent rows, and those rows equal the scheduler's
    state at every step of a run with preemptions and requests finishing at different times."""
    from batch_checks import assert_rows_match_scheduler, assert_step_matches_metadata

    batch = prompts(gen, [30, 28, 25, 20, 6])
    params = [SamplingParams(max_tokens=n, temperature=0, detokenize=False) for n in (20, 3, 14, 20, 9)]
    plenty = LLM(text_checkpoint, num_blocks=64, max_num_seqs=4)
    scarce = LLM(text_checkpoint, num_blocks=16, block_size=8, max_num_seqs=4)
    rows, prepare = scarce.input_batch, scarce.input_batch.prepare
    checked = []

    def checking_prepare(out):
        assert_rows_match_scheduler(
            rows, scarce.scheduler, lambda r: out.num_computed_tokens.get(r.request_id, r.num_computed_tokens))
        prepared = prepare(out)
        assert_step_matches_metadata(prepared, out)
        assert_rows_match_scheduler(rows, scarce.scheduler, lambda r: r.num_computed_tokens)
        checked.append((len(out.preempted_req_ids), len(out.finished_req_ids)))
        return prepared

    rows.prepare = checking_prepare
    assert tokens(scarce.generate(batch, params)) == tokens(plenty.generate(batch, params))
    assert sum(p for p, _ in checked) > 0 and sum(f for _, f in checked) > 0
    assert len(checked) == len(scarce.step_stats)


def test_seeded_sampling_does_not_depend_on_the_batch(text_checkpoint, gen):
    batch = prompts(gen, [9, 14, 6])
    params = SamplingParams(max_tokens=8, temperature=0.9, top_p=0.9, top_k=50, seed=7, detokenize=False)
    llm = LLM(text_checkpoint, num_blocks=64, max_num_seqs=4)
    together = tokens(llm.generate(batch, params))
    assert together == [tokens(llm.generate([p], params))[0] for p in batch]


def test_streaming_yields_the_same_tokens(text_checkpoint, gen):
    batch = prompts(gen, [9, 14])
    llm = LLM(text_checkpoint, num_blocks=64, max_num_seqs=4)
    expected = tokens(llm.generate(batch, GREEDY))
    streamed = [[], []]
    finished = set()
    for chunk in llm.stream(batch, GREEDY):
        assert chunk.index not in finished
        streamed[chunk.index] += chunk.new_token_ids
        if chunk.finished:
            finished.add(chunk.index)
    assert streamed == expected and finished == {0, 1}
    assert tokens(llm.last_outputs) == expected
