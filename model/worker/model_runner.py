"""The model runner: the model, its caches and persistent batch; ``execute(scheduler_output)`` runs one step.

As vLLM's GPU model runner: it applies what the scheduler changed to the
persistent ``InputBatch``, lays the step out (``StepMetadata``, built and
checked on the host), derives the per-step metadata every layer shares
(``StepInputs``), moves it to the device once, runs one forward over the
mixed batch inside ``trusted_metadata()`` (the ops check no values again, so
no layer reads the device back), and samples. It knows nothing of requests'
lifetimes or outputs: that is the engine's part.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from ... import ops
from ...scheduling import SchedulerOutput, StepMetadata, build_step_metadata
from ..loading.config import Qwen35Config
from ..network.backends import backend_chooser
from ..network.kv_cache_groups import num_gdn_groups
from ..network.mtp import add_mtp_kv_caches
from ..network.qwen3_5 import Qwen35ForCausalLM
from ..network.step_inputs import StepInputs
from ..sample.sampling import SamplingParams, logprob_entry, sample
from ..spec_decode.drafter import SpeculativeDecoder, strip_placeholder_drafts
from .gdn_checkpoint_rows import add_gdn_checkpoint_pools, checkpoint_saves, load_checkpoints
from .gdn_pages import GdnPageTables, GdnStepRows, copy_states
from .graph_runner import GraphRunner
from .input_batch import InputBatch
from .kv_cache import MemoryPlan, ModelCaches, allocate_caches

WARM_UP_ID = "warm-up"


@dataclass
class ModelRunnerOutput:
    """What one step produced (vLLM's name).

    req_ids: the step's requests in row order (decodes first, then prefill chunks).
    sampled_token_ids: the sampled tokens of each request that sampled (with speculation: its accepted
        drafts and one token of the target's).
    logprobs: their ``{token: logprob}``, None where not asked; with speculation a list, one per sampled token.
    """

    req_ids: list[str] = field(default_factory=list)
    sampled_token_ids: dict[str, list[int]] = field(default_factory=dict)
    logprobs: dict[str, dict[int, float] | None] = field(default_factory=dict)
    num_decodes: int = 0
    num_prefills: int = 0
    draft_token_ids: dict[str, list[int]] = field(default_factory=dict)  # speculative decoding: next drafts


def one_request_output(request_id: str, token_ids: list[int], block_ids: list[int], block_size: int, *,
                       num_computed_tokens: int = 0, state_slot: int = 0, new: bool = True,
                       new_block_ids: list[int] | None = None,
                       gdn_block_ids: tuple[list[int], ...] = ()) -> SchedulerOutput:
    """A SchedulerOutput that runs ``token_ids`` of one request (scoring and warm-up, outside the scheduler).

    gdn_block_ids: the request's GDN page tables, one per group (the states in the pool's pages)."""
    return SchedulerOutput(
        num_scheduled_tokens={request_id: len(token_ids)}, total_num_scheduled_tokens=len(token_ids),
        num_computed_tokens={request_id: num_computed_tokens}, token_ids={request_id: list(token_ids)},
        block_ids={request_id: list(block_ids)},
        new_block_ids={request_id: list(block_ids if new_block_ids is None else new_block_ids)},
        group_block_ids={request_id: (*map(list, gdn_block_ids), list(block_ids))},
        num_cached_tokens={request_id: 0} if new else {},
        scheduled_spec_decode_tokens={}, state_slots={request_id: state_slot}, sampling_req_ids=[request_id],
        new_req_ids=[request_id] if new else [], resumed_req_ids=[], preempted_req_ids=set(),
        finished_req_ids=set(), num_free_blocks=0, block_size=block_size)


class ModelRunner:
    """Runs the model over scheduled steps on ``device`` with paged KV caches and GDN state pools."""

    def __init__(self, model: Qwen35ForCausalLM, config: Qwen35Config, device: torch.device,
                 backend: str | None = None):
        self.model = model
        self.config = config
        self.device = device
        self.backend = backend
        self.caches: ModelCaches | None = None
        self.input_batch: InputBatch | None = None
        self.gdn_pages: GdnPageTables | None = None  # where GDN states sit in the pool's pages each step
        self.num_gdn_checkpoints = 0  # "chunk" prefix caching: the checkpoint pool's slots (initialize_caches)
        # Sampling settings and generator of each request the engine added, until it finishes.
        self.sampling: dict[str, tuple[SamplingParams, torch.Generator]] = {}
        # Speculative decoding (``enable_speculation``): the MTP drafter and per-request state; token_at gives
        # a request's known token at a position (the next prompt token after a prefill chunk, for the MTP).
        self.spec = None
        self.token_at = None
        self._drafting = True
        self.graphs: GraphRunner | None = None  # graph mode (enable_graphs), else every step eager
        self._graph_settings: dict | None = None
        # Where the last execute() got to ("prepare", "forward", "sampling", "drafting"): the stage a
        # failed step names. And the random requests' generator states before it sampled, so that
        # discard_step rewinds them (a retried request then draws what it would have drawn).
        self.stage = "prepare"
        self._generator_states: dict[str, tuple[torch.Generator, torch.Tensor]] = {}

    # ------------------------------------------------------------------ setup

    def enable_speculation(self, mtp, num_speculative_tokens: int) -> None:
        """Draft with ``mtp`` (a ``Qwen35MTP``) and verify k drafts a step; call before ``initialize_caches``."""
        self.spec = SpeculativeDecoder(mtp, num_speculative_tokens)

    def enable_graphs(self, *, backend: str, max_capture_size: int, max_graphs: int = 64) -> None:
        """Run the serving steps' forward as compiled graphs (``graph_runner.py``); call before
        ``initialize_caches`` (the static buffers take the persistent batch's block-table width)."""
        self._graph_settings = dict(backend=backend, max_capture_size=max_capture_size, max_graphs=max_graphs)

    def initialize_caches(self, plan: MemoryPlan, *, block_size: int, max_model_len: int, kv_dtype: torch.dtype,
                          kv_scales=None, enable_prefix_caching: bool = False) -> None:
        """Allocate the one page pool the plan sized and the persistent batch (one row per possible running
        request). The GDN states live in the pool's pages (``gdn_pages.py``): in "none" mode a request's
        1 (+ k with speculation) pages per group, in align mode (``enable_prefix_caching``) the page of its
        state column. With speculation the MTP layers get their own KV caches (int8 ones need ``kv_scales`` of
        the MTP layer ids too)."""
        self.num_gdn_checkpoints = plan.gdn_checkpoints
        if plan.gdn_checkpoints:
            # "chunk" prefix caching: GDN states in flat rows (1 + k per request, the speculative decoder's
            # layout) and a checkpoint pool, both outside the page pool (gdn_checkpoint_rows.py).
            self.caches = allocate_caches(self.config, num_blocks=plan.num_blocks, block_size=block_size,
                                          num_state_slots=plan.num_state_slots, dtype=self.model.dtype,
                                          kv_dtype=kv_dtype, device=self.device, kv_scales=kv_scales)
            add_gdn_checkpoint_pools(self.caches, self.config, plan.gdn_checkpoints, self.model.dtype, self.device)
        else:
            self.caches = allocate_caches(self.config, num_blocks=plan.num_blocks, block_size=block_size,
                                          num_state_slots=0, dtype=self.model.dtype, kv_dtype=kv_dtype,
                                          device=self.device, kv_scales=kv_scales, gdn_in_pages=True)
        groups = num_gdn_groups(self.config)
        if groups and not plan.gdn_checkpoints:
            k = self.spec.k if self.spec is not None else 0
            self.gdn_pages = GdnPageTables(groups, block_size, enable_prefix_caching, k)
        if self.spec is not None:
            add_mtp_kv_caches(self.caches, self.config, self.spec.mtp.layer_ids, kv_dtype, self.device, kv_scales)
        self.input_batch = InputBatch(plan.max_num_seqs, -(-max_model_len // block_size), block_size)
        if self._graph_settings is not None:
            self.graphs = GraphRunner(self.model, self.device, block_table_width=self.input_batch.block_table.shape[1],
                                      **self._graph_settings)
            self.graphs.set_caches(self.caches)
            if self.spec is not None:  # the MTP head's draft steps get graphs of their own
                mtp = GraphRunner(self.spec.mtp, self.device, forward="mtp",
                                  block_table_width=self.input_batch.block_table.shape[1], **self._graph_settings)
                mtp.set_caches(self.caches)
                units = self._units_builder(self.caches)
                self.spec.graphs = mtp
                self.spec.graph_inputs = lambda padded, rows: StepInputs.build(padded, self.device, units)

    def warm_up(self) -> None:
        """Run a two-token prefill and one decode through ``execute`` (sampling included) on the serving caches,
        so that one-time costs (op registration, first kernel calls) do not land in the first request's latency.

        It writes block 1 and one GDN state page per group (and per speculative row) after it, which a later
        request overwrites before reading (its state starts from zeros; a prefix hit reads only pages the
        scheduler cached), and leaves the persistent batch empty.
        """
        bs = self.caches.block_size
        blocks = list(range(1, -(-3 // bs) + 1))
        groups = self.gdn_pages.num_gdn_groups if self.gdn_pages is not None else 0
        rows = self.gdn_pages.rows if self.gdn_pages is not None else 1
        first_page = len(blocks) + 1
        gdn = tuple(list(range(first_page + g * rows, first_page + (g + 1) * rows)) for g in range(groups))
        if len(blocks) + groups * rows >= self.caches.num_blocks:
            return  # too few blocks to hold even the warm-up request
        generator = torch.Generator(device=self.device).manual_seed(0)
        self.sampling[WARM_UP_ID] = (SamplingParams(max_tokens=2, temperature=1.0, detokenize=False), generator)
        self._drafting = False  # the warm-up blocks hold no lookahead slots for drafts
        try:
            first = self.execute(one_request_output(WARM_UP_ID, [0, 0], blocks, bs, gdn_block_ids=gdn))
            token = first.sampled_token_ids[WARM_UP_ID]
            self.execute(one_request_output(WARM_UP_ID, token, blocks, bs, num_computed_tokens=2, new=False,
                                            new_block_ids=[], gdn_block_ids=gdn))
        finally:
            self._drafting = True
            if self.spec is not None:
                self.spec.forget(WARM_UP_ID)
                self.spec.stats.pop(WARM_UP_ID, None)
            self.input_batch.remove(WARM_UP_ID)
            self.sampling.pop(WARM_UP_ID, None)
            if self.gdn_pages is not None:
                self.gdn_pages.forget(WARM_UP_ID)

    # ------------------------------------------------------------------ steps

    def add_request(self, request_id: str, params: SamplingParams, generator: torch.Generator) -> None:
        """Remember a request's sampling state; its row is made when the scheduler admits it."""
        self.sampling[request_id] = (params, generator)

    def execute(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
        """Run one scheduled step: update the persistent batch, lay out, check, forward, sample."""
        out = scheduler_output
        self.stage = "prepare"
        if self._generator_states:
            self._generator_states = {}
        if self.spec is not None:
            out = strip_placeholder_drafts(out)
        self.input_batch.update(out, self.sampling.__getitem__)
        for request_id in out.finished_req_ids:
            self.sampling.pop(request_id, None)
            if self.spec is not None:
                self.spec.forget(request_id)
            if self.gdn_pages is not None:  # here too, not only in lay_out: a step of no tokens lays out nothing
                self.gdn_pages.forget(request_id)
        if out.total_num_scheduled_tokens == 0:
            return ModelRunnerOutput()
        prepared = self.input_batch.prepare(out)
        if self.spec is not None:
            self.spec.lay_out_state_rows(prepared.batch)
        gdn_rows = None
        if self.gdn_pages is not None:  # after the speculative rows: the state rows are the group's pages
            gdn_rows = self.gdn_pages.lay_out(out, prepared.batch, self.caches,
                                              self.spec.num_accepted if self.spec is not None else None)
        self.stage = "forward"
        saves = None
        if self.num_gdn_checkpoints:  # "chunk" prefix caching: load the hits' checkpoints, then save the step's
            meta = prepared.batch
            row = {request_id: i for i, request_id in enumerate(meta.req_ids)}
            load_checkpoints(self.caches, [(slot, int(meta.state_indices[row[r]]))
                                           for r, slot in out.gdn_checkpoint_loads.items()])
            saves = checkpoint_saves(out, meta, self.num_gdn_checkpoints)
        hidden, inputs = self._forward(prepared.batch, self.caches, gdn_rows=gdn_rows, graphs=self.graphs,
                                       gdn_checkpoints=saves)
        result = ModelRunnerOutput(req_ids=prepared.req_ids, num_decodes=inputs.num_decodes,
                                   num_prefills=prepared.num_prefills)
        self.stage = "sampling"
        if self.spec is not None:
            return self._verify_and_draft(out, prepared, inputs, hidden, result)
        if prepared.sampling_req_ids:
            rows = hidden.index_select(0, inputs.logits_indices)
            if all(p.greedy and p.logprobs is None for p in prepared.params):
                # Only the argmax is needed: the head gives it slice by slice, without the [S, V] logits.
                tokens, lps = self.model.greedy_tokens(rows).tolist(), [None] * len(prepared.params)
            else:
                self._save_generators(prepared)
                tokens, lps = sample(self.model.compute_logits(rows), prepared.params, prepared.generators)
            for request_id, token, lp in zip(prepared.sampling_req_ids, tokens, lps):
                result.sampled_token_ids[request_id], result.logprobs[request_id] = [token], lp
        return result

    def _verify_and_draft(self, out, prepared, inputs, hidden, result: ModelRunnerOutput) -> ModelRunnerOutput:
        """Speculative decoding: rejection-sample the drafts, roll the batch's cursors back over the rejected
        ones, and draft the next k tokens of every request that sampled (``spec_decode/drafter.py``)."""
        if not prepared.sampling_req_ids:
            # Prefill chunks that do not sample yet: the MTP head still runs over them, so that its KV cache
            # holds their positions when it drafts later (vLLM's drafter runs on every step too).
            self.stage = "drafting"
            if self._drafting:
                with ops.trusted_metadata():
                    self.spec.propose(inputs, hidden, out, {}, self.token_at, self.caches, None, prepared.batch)
            return result
        logits = self.model.compute_logits(hidden.index_select(0, inputs.logits_indices))
        self._save_generators(prepared)
        emitted, accepted = self.spec.verify(logits, out, prepared.sampling_req_ids, prepared.params,
                                             prepared.generators)
        spec = out.scheduled_spec_decode_tokens
        first_row = 0  # each sampling request's rows of ``logits``: its drafts' rows, then its last row
        for request_id, params, tokens, a in zip(prepared.sampling_req_ids, prepared.params, emitted, accepted):
            num_drafts = len(spec.get(request_id, ()))
            result.sampled_token_ids[request_id] = tokens
            # One entry per emitted token, from the row that decided it (the engine keeps those the scheduler keeps).
            result.logprobs[request_id] = None if params.logprobs is None else [
                logprob_entry(row, token, params.logprobs)
                for row, token in zip(logits[first_row:first_row + len(tokens)].log_softmax(-1), tokens)]
            first_row += num_drafts + 1
            if num_drafts - a:
                self.input_batch.roll_back(request_id, num_drafts - a)
        self.stage = "drafting"
        if self._drafting:
            def step_inputs(meta):
                meta.validate(num_blocks=self.caches.num_blocks, block_size=self.caches.block_size,
                              num_state_slots=self.caches.num_state_slots)
                return StepInputs.build(meta, self.device, self._units_builder(self.caches))

            with ops.trusted_metadata():
                result.draft_token_ids = self.spec.propose(inputs, hidden, out, result.sampled_token_ids,
                                                           self.token_at, self.caches, step_inputs, prepared.batch)
        return result

    def _save_generators(self, prepared) -> None:
        """Remember the random requests' generator states before they draw (see discard_step)."""
        self._generator_states = {request_id: (generator, generator.get_state())
                                  for request_id, params, generator in zip(prepared.sampling_req_ids,
                                                                           prepared.params, prepared.generators)
                                  if not params.greedy}

    def discard_step(self, scheduler_output: SchedulerOutput | None, request_ids) -> None:
        """Forget what a failed step left here for ``request_ids`` (the requests the scheduler rolled back
        or ended, ``Scheduler.rollback_step``): their persistent-batch rows, speculative and GDN-column
        state (they come back as resumed, from a prefill), and rewind the generators the step drew from.
        Also applies the step's own removals (``scheduler_output``'s finished and preempted requests), in
        case it raised before ``execute`` applied them; None: schedule() raised, nothing reached here."""
        gone = () if scheduler_output is None else (*scheduler_output.finished_req_ids,
                                                    *scheduler_output.preempted_req_ids)
        for request_id in (*gone, *request_ids):
            self.input_batch.remove(request_id)
            if self.gdn_pages is not None:
                self.gdn_pages.forget(request_id)
            if self.spec is not None:
                self.spec.forget(request_id)
        if scheduler_output is not None:
            for request_id in scheduler_output.finished_req_ids:
                self.sampling.pop(request_id, None)
        for request_id in request_ids:
            saved = self._generator_states.get(request_id)
            if saved is not None:
                saved[0].set_state(saved[1])
        self._generator_states = {}

    def _forward(self, meta: StepMetadata, caches: ModelCaches, kv_observer=None,
                 gdn_rows: GdnStepRows | None = None, graphs: GraphRunner | None = None, gdn_checkpoints=None):
        """Check the CPU layout once, derive, move, make the GDN state copies (align mode), and run the model
        with the ops trusting the metadata: through ``graphs`` (padded to a compiled shape) when given and the
        step fits one, else eager. Returns the real rows' hidden states and the real step's inputs."""
        meta.validate(num_blocks=caches.num_blocks, block_size=caches.block_size,
                      num_state_slots=caches.num_state_slots)
        rows = None if gdn_rows is None else (gdn_rows.state_rows, gdn_rows.spec_rows)
        units = self._units_builder(caches)
        inputs = StepInputs.build(meta, self.device, units, rows, gdn_checkpoints)
        if gdn_rows is not None and gdn_rows.copies:
            copy_states(caches, gdn_rows.copies)
        with ops.trusted_metadata():
            hidden = None
            if graphs is not None and kv_observer is None and gdn_checkpoints is None:  # (graphs save none)
                with torch.inference_mode():
                    hidden = graphs.run(meta, rows, lambda padded, padded_rows: StepInputs.build(
                        padded, self.device, units, padded_rows))
            if hidden is None:
                hidden = self.model.forward(inputs, caches, kv_observer=kv_observer)
        return hidden, inputs

    def _units_builder(self, caches: ModelCaches):
        """The attention ops' per-step work units for these caches (None when their backend needs none)."""
        cfg = self.config
        if not cfg.full_attention_layers:
            return None
        shape = dict(device=self.device, dtype=self.model.dtype, num_q_heads=cfg.num_attention_heads,
                     num_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
                     kv_cache_dtype=caches.kv_cache_dtype, backend=backend_chooser(self.backend)("mixed_attention"))

        def units(query_start_loc: torch.Tensor, num_decodes: int):
            return ops.prefill_units_for(query_start_loc, num_decodes, **shape)

        return units

    @torch.inference_mode()
    def score(self, token_ids: list[int], *, kv_observer=None, block_size: int, kv_dtype: torch.dtype,
              kv_scales=None) -> torch.Tensor:
        """Logits [len, vocab] (float32) of every position of one prompt, run as one prefill on scratch caches
        (of ``kv_dtype``, with ``kv_scales`` when int8), so it never touches the serving state."""
        caches = allocate_caches(self.config, num_blocks=-(-len(token_ids) // block_size) + 1,
                                 block_size=block_size, num_state_slots=1, dtype=self.model.dtype,
                                 kv_dtype=kv_dtype, device=self.device, kv_scales=kv_scales)
        blocks = list(range(1, caches.num_blocks))
        meta = build_step_metadata(one_request_output("score", list(token_ids), blocks, block_size))
        hidden, _ = self._forward(meta, caches, kv_observer)
        return self.model.compute_logits(hidden)

    @torch.inference_mode()
    def observe_mtp_calibration_kv(self, token_ids: list[int], observe, block_size: int) -> None:
        """INT8 calibration of the MTP layers: run one prompt through the target and then through each MTP layer
        on scratch caches of the model dtype, calling ``observe(layer_id, key, value)`` on the MTP layers' K/V.

        The head sees what serving gives it: at position t the next token (the prompt's, then the target's
        greedy one after the last position) and the target's final hidden state of t; layer i > 0 gets layer
        i - 1's output, as draft i does. Nothing of the serving state is used.
        """
        mtp, dtype = self.spec.mtp, self.model.dtype
        blocks = list(range(1, -(-len(token_ids) // block_size) + 1))
        caches = allocate_caches(self.config, num_blocks=len(blocks) + 1, block_size=block_size, num_state_slots=1,
                                 dtype=dtype, kv_dtype=dtype, device=self.device)
        add_mtp_kv_caches(caches, self.config, mtp.layer_ids, dtype, self.device)
        meta = build_step_metadata(one_request_output("calibration", list(token_ids), blocks, block_size))
        hidden, inputs = self._forward(meta, caches)
        following = torch.cat([inputs.input_ids[1:], self.model.compute_logits(hidden[-1:]).argmax(-1)])
        batch = replace(inputs, input_ids=following)
        for step in range(mtp.num_layers):
            hidden = mtp.forward(batch, hidden, caches, step=step, kv_observer=observe)
