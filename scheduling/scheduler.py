"""The token-budget scheduler: every step, how many tokens each request advances (vLLM V1 semantics)."""

import logging
from dataclasses import dataclass, field
from itertools import chain

from .config import SchedulerConfig
from .gdn_checkpoints import PrefixCacheStats
from .hybrid_kv_cache import HybridKVCacheManager
from .kv_cache_manager import KVCacheManager
from .request import Request, RequestStatus
from .state_slots import StateSlotPool
from .waiting_queue import make_waiting_queue

logger = logging.getLogger("qwen_ops.scheduling")


@dataclass
class SchedulerOutput:
    """What one step computes. Per-request dicts are keyed by request id, in batch order.

    num_scheduled_tokens: tokens each request advances in this step (drafts included).
    total_num_scheduled_tokens: their sum, at most max_num_batched_tokens.
    num_computed_tokens: each request's cursor before this step.
    token_ids: the input tokens of each request in this step (known tokens, then drafts).
    block_ids: each request's whole (full-attention) block table. It is the request's
        live list, read it before the next schedule() call.
    new_block_ids: attention blocks allocated to each request in this step.
    group_block_ids: hybrid models: each request's block table per KV cache group, in
        vLLM's group order (the GDN groups, then attention; vLLM's tuple of per-group
        lists); 0 is the null block (a released or never-held GDN state column).
    num_cached_tokens: for each newly admitted or resumed request, its prefix-cache
        hit in tokens (0: none).
    scheduled_spec_decode_tokens: draft tokens verified in this step (-1: padding).
    state_slots: hybrid models: each request's GDN state row in [0, max_num_seqs), for an
        engine that keeps GDN states outside the block pool (an address only: admission
        follows the blocks, GDN pages included).
    sampling_req_ids: requests that sample a token in this step (their cursor reaches
        num_tokens); a partial prefill chunk samples none.
    new_req_ids: requests admitted for the first time in this step.
    resumed_req_ids: preempted requests readmitted in this step.
    preempted_req_ids: requests preempted in this step.
    finished_req_ids: requests that finished or were aborted since the previous step.
    """

    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    num_computed_tokens: dict[str, int]
    token_ids: dict[str, list[int]]
    block_ids: dict[str, list[int]]
    new_block_ids: dict[str, list[int]]
    group_block_ids: dict[str, tuple[list[int], ...]]
    num_cached_tokens: dict[str, int]
    scheduled_spec_decode_tokens: dict[str, list[int]]
    state_slots: dict[str, int]
    sampling_req_ids: list[str]
    new_req_ids: list[str]
    resumed_req_ids: list[str]
    preempted_req_ids: set[str]
    finished_req_ids: set[str]
    num_free_blocks: int
    block_size: int
    enable_chunked_prefill: bool = True
    num_speculative_tokens: int = 0
    # Hybrid prefix caching: each admitted request's reason its hit stopped where it did
    # (gdn_checkpoints.HIT_REASONS); "chunk" mode: the checkpoint slot each admitted hit loads its GDN
    # states from before the step, and the checkpoints each request saves in the step, as
    # (tokens from the step's start, slot), in increasing order.
    prefix_hit_reasons: dict[str, str] = field(default_factory=dict)
    gdn_checkpoint_loads: dict[str, int] = field(default_factory=dict)
    gdn_checkpoint_saves: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    # Set by update_from_output(): a step's tokens are applied once, never twice.
    applied: bool = field(default=False, repr=False, compare=False)


@dataclass(slots=True)  # one is built per request per step: slots make that cheaper
class EngineCoreOutput:
    """What one step produced for one request."""

    request_id: str
    new_token_ids: list[int] = field(default_factory=list)
    finished: bool = False
    finish_reason: str | None = None  # "stop", "length" or "abort"
    stop_reason: int | None = None  # the stop token id, when one finished it


