"""A model-level prototype of MTP speculative decoding for one request: greedy tokens equal plain greedy.

Until the engine wires speculation in, this drives the pieces by hand the way
the engine is to (see the mtp branch's report): prefill; then every step one
target forward verifies [last token, d_1..d_k] as one row of 1 + k tokens
(attention: a short chunk over the cached context; GDN: the ops'
speculative-decoding form on 1 + k state rows, starting from row
num_accepted - 1), ``rejection_sample`` keeps the accepted prefix plus one
token, and the MTP head drafts the next k tokens (its first pass over the
verify rows with the inputs shifted by one, then one decode per further
draft). Only the GDN mixers' decode path is swapped for the speculative form
here; everything else is the model's own code.
"""
import pytest
import torch
import torch.nn.functional as F
from step_batches import prompt_batch, request_batch

import qwen_ops.ops as ops
from qwen_ops import LLM, SamplingParams
from qwen_ops.model.network.gdn import GatedDeltaNet
from qwen_ops.model.worker.kv_cache import allocate_caches
from qwen_ops.ops.gdn.reference_gating import gated_rms_norm
from qwen_ops.model.network.mtp import Qwen35MTP, add_mtp_kv_caches
from qwen_ops.model.network.qwen3_5 import Qwen35ForCausalLM
from qwen_ops.model.sample.rejection_sampler import rejection_sample
from qwen_ops.model.spec_decode.stats import SpecDecodingStats

BLOCK_SIZE, NUM_BLOCKS = 4, 16
NEW = 14  # tokens generated and compared
GREEDY = SamplingParams(temperature=0)


def gdn_verify(layer: GatedDeltaNet, x, batch, caches, rows, accepted, backend):
    """The GDN mixer over verify rows only, with the speculative-decoding form of the two stateful ops."""
    t = x.shape[0]
    mixed = F.linear(x, layer.qkv_w)
    z = F.linear(x, layer.z_w)
    g, beta = ops.fused_gdn_gating(layer.A_log, F.linear(x, layer.a_w).contiguous(),
                                   F.linear(x, layer.b_w).contiguous(), layer.dt_bias)
    mixed = ops.causal_conv1d_update(mixed, caches.conv_states[layer.layer], layer.conv_w, cache_indices=rows,
                                     query_start_loc=batch.query_start_loc, num_accepted_tokens=accepted,
                                     activation="silu", backend=backend)
    q = mixed[:, : layer.key_dim].reshape(1, t, layer.nk, layer.dk)
    k = mixed[:, layer.key_dim: 2 * layer.key_dim].reshape(1, t, layer.nk, layer.dk)
    v = mixed[:, 2 * layer.key_dim:].reshape(1, t, layer.nv, layer.dv)
    o, _ = ops.fused_recurrent_gated_delta_rule(
        q.contiguous(), k.contiguous(), v.contiguous(), g[None].contiguous(), beta[None].contiguous(),
        initial_state=caches.ssm_states[layer.layer], cu_seqlens=batch.query_start_loc, ssm_state_indices=rows,
        num_accepted_tokens=accepted, use_qk_l2norm_in_kernel=True, backend=backend)
    o = gated_rms_norm(o[0], z.view(t, layer.nv, layer.dv), layer.norm_w, layer.eps)
    return F.linear(o.reshape(t, layer.value_dim), layer.out_w)


def verify_forward(target, batch, caches, rows, accepted, backend):
    """``target.forward`` with each GDN mixer's forward swapped for ``gdn_verify`` for this call."""
    mixers = [entry[0] for entry in target.layers if isinstance(entry[0], GatedDeltaNet)]
    for m in mixers:
        m.forward = (lambda x, b, c, m=m: gdn_verify(m, x, b, c, rows, accepted, backend))
    try:
        return target.forward(batch, caches)
    finally:
        for m in mixers:
            del m.forward


def chunk_batch(tokens, first_position, num_blocks):
    """One request's rows at positions first_position.. as a chunk over its cached context (blocks 1..)."""
    return request_batch(tokens, first_position, BLOCK_SIZE, num_blocks)


def draft(mtp, caches, tokens, first_position, hidden, sample_row, k):
    """k greedy drafts: the first pass over ``tokens`` (already shifted) with the target's hidden states, sampled
    at ``sample_row``; then one decode per further draft on the MTP's own hidden state."""
    batch = chunk_batch(tokens, first_position, NUM_BLOCKS - 1)
    batch.logits_indices = torch.tensor([sample_row])
    token, out = mtp.greedy_draft(batch, hidden, caches, step=0)
    drafts, position, h = [int(token)], first_position + sample_row + 1, out[sample_row: sample_row + 1]
    for step in range(1, k):
        token, h = mtp.greedy_draft(chunk_batch([drafts[-1]], position, NUM_BLOCKS - 1), h, caches, step=step)
        drafts.append(int(token))
        position += 1
    return drafts


