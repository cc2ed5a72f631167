"""The model runner's side of MTP speculative decoding: state rows, verification and drafting for a mixed batch.

The model runner (``worker/model_runner.py``) owns a ``SpeculativeDecoder`` and calls it each step; this
module imports nothing of the worker (the INT8 calibration of the MTP layers, which needs the runner's
scratch caches, is ``ModelRunner.observe_mtp_calibration_kv``).

With k = ``num_speculative_tokens``, a request whose scheduler state slot is s
owns GDN state rows s * (1 + k) .. s * (1 + k) + k of the pools (the caches
hold (1 + k) times the scheduler's slots). Prefill chunks read and write row
s * (1 + k) (column 0); a decode row verifies [last token, d_1..d_k] in one
target forward, writing the state after its token t to column t and starting
from column ``num_accepted - 1`` of the previous step (vLLM's rule: no
rollback). Greedy rejection sampling (``rejection_sample``) keeps the accepted
prefix plus one target token; then the MTP head drafts the next k tokens: its
first pass over every row of the step (inputs shifted by one, the target's
hidden states), sampled at each sampling request's last accepted row, then one
decode step per further draft on its own hidden state (layer ``step %
num_layers``). The attention KV of rejected positions is overwritten later.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from ...scheduling import SchedulerOutput, build_step_metadata
from ..network.mtp import Qwen35MTP
from ..sample.rejection_sampler import rejection_sample
from .stats import SpecDecodingStats

# (request_id, position) -> the request's known token at that position (prompt or output).
TokenSource = Callable[[str, int], int]


class SpeculativeDecoder:
    """Per-request speculative state of the model runner (accepted counts, statistics) and the MTP drafter."""

    def __init__(self, mtp: Qwen35MTP, num_speculative_tokens: int):
        self.mtp = mtp
        self.k = num_speculative_tokens
        self.num_accepted: dict[str, int] = {}  # tokens the last verify step accepted, the target's one included
        self.stats: dict[str, SpecDecodingStats] = {}  # per request, until its output is taken
        self.total = SpecDecodingStats(num_speculative_tokens)  # every draft verified since the engine started
        # Graph mode: a GraphRunner of the "mtp" forward and graph_inputs(padded_meta, None) -> its StepInputs
        # on the device (the model runner sets both); None: the head runs eager.
        self.graphs = None
        self.graph_inputs: Callable | None = None

    @property
    def rows_per_request(self) -> int:
        return 1 + self.k

    def forget(self, request_id: str) -> None:
        self.num_accepted.pop(request_id, None)

    def request_stats(self, request_id: str) -> SpecDecodingStats:
        return self.stats.setdefault(request_id, SpecDecodingStats(self.k))

    def lay_out_state_rows(self, meta) -> None:
        """Map the scheduler's state slots to the pools' rows in ``meta`` (in place, on the CPU)."""
        if meta.state_indices.numel() == 0:
            return
        base = torch.where(meta.state_indices >= 0, meta.state_indices * self.rows_per_request, meta.state_indices)
        meta.state_indices = base.to(torch.int32)
        nd = meta.num_decodes
        meta.spec_state_indices = (base[:nd, None] + torch.arange(self.rows_per_request)[None]).to(torch.int32)
        meta.num_accepted_tokens = torch.tensor([self.num_accepted.get(r, 1) for r in meta.req_ids[:nd]],
                                                dtype=torch.int32)
        for request_id in meta.req_ids[nd:]:
            self.num_accepted[request_id] = 1  # a prefill chunk leaves its state in column 0

    def verify(self, logits: torch.Tensor, out: SchedulerOutput, sampling_req_ids: list[str], params,
               generators) -> tuple[list[list[int]], list[int]]:
        """Rejection-sample every sampling request (rows: its drafts' rows, then its last row, in order);
        returns (emitted tokens, accepted drafts) per request and updates the accepted counts and statistics."""
        spec = out.scheduled_spec_decode_tokens
        drafts = [[t for t in spec.get(r, ()) if t >= 0] for r in sampling_req_ids]
        result = rejection_sample(logits, drafts, params, generators)
        for request_id, d, a in zip(sampling_req_ids, drafts, result.num_accepted):
            self.num_accepted[request_id] = a + 1
            if d:
                self.request_stats(request_id).observe(len(d), a)
                self.total.observe(len(d), a)
        return result.token_ids, result.num_accepted

    def _draft_hidden(self, batch, meta, hidden: torch.Tensor, caches, step: int) -> torch.Tensor:
        """The head's hidden states of one draft step: through the compiled graphs when set and the step fits
        one (``meta`` given), else eager."""
        if self.graphs is not None and meta is not None:
            out = self.graphs.run(meta, None, self.graph_inputs, (hidden,), step)
            if out is not None:
                return out
        return self.mtp.forward(batch, hidden, caches, step=step)

    def _greedy_draft(self, batch, meta, hidden: torch.Tensor, caches, step: int):
        """(draft tokens at ``batch.logits_indices``, the head's hidden states): ``Qwen35MTP.greedy_draft``."""
        h = self._draft_hidden(batch, meta, hidden, caches, step)
        return self.mtp.compute_logits(h[batch.logits_indices]).argmax(dim=-1), h

    @torch.inference_mode()
    def propose(self, inputs, hidden: torch.Tensor, out: SchedulerOutput, emitted: dict[str, list[int]],
                token_at: TokenSource, caches, step_inputs: Callable, meta=None) -> dict[str, list[int]]:
        """k greedy drafts for each request in ``emitted`` (those that sampled), from the MTP head; with none
        (a step of prefill chunks only) the head's first pass still runs, for its KV of the step's positions.

        inputs: the step's StepInputs (on the device), hidden: the target's final hidden states [T, H];
        step_inputs(meta) -> a validated StepInputs on the device for the further draft steps.
        meta: the step's StepMetadata on the CPU (``inputs`` before the move), for graph mode's padding.
        """
        shifted, sample_rows, positions = [], [], []
        for row, request_id in enumerate(inputs.req_ids):
            tokens = out.token_ids[request_id]
            context = out.num_computed_tokens[request_id]
            start = len(shifted)
            following = list(tokens[1:])
            if request_id in emitted:
                # Row b + a (b: the last known token's row, a: accepted drafts) gets the step's new token.
                b = len(tokens) - 1 - len(out.scheduled_spec_decode_tokens.get(request_id, ()))
                at = b + len(emitted[request_id]) - 1
                following = (following[:at] + [emitted[request_id][-1]] + following[at:])[: len(tokens)]
                sample_rows.append(start + at)
                positions.append(context + at)
            else:  # a prefill chunk that does not sample yet: its next token is the next prompt token
                following.append(token_at(request_id, context + len(tokens)))
            shifted += [t if t >= 0 else 0 for t in following]
        batch = dataclasses.replace(inputs, input_ids=torch.tensor(shifted, device=hidden.device))
        first_meta = None if meta is None else dataclasses.replace(meta, input_ids=torch.tensor(shifted))
        if not sample_rows:  # nothing to draft: the pass only writes the head's KV of the step's positions
            self._draft_hidden(batch, first_meta, hidden[: len(shifted)], caches, 0)
            return {}
        batch.logits_indices = torch.tensor(sample_rows, device=hidden.device)
        token, h = self._greedy_draft(batch, first_meta, hidden[: len(shifted)], caches, 0)
        sampled = [r for r in inputs.req_ids if r in emitted]
        drafts = {r: [int(t)] for r, t in zip(sampled, token.tolist())}
        h = h[batch.logits_indices]
        for step in range(1, self.k):
            draft_out = _decode_output(sampled, [p + step for p in positions], [drafts[r][-1] for r in sampled],
                                       out)
            draft_meta = build_step_metadata(draft_out)
            token, h = self._greedy_draft(step_inputs(draft_meta), draft_meta, h, caches, step)
            for r, t in zip(sampled, token.tolist()):
                drafts[r].append(int(t))
        return drafts


def strip_placeholder_drafts(out: SchedulerOutput) -> SchedulerOutput:
    """``out`` without the placeholder drafts (-1) the scheduler pads requests with, as a copy (``out`` itself
    when it has none); the scheduler keeps ``out`` and rolls the padded rows back as rejected drafts.

    vLLM's scheduler pads a request that has one token left to schedule (a 1-token prompt joining running
    requests, or a prefix-cache hit of all but one token) to 1 + k rows, so that every decode row has the same
    shape for its CUDA graphs. Run as they are, those rows would be wrong here: a request at cursor 0 is a
    prefill chunk, whose GDN/conv state would be the state after the placeholder tokens. Without graphs the
    padding buys nothing, so the model runner runs such a request as its one real token: the same logits row
    for that token, the same emitted token (placeholders are always rejected), the right state.
    """
    spec = out.scheduled_spec_decode_tokens
    padded = [r for r, drafts in spec.items() if drafts and drafts[0] < 0] if spec else []
    if not padded:
        return out
    num_scheduled, token_ids = dict(out.num_scheduled_tokens), dict(out.token_ids)
    for request_id in padded:
        num_placeholders = len(spec[request_id])
        num_scheduled[request_id] -= num_placeholders
        token_ids[request_id] = token_ids[request_id][:-num_placeholders]
    return dataclasses.replace(
        out, num_scheduled_tokens=num_scheduled, token_ids=token_ids,
        total_num_scheduled_tokens=out.total_num_scheduled_tokens - sum(len(spec[r]) for r in padded),
        scheduled_spec_decode_tokens={r: d for r, d in spec.items() if r not in padded})


def _decode_output(req_ids: list[str], positions: list[int], tokens: list[int],
                   out: SchedulerOutput) -> SchedulerOutput:
    """A decode-only SchedulerOutput (one token per request at ``positions``) for one further draft step, on the
    requests' block tables (the scheduler reserved k lookahead slots past the scheduled tokens for it)."""
    return SchedulerOutput(
        num_scheduled_tokens={r: 1 for r in req_ids}, total_num_scheduled_tokens=len(req_ids),
        num_computed_tokens=dict(zip(req_ids, positions)), token_ids={r: [t] for r, t in zip(req_ids, tokens)},
        block_ids={r: out.block_ids[r] for r in req_ids}, new_block_ids={}, group_block_ids={}, num_cached_tokens={},
        scheduled_spec_decode_tokens={},
        state_slots={}, sampling_req_ids=list(req_ids), new_req_ids=[], resumed_req_ids=[],
        preempted_req_ids=set(), finished_req_ids=set(), num_free_blocks=0,
        block_size=out.block_size)