class Scheduler:
    """Decides every step which requests run and how many tokens each advances.

    Drive it as an engine does: add_request(), then repeatedly schedule(), run
    the model, update_from_output(). The cursor (num_computed_tokens) advances
    inside schedule(); rejected draft tokens roll it back in update_from_output().
    """

    def __init__(self, config: SchedulerConfig):
        if not isinstance(config, SchedulerConfig):
            raise TypeError(f"config must be a SchedulerConfig, got {type(config).__name__}")
        self.config = config
        if config.is_hybrid:
            self.kv_cache = HybridKVCacheManager(
                config.num_blocks, config.block_size, config.max_model_len, config.enable_prefix_caching,
                config.num_gdn_groups, config.num_speculative_tokens, use_eagle=config.use_eagle,
                mode=config.gdn_cache_mode, num_checkpoints=config.num_gdn_checkpoints,
                checkpoint_granularity=config.checkpoint_granularity,
            )
        else:
            self.kv_cache = KVCacheManager(
                config.num_blocks, config.block_size, config.max_model_len, config.enable_prefix_caching
            )
        self.state_rows = StateSlotPool(config.max_num_seqs) if config.is_hybrid else None
        # vLLM's "align" mode: prefix caching on a hybrid model clips chunks to block boundaries.
        self.align_gdn_chunks = config.gdn_cache_mode == "align"
        # "chunk" mode: GDN checkpoints every checkpoint_granularity tokens, in a pool of their own.
        self.gdn_checkpoints = config.gdn_cache_mode == "chunk"
        self.prefix_cache_stats = PrefixCacheStats(getattr(self.kv_cache, "checkpoints", None))
        self.requests: dict[str, Request] = {}
        self.waiting = make_waiting_queue(config.policy)
        self.running: list[Request] = []
        # Requests finished or aborted since the last schedule() (their ids go out in its finished_req_ids):
        # kept whole, so that rollback_step can take back one that a failed step finished.
        self._finished: dict[str, Request] = {}
        # Each request rolled back by rollback_step that has not got past its failure since: (failed steps,
        # the furthest cursor they reached). One such request at a time is admitted.
        self.step_failures: dict[str, tuple[int, int]] = {}
        # A drafter with KV of its own (MTP/EAGLE, a draft model) writes it past the scheduled tokens.
        self.num_lookahead_tokens = config.lookahead_tokens
        # vLLM leaves the budget it picked inside a compile setting; say it up front.
        logger.info(
            "qwen_ops scheduler: max_num_batched_tokens=%d max_num_seqs=%d block_size=%d "
            "usable_blocks=%d policy=%s%s",
            config.max_num_batched_tokens,
            config.max_num_seqs,
            config.block_size,
            config.num_usable_blocks,
            config.policy,
            f" gdn_groups={config.num_gdn_groups} gdn_mode={config.gdn_cache_mode}"
            + (f" gdn_checkpoints={config.num_gdn_checkpoints}x{config.checkpoint_granularity}tok"
               if self.gdn_checkpoints else "")
            if config.is_hybrid else "",
        )

    # ----------------------------------------------------------------- requests

    def add_request(self, request: Request) -> None:
        """Queue a new request; rejects a duplicate id, a prompt of max_model_len tokens or more, or a
        request that could outgrow the whole KV cache."""
        if not isinstance(request, Request):
            raise TypeError(f"request must be a Request, got {type(request).__name__}")
        if request.request_id in self.requests:
            raise ValueError(f"request_id {request.request_id!r} is already in the scheduler")
        # A prompt of exactly max_model_len tokens leaves no room for an output
        # token, and once chunked it could never finish: running requests are
        # capped at max_model_len - 1 computed tokens. Reject it up front.
        if request.num_prompt_tokens >= self.config.max_model_len:
            raise ValueError(
                f"prompt_token_ids of request {request.request_id!r} has {request.num_prompt_tokens} "
                f"tokens; it must be shorter than max_model_len={self.config.max_model_len} "
                "to leave room for at least one generated token"
            )
        # A request whose longest possible sequence needs more blocks than the
        # whole cache has could never finish: alone, it would preempt itself
        # forever. vLLM prevents this globally (max_model_len must fit the
        # cache at start-up); here it is checked per request.
        cfg = self.config
        longest = min(request.num_prompt_tokens + request.max_tokens + cfg.num_speculative_tokens, cfg.max_model_len)
        if -(-longest // cfg.block_size) + self._max_gdn_pages_per_request() > cfg.num_blocks - 1:
            raise ValueError(
                f"request {request.request_id!r} may grow to {longest} tokens, more than the KV cache holds "
                f"({cfg.num_blocks - 1} usable blocks of {cfg.block_size}"
                + (f", {self._max_gdn_pages_per_request()} of them GDN state pages" if cfg.is_hybrid else "")
                + "); lower max_tokens or add blocks"
            )
        if request.status is not RequestStatus.WAITING or request.num_computed_tokens:
            raise ValueError(f"request {request.request_id!r} was already scheduled once")
        # The length at which it stops (max_tokens or max_model_len, whichever comes first):
        # one comparison per sampled token in update_from_output instead of two.
        request.length_limit = min(request.num_prompt_tokens + request.max_tokens, cfg.max_model_len)
        # EOS (unless ignored) and the stop tokens in one set: one membership test per sampled token.
        eos = request.eos_token_id
        request.finish_token_ids = request.stop_token_ids if eos is None else request.stop_token_ids | {eos}
        self.kv_cache.update_block_hashes(request)
        self._set_plain_token_bounds(request)
        self.requests[request.request_id] = request
        self.waiting.add(request)

    def abort_request(self, request_id: str) -> bool:
        """Abort a request and free what it holds. Returns False if it is unknown or already finished.

        Not an error: a client may abort a request that finished an instant before.
        """
        request = self.requests.get(request_id)
        if request is None:
            return False
        if request.status is RequestStatus.RUNNING:
            self.running.remove(request)
        else:
            self.waiting.remove(request)
        request.status = RequestStatus.FINISHED_ABORTED
        self._free(request)
        return True

    def has_unfinished_requests(self) -> bool:
        """Whether any request is waiting or running."""
        return bool(self.running) or len(self.waiting) > 0

    @property
    def num_free_blocks(self) -> int:
        """Usable blocks not owned by any request, cached-and-evictable ones included
        (vLLM's get_num_free_blocks(); the null block 0 is never counted)."""
        return self.kv_cache.num_free_blocks

    def _max_gdn_pages_per_request(self) -> int:
        """GDN pages one request can hold at once, all groups together: one (plus the
        speculative ones) per group without prefix caching, two (plus those) in align mode."""
        cfg = self.config
        per_group = (2 if self.align_gdn_chunks else 1) + cfg.num_speculative_tokens  # "chunk": as "none"
        return cfg.num_gdn_groups * per_group if cfg.is_hybrid else 0

    def update_draft_token_ids(self, draft_token_ids: dict[str, list[int]]) -> None:
        """Attach the draft tokens proposed after a step; the next step verifies them.

        Drafts for a request that is mid-prefill or finished are dropped, as in vLLM.
        """
        if not isinstance(draft_token_ids, dict):
            raise TypeError(f"draft_token_ids must be a dict, got {type(draft_token_ids).__name__}")
        for request_id, drafts in draft_token_ids.items():
            if type(drafts) is not list or set(map(type, drafts)) - _INT:
                raise TypeError(f"draft_token_ids[{request_id!r}] must be a list of ints, got {drafts!r}")
            request = self.requests.get(request_id)
            if request is None:
                continue
            if len(drafts) > self.config.num_speculative_tokens:
                raise ValueError(
                    f"draft_token_ids[{request_id!r}] has {len(drafts)} tokens, more than "
                    f"num_speculative_tokens={self.config.num_speculative_tokens}"
                )
            request.spec_token_ids = [] if request.is_prefill_chunk else list(drafts)

    # ----------------------------------------------------------------- schedule

    def schedule(self) -> SchedulerOutput:
        """Pick this step's batch under the token budget and advance each scheduled request's cursor."""
        cfg = self.config
        kv_cache = self.kv_cache
        lookahead = self.num_lookahead_tokens
        max_model_len = cfg.max_model_len
        token_budget = cfg.max_num_batched_tokens
        num_scheduled: dict[str, int] = {}
        computed_before: dict[str, int] = {}
        new_blocks: dict[str, list[int]] = {}
        spec_tokens: dict[str, list[int]] = {}
        scheduled_running: list[Request] = []
        admitted: list[Request] = []
        preempted: list[Request] = []
        new_ids, resumed_ids = [], []
        num_cached_tokens: dict[str, int] = {}
        prefix_hit_reasons: dict[str, str] = {}
        checkpoint_loads: dict[str, int] = {}
        # What the model runner reads per scheduled request (see _record_admitted).
        token_ids: dict[str, list[int]] = {}
        block_ids: dict[str, list[int]] = {}
        group_block_ids: dict[str, tuple[list[int], ...]] = {}
        state_slots: dict[str, int] = {}
        sampling: list[str] = []
        hybrid = cfg.is_hybrid
        per_group = kv_cache.block_ids_per_group if hybrid else None
        priority = cfg.policy == "priority"
        was_prefill_chunk: dict[str, bool] = {}  # priority: restored if a scheduled request is preempted
        align = self.align_gdn_chunks
        checkpoints = self.gdn_checkpoints
        kv_cache.new_step_starts()
        # A long prompt may not hog the step only when someone else wants tokens too.
        threshold = cfg.long_prefill_token_threshold if len(self.running) + len(self.waiting) > 1 else 0
        # Whether a running request was mid-prefill (decides draft padding below).
        prefill_scheduled = False
        # After a failed step: one of its rolled-back requests at a time runs until it gets past its failure,
        # so that a second failure is charged to that one, not to all of them again.
        step_failures = self.step_failures
        retry_running = bool(step_failures) and any(r.request_id in step_failures for r in self.running)

        # 1. Running requests, in running order. This loop runs for every running
        # request every step: it reads plain attributes and compares with `if`
        # rather than calling properties and min(), which cost more per call.
        running = self.running
        index = 0
        # One comparison below instead of two. Without a threshold the budget is the clip: the budget
        # test after it clips to at most that anyway, and a small int (unlike sys.maxsize) takes the
        # interpreter's fast int comparison.
        long_clip = threshold if threshold > 0 else token_budget
        last_position = max_model_len - 1
        while index < len(running) and token_budget > 0:
            request = running[index]
            computed = request.num_computed_tokens
            tokens = request.all_token_ids
            num_tokens = len(tokens)
            # Each sum of two cursors is a new int object (past 256): the step's end is formed once,
            # and the drafts are added only when there are some.
            num_new = num_tokens - computed
            drafts = request.spec_token_ids
            if drafts:
                num_new += len(drafts)
            if num_new > long_clip:
                num_new = long_clip
            if num_new > token_budget:
                num_new = token_budget
            end = computed + num_new
            if end > last_position:
                # The step's last position must leave room for the token it samples.
                num_new = last_position - computed
                end = last_position
            if align and num_new > 0 and computed < max(request.num_prompt_tokens, num_tokens - 1):
                # (A decode, the usual case, is past the prefill: the split would return num_new.)
                num_new = self._gdn_block_aligned_split(request, num_new)
                end = computed + num_new
            elif checkpoints and num_new > 0 and computed < max(request.num_prompt_tokens, num_tokens - 1):
                num_new = self._checkpoint_aligned_split(request, num_new)
                end = computed + num_new
            if num_new <= 0:
                index += 1  # nothing to do for it now; not a reason to stop
                continue

            if end <= request.no_alloc_end and computed <= request.no_alloc_start:
                blocks = []  # what allocate_slots would return, without the call (see Request.no_alloc_end)
            else:
                blocks = kv_cache.allocate_slots(request, num_new, (), lookahead)
                while blocks is None:
                    victim = self._pick_victim()
                    if priority:
                        victim_index = running.index(victim)
                        del running[victim_index]
                        if victim_index < index:
                            index -= 1
                        if victim in scheduled_running:  # give back what it got this step
                            victim_id = victim.request_id
                            scheduled_running.remove(victim)
                            token_budget += num_scheduled.pop(victim_id)
                            del computed_before[victim_id], new_blocks[victim_id], token_ids[victim_id]
                            del block_ids[victim_id]
                            spec_tokens.pop(victim_id, None)
                            group_block_ids.pop(victim_id, None)
                            state_slots.pop(victim_id, None)
                            if victim_id in sampling:
                                sampling.remove(victim_id)
                            victim.is_prefill_chunk = was_prefill_chunk[victim_id]
                            # (_preempt below resets the cursor advanced by the recording.)
                    else:
                        running.pop()
                    self._preempt(victim)
                    preempted.append(victim)
                    if victim is request:
                        break
                    blocks = kv_cache.allocate_slots(request, num_new, (), lookahead)
                if blocks is None:
                    if priority:
                        continue  # it preempted itself; `index` already points at the next one
                    break

            request_id = request.request_id
            scheduled_running.append(request)
            num_scheduled[request_id] = num_new
            computed_before[request_id] = computed
            new_blocks[request_id] = blocks
            token_budget -= num_new
            index += 1
            # What _record_admitted records for each admitted request, inlined for the running ones
            # (the loop that runs for every request every step). Known tokens end at
            # min(end, num_tokens); drafts fill the rest of the step (`drafts` is request.spec_token_ids).
            if drafts:
                request.spec_token_ids = []
                if end > num_tokens:
                    drafts = spec_tokens[request_id] = drafts[: end - num_tokens]
                    token_ids[request_id] = tokens[computed:num_tokens] + drafts
                else:
                    token_ids[request_id] = tokens[computed:end]
            else:
                token_ids[request_id] = tokens[computed:end]
            block_ids[request_id] = request.block_ids
            if hybrid:
                group_block_ids[request_id] = request.group_tables or per_group(request)
                state_slots[request_id] = request.state_slot
            if priority:
                was_prefill_chunk[request_id] = request.is_prefill_chunk
            if request.is_prefill_chunk:
                prefill_scheduled = True
            # The cursor advances now, so the next step can continue a chunked prefill at
            # once; rejected drafts roll it back in update_from_output.
            request.num_computed_tokens = end
            # (Branches, not `= end < num_tokens`: the interpreter's fast int comparison is
            # only for a comparison that jumps.)
            if end < num_tokens:
                request.is_prefill_chunk = True  # a chunk inside the known tokens samples nothing
            else:
                request.is_prefill_chunk = False
                sampling.append(request_id)

        # 2. Waiting requests, unless this step had to preempt.
        waiting = self.waiting
        while not preempted and len(waiting) and token_budget > 0:
            if len(running) >= cfg.max_num_seqs:
                break
            request = waiting.peek()
            if step_failures and request.request_id in step_failures:
                if retry_running:
                    break
                retry_running = True
            cached_blocks, num_cached = self.kv_cache.get_computed_blocks(request)
            num_new = request.num_tokens - num_cached
            pad_drafts = False
            if (
                cfg.num_speculative_tokens
                and num_new == 1
                and not prefill_scheduled
                and (scheduled_running or num_cached > 0)
                and num_cached + 1 + cfg.num_speculative_tokens + 1 <= cfg.max_model_len
            ):
                # A request that only has one token left joins as a decode with
                # placeholder drafts, so that every decode row has the same shape.
                if 1 + cfg.num_speculative_tokens > token_budget:
                    break
                num_new = 1 + cfg.num_speculative_tokens
                pad_drafts = True
            if 0 < threshold < num_new:
                num_new = threshold
                if pad_drafts:  # clipped placeholder rows would not match the drafts: drop them
                    num_new, pad_drafts = 1, False
            if not cfg.enable_chunked_prefill and num_new > token_budget:
                break
            num_new = min(num_new, token_budget)
            if align:
                num_new = self._gdn_block_aligned_split(request, num_new, num_cached)
                if num_new == 0:
                    break  # no block-aligned chunk fits: admission ends for this step
                if pad_drafts and num_new != 1 + cfg.num_speculative_tokens:
                    num_new, pad_drafts = 1, False  # clipped placeholder rows: drop them
            elif checkpoints and not pad_drafts:
                num_new = self._checkpoint_aligned_split(request, num_new, num_cached)

            blocks = self.kv_cache.allocate_slots(
                request,
                num_new,
                cached_blocks,
                self.num_lookahead_tokens,
                whole_prompt_must_fit=cfg.reserve_full_prompt,
            )
            if blocks is None:
                break  # head-of-line: nothing behind it is admitted either

            waiting.pop()
            running.append(request)
            admitted.append(request)
            if request.status is RequestStatus.WAITING:
                new_ids.append(request.request_id)
            else:
                resumed_ids.append(request.request_id)
            if hybrid and kv_cache.enable_caching:
                prefix_hit_reasons[request.request_id] = request.prefix_hit_reason
                if request.status is RequestStatus.WAITING:
                    self.prefix_cache_stats.record(request.num_prompt_tokens, num_cached, request.prefix_hit_reason)
                if cached_blocks.checkpoint is not None:
                    checkpoint_loads[request.request_id] = cached_blocks.checkpoint
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = num_cached
            num_cached_tokens[request.request_id] = num_cached
            if self.state_rows is not None:
                request.state_slot = self.state_rows.allocate()
            num_scheduled[request.request_id] = num_new
            computed_before[request.request_id] = num_cached
            new_blocks[request.request_id] = list(request.block_ids)  # all new to the model runner
            token_budget -= num_new
            if pad_drafts:
                spec_tokens[request.request_id] = [-1] * cfg.num_speculative_tokens

        # Batch order, the order of num_scheduled: the running requests kept, then the admitted ones.
        self._record_admitted(admitted, num_scheduled, spec_tokens, token_ids, block_ids, group_block_ids,
                              state_slots, sampling)
        checkpoint_saves = {}
        if checkpoints:
            # Planned once the batch is final (a preempted request saves nothing), in batch order.
            for request_id, num_new in num_scheduled.items():
                saves = kv_cache.plan_checkpoints(self.requests[request_id], computed_before[request_id], num_new)
                if saves:
                    checkpoint_saves[request_id] = saves
        finished, self._finished = set(self._finished), {}
        return SchedulerOutput(
            num_scheduled_tokens=num_scheduled,
            # Every scheduled token was taken from the budget (and a preempted victim's given back).
            total_num_scheduled_tokens=cfg.max_num_batched_tokens - token_budget,
            num_computed_tokens=computed_before,
            token_ids=token_ids,
            block_ids=block_ids,
            new_block_ids=new_blocks,
            group_block_ids=group_block_ids,
            num_cached_tokens=num_cached_tokens,
            scheduled_spec_decode_tokens=spec_tokens,
            state_slots=state_slots,
            sampling_req_ids=sampling,
            new_req_ids=new_ids,
            resumed_req_ids=resumed_ids,
            preempted_req_ids={r.request_id for r in preempted},
            finished_req_ids=finished,
            num_free_blocks=kv_cache.num_free_blocks,
            block_size=cfg.block_size,
            enable_chunked_prefill=cfg.enable_chunked_prefill,
            num_speculative_tokens=cfg.num_speculative_tokens,
            prefix_hit_reasons=prefix_hit_reasons,
            gdn_checkpoint_loads=checkpoint_loads,
            gdn_checkpoint_saves=checkpoint_saves,
        )

    def _checkpoint_aligned_split(self, request: Request, num_new: int, num_new_cached: int = 0) -> int:
        """"chunk" mode: a prefill chunk that does not finish the prefill ends on a checkpoint boundary
        when one lies inside it, so that the next chunk starts on the chunk kernel's grid (its
        checkpoints are then chunk ends of the kernel). A chunk too short to reach one keeps its end."""
        start = request.num_computed_tokens + num_new_cached
        end = start + num_new
        if end >= max(request.num_prompt_tokens, request.num_tokens - 1):
            return num_new
        gran = self.config.checkpoint_granularity
        aligned = end // gran * gran
        return aligned - start if aligned > start else num_new

    def _gdn_block_aligned_split(self, request: Request, num_new: int, num_new_cached: int = 0) -> int:
        """Clip a prefill chunk so that it ends where a GDN state must be cached (align mode).

        vLLM 0.33's _mamba_block_aligned_split on the Triton/fla GDN path (no
        checkpoints saved inside a chunk, as vllm-ascend runs it): GDN block p
        holds the state after exactly (p + 1) * B tokens and states are written
        at chunk ends, so a chunk that does not finish the prefill ends on a
        block boundary (a block wider than the budget may end mid-block and
        re-align at the next boundary). A chunk also stops at the last cacheable
        position ((num_tokens - 1) // B * B; with an MTP drafter's block drop, as
        vLLM's get_mamba_prefill_checkpoint_position, num_tokens // B * B - B)
        and at a shared-prefix junction.
        """
        start = request.num_computed_tokens + num_new_cached
        prefill_end = max(request.num_prompt_tokens, request.num_tokens - 1)
        if start >= prefill_end:
            return num_new
        size = self.config.block_size
        end = start + num_new
        if end < prefill_end:
            max_chunk = self.config.max_num_batched_tokens
            if self.config.long_prefill_token_threshold > 0:
                max_chunk = min(max_chunk, self.config.long_prefill_token_threshold)
            aligned_end = end // size * size
            if aligned_end > start or size <= max_chunk:
                end = aligned_end
        if self.kv_cache.use_eagle:
            stops = [max(request.num_tokens // size * size - size, 0)]  # a hit drops the drafter's last block
        else:
            stops = [(request.num_tokens - 1) // size * size]  # the last cacheable block boundary
        if start % size:
            stops.append((start // size + 1) * size)  # a chunk starting mid-block ends at its boundary
        junction = request.shared_prefix_boundary
        if start < junction < end:
            stops.append(start + (junction - start) // size * size)
        end = min((stop for stop in stops if start < stop < end), default=end)
        return max(end - start, 0)

    def _pick_victim(self) -> Request:
        """The running request to preempt: the last one (FCFS) or the lowest priority one."""
        if self.config.policy == "priority":
            return max(self.running, key=lambda r: (r.priority, r.arrival_time))
        return self.running[-1]

    def _preempt(self, request: Request) -> None:
        """Free all the request's blocks and requeue it at the front, to recompute from scratch."""
        self._release_resources(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.spec_token_ids = []
        request.num_preemptions += 1
        self.waiting.prepend(request)

    def _record_admitted(self, admitted, num_scheduled, spec_tokens, token_ids, block_ids, group_block_ids,
                         state_slots, sampling) -> None:
        """Record each admitted request's step inputs and advance its cursor, as the running loop
        of schedule() does inline for the running ones (the same fields, the same formulas)."""
        hybrid = self.config.is_hybrid
        for request in admitted:
            request_id = request.request_id
            start = request.num_computed_tokens  # not advanced yet: its prefix hit
            end = start + num_scheduled[request_id]
            tokens = request.all_token_ids
            drafts = spec_tokens.get(request_id)  # placeholder drafts only
            known_end = end - len(drafts) if drafts else end
            token_ids[request_id] = tokens[start:known_end] + drafts if drafts else tokens[start:end]
            block_ids[request_id] = request.block_ids
            if hybrid:
                group_block_ids[request_id] = self.kv_cache.block_ids_per_group(request)
                state_slots[request_id] = request.state_slot
            if known_end >= len(tokens):
                sampling.append(request_id)
            request.num_computed_tokens = end
            request.is_prefill_chunk = end < len(tokens)

    # ------------------------------------------------------------ after a step

    def update_from_output(
        self, scheduler_output: SchedulerOutput, sampled_token_ids: dict[str, list[int]]
    ) -> list[EngineCoreOutput]:
        """Apply the tokens sampled in a step: append them, roll back rejected drafts, stop finished requests.

        sampled_token_ids: per request, the accepted draft tokens followed by the one
            sampled token, as a list (or tuple) of Python ints (empty or absent for a request
            that did not sample; only requests in sampling_req_ids may get tokens).
        Returns one EngineCoreOutput per request that got tokens or finished.
        Raises TypeError/ValueError naming the bad sampled_token_ids[<id>] entry, and
        ValueError when the same scheduler_output is applied a second time.
        """
        if not isinstance(sampled_token_ids, dict):
            raise TypeError(f"sampled_token_ids must be a dict, got {type(sampled_token_ids).__name__}")
        if scheduler_output.applied:
            raise ValueError("scheduler_output was already applied by update_from_output(); each step is applied once")
        scheduled = scheduler_output.num_scheduled_tokens
        # Cheap checks first, all in C (set comparisons); the culprit is searched only when one fails.
        try:
            token_types = set(map(type, chain.from_iterable(sampled_token_ids.values())))
        except TypeError:  # a value that is not a list
            token_types = None
        sampling = scheduler_output.sampling_req_ids
        # sampling_req_ids is a subset of the scheduled ids without repeats: when every scheduled
        # request samples (a decode step), the two are the same set, and the dict's own keys view
        # is compared instead of building a set of them.
        may_sample = scheduled.keys() if len(sampling) == len(scheduled) else set(sampling)
        if token_types is None or not token_types <= _INT or not sampled_token_ids.keys() <= may_sample:
            _raise_bad_sampled_token_ids(scheduler_output, sampled_token_ids)
        scheduler_output.applied = True
        outputs = []
        stopped = []
        requests = self.requests
        running_status = RequestStatus.RUNNING
        spec = scheduler_output.scheduled_spec_decode_tokens
        recache_drafts = self.config.num_speculative_tokens and self.kv_cache.enable_caching
        # The usual step: no drafts, one token per request that neither stops it nor
        # completes a block (see Request.plain_append_below). It is applied inline (the general
        # path below gives the same result, through _append_and_check_stop); anything else
        # takes the general path.
        fast = not spec and not recache_drafts
        sampled_get, requests_get, append = sampled_token_ids.get, requests.get, outputs.append
        for request_id in scheduled:  # batch order: it decides the order blocks are freed in
            new_tokens = sampled_get(request_id)
            if not new_tokens:
                continue
            request = requests_get(request_id)
            if request is None or request.status is not running_status:
                continue  # aborted while the step ran
            if fast and len(new_tokens) == 1:
                token, tokens = new_tokens[0], request.all_token_ids
                if token not in request.finish_token_ids and len(tokens) < request.plain_append_below:
                    tokens.append(token)
                    append(EngineCoreOutput(request_id, [token]))
                    continue
            drafts = spec.get(request_id) if spec else None
            num_drafts = len(drafts) if drafts else 0
            if len(new_tokens) > 1 + num_drafts:
                raise ValueError(
                    f"sampled_token_ids[{request_id!r}] has {len(new_tokens)} tokens; at most "
                    f"1 + {num_drafts} drafts can be accepted"
                )
            if num_drafts:
                num_rejected = num_drafts - (len(new_tokens) - 1)
                request.num_computed_tokens -= num_rejected
            new_tokens = self._append_and_check_stop(request, list(new_tokens))
            if recache_drafts:
                # Blocks filled by accepted drafts are known tokens now.
                self.kv_cache.cache_blocks(request, request.num_computed_tokens)
            if request.status is running_status:
                outputs.append(EngineCoreOutput(request_id, new_tokens))
            else:
                reason = request.status.finish_reason
                outputs.append(EngineCoreOutput(request_id, new_tokens, True, reason, request.stop_reason))
                stopped.append(request)
        if stopped:
            gone = set(map(id, stopped))
            self.running = [r for r in self.running if id(r) not in gone]
            for request in stopped:
                self._free(request)
        return outputs

    def _append_and_check_stop(self, request: Request, new_tokens: list[int]) -> list[int]:
        # Stop checks in vLLM's order: EOS, stop tokens, then length.
        tokens, eos, stop_token_ids = request.all_token_ids, request.eos_token_id, request.stop_token_ids
        max_model_len = self.config.max_model_len
        for count, token in enumerate(new_tokens, 1):
            tokens.append(token)
            if token == eos:
                request.status = RequestStatus.FINISHED_STOPPED
            elif token in stop_token_ids:
                request.status = RequestStatus.FINISHED_STOPPED
                request.stop_reason = token
            elif len(tokens) >= max_model_len or len(tokens) - request.num_prompt_tokens >= request.max_tokens:
                request.status = RequestStatus.FINISHED_LENGTH_CAPPED
            else:
                continue
            # Tokens after the stop are dropped; the cursor covers all kept tokens but the last.
            request.num_computed_tokens -= len(new_tokens) - count
            del new_tokens[count:]
            break
        kv_cache = self.kv_cache
        if kv_cache.enable_caching and len(tokens) >= (len(request.block_hashes) + 1) * kv_cache.block_size:
            kv_cache.update_block_hashes(request)  # a block of tokens completed: hash it
            self._set_plain_token_bounds(request)
        return new_tokens

    def _set_plain_token_bounds(self, request: Request) -> None:
        """Set request.plain_append_below (see Request): the fast path of update_from_output appends
        one token to a request of L tokens when L + 1 < length_limit (it does not stop for length)
        and, with prefix caching, L + 1 < (len(block_hashes) + 1) * block_size (no block to hash
        completes). Called whenever either side changes: at add_request and after hashing."""
        below = request.length_limit - 1
        kv_cache = self.kv_cache
        if kv_cache.enable_caching:
            below = min(below, (len(request.block_hashes) + 1) * kv_cache.block_size - 1)
        request.plain_append_below = below

    def _release_resources(self, request: Request) -> None:
        self.kv_cache.free(request)
        if request.state_slot is not None:
            self.state_rows.free(request.state_slot)
            request.state_slot = None

    def _free(self, request: Request) -> None:
        """Release a finished request and forget it."""
        self._release_resources(request)
        self._finished[request.request_id] = request
        del self.requests[request.request_id]
        if self.step_failures:
            self.step_failures.pop(request.request_id, None)

    # ------------------------------------------------------------ a failed step

    def rollback_step(self, scheduler_output: SchedulerOutput | None, num_output_tokens: dict[str, int],
                      max_consecutive_failures: int) -> list[str]:
        """Undo a step that raised, after schedule() (``scheduler_output``: its output) or inside it (None);
        returns the ids of the requests it ended.

        Each request named in ``num_output_tokens`` (the step's requests) is charged one failed step
        (``step_failures``; a fault fails the whole batch, so each of them is); they count until the request
        gets past the furthest point its failed steps reached (``step_succeeded``), so the re-prefill steps of
        a retry do not break the row. It goes back to its prompt
        plus its first ``num_output_tokens[id]`` output tokens (what the engine recorded; later ones are
        dropped), with nothing computed and no pages or state row, to the front of the waiting queue in
        serving order: preemption by recompute, so it re-prefills and goes on. It is admitted only while no
        other such request runs, until it gets past them, so a second fault is charged to one of them at a
        time (a poisoned request ends alone; the ones that failed with it come back one after another). At its ``max_consecutive_failures``-th failed step in a row it ends instead with FINISHED_ERROR (finish reason "error") and is freed. A named request may be
        running, waiting, finished by update_from_output in the step, or left half-admitted by a schedule()
        that raised. First the step's prefix-cache registrations are dropped: the pages the step wrote may be
        half-written, so no later hit may read them (nor the GDN checkpoints it saved, in "chunk" mode).
        Requests not named go on untouched.

        Every request of the step that has not finished must be named (ValueError otherwise); when
        schedule() raised (None), every unfinished request (ValueError otherwise): no
        request holds a page afterwards, so the pool's blocks and the state rows are reclaimed whole,
        including any the raise left taken but given to nobody. Raises ValueError for an unknown id or a
        count outside [0, the request's output tokens], before changing anything.
        """
        named: dict[str, Request] = {}
        for request_id, count in num_output_tokens.items():
            request = self.requests.get(request_id) or self._finished.get(request_id)
            if request is None:
                raise ValueError(f"rollback_step: request {request_id!r} is unknown to the scheduler")
            if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= request.num_output_tokens:
                raise ValueError(f"rollback_step: num_output_tokens[{request_id!r}] must be an int in "
                                 f"[0, {request.num_output_tokens}], got {count!r}")
            named[request_id] = request
        if isinstance(max_consecutive_failures, bool) or not isinstance(max_consecutive_failures, int) or \
                max_consecutive_failures < 1:
            raise ValueError(f"rollback_step: max_consecutive_failures must be an int >= 1, got "
                             f"{max_consecutive_failures!r}")
        left_out = [r for r in (scheduler_output.num_scheduled_tokens if scheduler_output is not None else ())
                    if r in self.requests and r not in named]
        if left_out:
            raise ValueError(f"rollback_step: requests {left_out} ran in the failed step and must be rolled back")
        if scheduler_output is None and self.requests.keys() - named.keys():
            raise ValueError(f"rollback_step: schedule() raised, so every unfinished request must be rolled back; "
                             f"missing {sorted(self.requests.keys() - named.keys())}")
        self.kv_cache.pool.drop_step_registrations()
        if getattr(self.kv_cache, "checkpoints", None) is not None:  # "chunk" mode: the step's GDN checkpoints too
            self.kv_cache.checkpoints.drop_step_reservations()
        order, seen = [], set()  # serving order: running, then waiting, then the others
        for request in chain(self.running, self.waiting, named.values()):
            if request.request_id in named and request.request_id not in seen:
                seen.add(request.request_id)
                order.append(request)
        self.running = [r for r in self.running if r.request_id not in named]
        kept = [r for r in self.waiting if r.request_id not in named]
        self.waiting = make_waiting_queue(self.config.policy)
        for request in kept:
            self.waiting.add(request)
        failures = self.step_failures
        for request_id, request in named.items():
            count, reached = failures.get(request_id, (0, 0))
            # The cursor schedule() advanced to the failed step's end (or the one it had, if it raised first).
            failures[request_id] = (count + 1, max(reached, request.num_computed_tokens))
        failed = {r for r in named if failures[r][0] >= max_consecutive_failures}
        block_size = self.config.block_size
        for request in order:
            request_id = request.request_id
            self._finished.pop(request_id, None)
            self.requests[request_id] = request
            self._release_resources(request)
            keep = request.num_prompt_tokens + num_output_tokens[request_id]
            del request.all_token_ids[keep:]
            del request.block_hashes[keep // block_size:]
            request.num_computed_tokens = 0
            request.spec_token_ids = []
            request.is_prefill_chunk = False
            request.stop_reason = None
            request.shared_prefix_boundary = 0
            self._set_plain_token_bounds(request)
            request.status = RequestStatus.PREEMPTED
        for request in order:
            if request.request_id in failed:
                request.status = RequestStatus.FINISHED_ERROR
                self._free(request)
        for request in reversed(order):
            if request.request_id not in failed:
                self.waiting.prepend(request)
        if scheduler_output is None:
            self.kv_cache.pool.reclaim_all()
            if self.state_rows is not None:
                self.state_rows.reclaim_all()
        return [r.request_id for r in order if r.request_id in failed]

    def step_succeeded(self, scheduler_output: SchedulerOutput) -> None:
        """The step of ``scheduler_output`` completed (its outputs taken): a request of it that got past the
        furthest point its failed steps reached is no longer charged with them (see rollback_step)."""
        failures, requests = self.step_failures, self.requests
        for request_id in scheduler_output.num_scheduled_tokens:
            charged = failures.get(request_id)
            if charged is not None and requests[request_id].num_computed_tokens > charged[1]:
                del failures[request_id]


_INT = {int}


def _raise_bad_sampled_token_ids(scheduler_output: SchedulerOutput, sampled_token_ids: dict) -> None:
    """The slow path of update_from_output()'s checks: name the first bad entry."""
    sampling = set(scheduler_output.sampling_req_ids)
    for request_id, tokens in sampled_token_ids.items():
        name = f"sampled_token_ids[{request_id!r}]"
        if request_id not in scheduler_output.num_scheduled_tokens:
            raise ValueError(f"{name}: request {request_id!r} was not scheduled in this step")
        if not isinstance(tokens, (list, tuple)):
            raise TypeError(f"{name} must be a list of ints (token ids), got {type(tokens).__name__}")
        bad = [t for t in tokens if type(t) is not int]
        if bad:
            raise TypeError(f"{name} must hold ints (token ids), got {bad[0]!r} of type {type(bad[0]).__name__}")
        if tokens and request_id not in sampling:
            raise ValueError(
                f"{name} has {len(tokens)} tokens, but request {request_id!r} does not sample in this step "
                "(a partial prefill chunk); only requests in scheduler_output.sampling_req_ids get tokens"
            )