def speculative_greedy(path, prompt, max_new_tokens, k, backend=None, drafter=None):
    """Greedy generation with k MTP drafts a step (or ``drafter(seq, k)`` in place of the MTP head).

    Returns (new tokens, tokens emitted per verify step, SpecDecodingStats, [(sequence so far, its drafts)])."""
    target = Qwen35ForCausalLM.from_pretrained(path, backend=backend)
    mtp = Qwen35MTP.from_pretrained(path, target, backend=backend)
    caches = allocate_caches(target.config, num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, num_state_slots=1 + k,
                             dtype=target.dtype, kv_dtype=target.dtype, device=target.device)
    add_mtp_kv_caches(caches, target.config, mtp.layer_ids, target.dtype, target.device)
    rows = torch.arange(1 + k, dtype=torch.int32)[None]  # the request's 1 + k GDN state rows
    stats = SpecDecodingStats(k)

    hidden = target.forward(prompt_batch(prompt, BLOCK_SIZE, state_slot=0), caches)
    seq = prompt + [int(target.compute_logits(hidden[-1:]).argmax())]
    drafts = draft(mtp, caches, prompt[1:] + [seq[-1]], 0, hidden, len(prompt) - 1, k) if drafter is None \
        else drafter(seq, k)
    accepted = torch.tensor([1], dtype=torch.int32)  # the prefill left its state in row 0
    per_step, history = [], [(list(seq), drafts)]
    while len(seq) - len(prompt) < max_new_tokens:
        start = len(seq) - 1  # position of the last token, not yet run through the target
        batch = chunk_batch([seq[-1]] + drafts, start, NUM_BLOCKS - 1)
        hidden = verify_forward(target, batch, caches, rows, accepted, backend)
        result = rejection_sample(target.compute_logits(hidden), [drafts], [GREEDY], [None])
        emitted, a = result.token_ids[0], result.num_accepted[0]
        stats.observe(len(drafts), a)
        per_step.append(len(emitted))
        seq += emitted
        accepted = torch.tensor([a + 1], dtype=torch.int32)
        if drafter is None:
            # The first pass sees the verify rows with each row's next token; row a gets the emitted token.
            shifted = drafts[:a] + [emitted[-1]] + drafts[a:]
            drafts = draft(mtp, caches, shifted[: k + 1], start, hidden, a, k)
        else:
            drafts = drafter(seq, k)
        history.append((list(seq), drafts))
    return seq[len(prompt):][:max_new_tokens], per_step, stats, history


def fresh_drafts(path, seq, k):
    """The MTP's k greedy drafts after ``seq``, computed from scratch: one target prefill over seq[:-1], one MTP
    pass over seq[1:] on fresh caches, then the further drafts. Independent of what earlier steps left behind."""
    target = Qwen35ForCausalLM.from_pretrained(path)
    mtp = Qwen35MTP.from_pretrained(path, target)
    caches = allocate_caches(target.config, num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, num_state_slots=1,
                             dtype=target.dtype, kv_dtype=target.dtype, device=target.device)
    add_mtp_kv_caches(caches, target.config, mtp.layer_ids, target.dtype, target.device)
    hidden = target.forward(prompt_batch(seq[:-1], BLOCK_SIZE), caches)
    return draft(mtp, caches, seq[1:], 0, hidden, len(seq) - 2, k)


def greedy_reference(path):
    """Plain greedy tokens from the engine, without speculation (NEW of them compared, the rest feed the oracle)."""
    gen = torch.Generator().manual_seed(11)
    prompt = torch.randint(1, 256, (9,), generator=gen).tolist()
    llm = LLM(path, num_blocks=32, max_num_seqs=2)
    out = llm.generate([prompt], SamplingParams(max_tokens=NEW + 4, temperature=0, detokenize=False))
    return prompt, out[0].outputs[0].token_ids


@pytest.fixture(scope="module")
def reference(text_mtp_checkpoint):
    return greedy_reference(text_mtp_checkpoint)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_mtp_speculation_reproduces_greedy_tokens(text_mtp_checkpoint, reference, k):
    prompt, want = reference
    got, per_step, stats, history = speculative_greedy(text_mtp_checkpoint, prompt, NEW, k)
    assert got == want[:NEW]
    assert all(1 <= n <= k + 1 for n in per_step)
    assert stats.num_drafts == len(per_step)
    # Random weights accept few drafts, so check the drafts themselves: those made step by step on the paged MTP
    # cache (rejected positions overwritten later) equal drafts computed from scratch on the same sequence.
    for seq, drafts in history[:: max(1, len(history) // 4)]:
        assert drafts == fresh_drafts(text_mtp_checkpoint, seq, k), f"after {len(seq)} tokens"


def test_multimodal_layout_reproduces_greedy_tokens(multimodal_mtp_checkpoint):
    prompt, want = greedy_reference(multimodal_mtp_checkpoint)
    got, _, _, history = speculative_greedy(multimodal_mtp_checkpoint, prompt, NEW, 2)
    assert got == want[:NEW]
    seq, drafts = history[len(history) // 2]
    assert drafts == fresh_drafts(multimodal_mtp_checkpoint, seq, 2)


def test_triton_backend_reproduces_greedy_tokens(text_mtp_checkpoint, reference):
    if "triton" not in ops.available_backends():
        pytest.skip("no Triton package")  # pragma: no cover - triton is a test dependency
    prompt, want = reference
    got, _, _, _ = speculative_greedy(text_mtp_checkpoint, prompt, NEW, 2, backend="triton")
    assert got == want[:NEW]


def test_right_and_wrong_drafters(text_mtp_checkpoint, reference):
    """A drafter that replays the greedy answer is always accepted (k + 1 tokens a step); one that is always
    wrong is never accepted (1 token a step); the tokens are the same either way."""
    prompt, want = reference
    k = 3
    full = prompt + want  # NEW + 4 tokens: every draft of the last step is still known

    def oracle(seq, k):
        return full[len(seq): len(seq) + k]

    def contrarian(seq, k):
        return [(t + 1) % 256 for t in full[len(seq): len(seq) + k]]

    got, per_step, stats, _ = speculative_greedy(text_mtp_checkpoint, prompt, NEW, k, drafter=oracle)
    assert got == want[:NEW] and stats.acceptance_rate == 1.0 and set(per_step) == {k + 1}
    got, per_step, stats, _ = speculative_greedy(text_mtp_checkpoint, prompt, NEW, k, drafter=contrarian)
    assert got == want[:NEW] and stats.acceptance_rate == 0.0 and set(per_step) == {1}
