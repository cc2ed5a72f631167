"""The model's side of "chunk" prefix caching: GDN checkpoints emitted in a prefill step, loaded for a hit.

Driven by the scheduler in "chunk" mode (16-token attention blocks, checkpoints every 64
tokens), on the tiny checkpoint (a GDN layer's state is 4x the KV of a 16-token block
there, as at Qwen3.5's real proportions it is far larger than a block's KV), with the GDN
states in flat state rows (``out.state_slots``). The engine does not run this mode yet;
these tests pin the pieces it will use: a checkpoint equals the state a run of the prefix
alone ends with, and a request that hits one gives the tokens and logprobs of a cold run.
"""
import pytest
import torch

from qwen_ops.model.network.kv_cache_groups import num_gdn_groups
from qwen_ops.model.network.qwen3_5 import Qwen35ForCausalLM
from qwen_ops.model.network.step_inputs import StepInputs
from qwen_ops.model.worker.gdn_checkpoint_rows import add_gdn_checkpoint_pools, checkpoint_saves, load_checkpoints
from qwen_ops.model.worker.kv_cache import allocate_caches
from qwen_ops.scheduling import Request, Scheduler, SchedulerConfig, build_step_metadata

SLOTS = 8


class Runner:
    """A scheduler in one mode plus the model and its caches: steps until every request finished."""

    def __init__(self, model, *, caching: bool, budget: int = 512):
        config = model.config
        self.model = model
        self.scheduler = Scheduler(SchedulerConfig(
            max_num_batched_tokens=budget, max_num_seqs=4, block_size=16, num_blocks=200, max_model_len=512,
            enable_prefix_caching=caching, num_gdn_groups=num_gdn_groups(config),
            mamba_cache_mode="chunk" if caching else None, num_gdn_checkpoints=SLOTS if caching else 0))
        self.caches = allocate_caches(config, num_blocks=200, block_size=16, num_state_slots=4, dtype=torch.float32,
                                      kv_dtype=torch.float32, device=torch.device("cpu"))
        add_gdn_checkpoint_pools(self.caches, config, SLOTS, torch.float32, torch.device("cpu"))
        self.outputs = []

    def serve(self, request_id, tokens, max_tokens=4):
        self.scheduler.add_request(Request(request_id, tokens, max_tokens))
        generated, logprobs, first = [], [], None
        while self.scheduler.has_unfinished_requests():
            out = self.scheduler.schedule()
            first = first or out
            meta = build_step_metadata(out)
            load_checkpoints(self.caches, [(slot, out.state_slots[r]) for r, slot in out.gdn_checkpoint_loads.items()])
            batch = StepInputs.build(meta, torch.device("cpu"), gdn_checkpoints=checkpoint_saves(out, meta, SLOTS))
            with torch.inference_mode():
                hidden = self.model.forward(batch, self.caches)
                logits = self.model.compute_logits(hidden[meta.logits_indices])
            sampled = {}
            for i, request_id_ in enumerate(meta.sampling_req_ids):
                token = int(logits[i].argmax())
                sampled[request_id_] = [token]
                generated.append(token)
                logprobs.append(float(torch.log_softmax(logits[i], -1)[token]))
            self.scheduler.update_from_output(out, sampled)
            self.outputs.append(out)
        return generated, logprobs, first


def _tokens(n, seed):
    return torch.randint(1, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_a_checkpoint_is_the_state_after_its_prefix(text_checkpoint):
    model = Qwen35ForCausalLM.from_pretrained(text_checkpoint)
    warm = Runner(model, caching=True)
    prompt = _tokens(150, 0)
    _, _, first = warm.serve("a", prompt, max_tokens=1)
    assert first.gdn_checkpoint_saves["a"] == [(64, 0), (128, 1)]
    for boundary, slot in ((64, 0), (128, 1)):
        cold = Runner(model, caching=False)
        scheduler, caches = cold.scheduler, cold.caches
        scheduler.add_request(Request("p", prompt[:boundary], 1))
        out = scheduler.schedule()  # the whole prefix in one prefill chunk
        meta = build_step_metadata(out)
        with torch.inference_mode():
            model.forward(StepInputs.build(meta, torch.device("cpu")), caches)
        row = out.state_slots["p"]
        for layer in model.config.linear_attention_layers:
            torch.testing.assert_close(warm.caches.checkpoint_ssm[layer][slot], caches.ssm_states[layer][row],
                                       atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(warm.caches.checkpoint_conv[layer][slot], caches.conv_states[layer][row],
                                       atol=1e-5, rtol=1e-5)
    # (Float32 throughout: the two runs differ only in the rounding of projections over 150 and 64/128 rows.)


def test_a_hit_on_a_checkpoint_gives_the_cold_run(text_checkpoint):
    model = Qwen35ForCausalLM.from_pretrained(text_checkpoint)
    shared = _tokens(140, 1)
    first, second = shared + _tokens(30, 2), shared + _tokens(80, 3)
    warm = Runner(model, caching=True, budget=100)  # chunks of 64 (aligned), checkpoints at 64 and 128
    warm.serve("a", first)
    tokens, logprobs, out = warm.serve("b", second, max_tokens=6)
    assert out.num_cached_tokens["b"] == 128 and "b" in out.gdn_checkpoint_loads  # below any align block
    assert out.prefix_hit_reasons["b"] == "no_attention_block"  # the block at 128..144 differs
    cold_tokens, cold_logprobs, _ = Runner(model, caching=False).serve("b", second, max_tokens=6)
    assert tokens == cold_tokens
    torch.testing.assert_close(torch.tensor(logprobs), torch.tensor(cold_logprobs), atol=2e-3, rtol=0)


def _step(query_start_loc, num_decodes, req_ids, saves):
    from types import SimpleNamespace

    meta = SimpleNamespace(query_start_loc=torch.tensor(query_start_loc), num_decodes=num_decodes, req_ids=req_ids)
    return SimpleNamespace(gdn_checkpoint_saves=saves), meta


def test_saves_of_later_prefill_rows_are_placed_after_the_decode_rows():
    """Two decode rows, then prefill rows of 100 and 130 tokens: a save's token end counts from the first
    prefill token (the chunk op sees the prefill rows only), so b's ends are 100 + 64 and 100 + 128."""
    out, meta = _step([0, 1, 2, 102, 232], 2, ["d0", "d1", "a", "b"], {"b": [(64, 3), (128, 4)], "a": [(64, 1)]})
    saves = checkpoint_saves(out, meta, SLOTS)
    assert saves.boundaries.tolist() == [[1, 1], [1, 2], [0, 1]]
    assert saves.ends.tolist() == [164, 228, 64]
    assert saves.slots.tolist() == [3, 4, 1]
    assert saves.final_seqs.numel() == saves.final_slots.numel() == 0


def test_a_save_at_a_rows_end_comes_from_the_state_row_wherever_the_row_started():
    """A row of 40 tokens (a chunk that started off the kernel's 64-token grid) saving the boundary it ends
    on, and a row of 128 saving 64 inside it and 128 at its end: the ends are the states the step leaves."""
    out, meta = _step([0, 1, 41, 169], 1, ["d0", "a", "b"], {"a": [(40, 2)], "b": [(64, 5), (128, 6)]})
    saves = checkpoint_saves(out, meta, SLOTS)
    assert saves.boundaries.tolist() == [[1, 1]] and saves.ends.tolist() == [104] and saves.slots.tolist() == [5]
    assert saves.final_seqs.tolist() == [0, 1] and saves.final_slots.tolist() == [2, 6]


@pytest.mark.parametrize("saves, match", [
    ({"d0": [(64, 0)]}, "'d0' saves at 64"),  # a decode row
    ({"a": [(32, 0)]}, "'a' saves at 32"),  # neither a chunk end nor the row's end
    ({"a": [(128, 0)]}, "prefill row of 100 tokens"),  # past the row
    ({"a": [(64, SLOTS)]}, rf"slot {SLOTS}"),  # no such slot
])
def test_a_save_that_is_not_a_chunk_end_of_a_prefill_row_is_refused(saves, match):
    out, meta = _step([0, 1, 101], 1, ["d0", "a"], saves)
    with pytest.raises(ValueError, match=match):
        checkpoint_saves(out, meta, SLOTS)
