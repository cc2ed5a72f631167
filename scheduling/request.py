"""A generation request as the scheduler sees it: tokens, a computed-token cursor, a status."""

import enum
import time


class RequestStatus(enum.Enum):
    """Where a request is in its life (vLLM's names)."""

    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "finished_stopped"  # EOS or a stop token
    FINISHED_LENGTH_CAPPED = "finished_length_capped"  # max_tokens or max_model_len
    FINISHED_ABORTED = "finished_aborted"
    FINISHED_ERROR = "finished_error"  # its steps failed too often (Scheduler.rollback_step)

    @property
    def is_finished(self) -> bool:
        return self in _FINISHED

    @property
    def finish_reason(self) -> str | None:
        """The OpenAI-style reason: "stop", "length", "abort", "error", or None while unfinished."""
        return _FINISH_REASONS.get(self)


_FINISHED = {RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED, RequestStatus.FINISHED_ABORTED,
             RequestStatus.FINISHED_ERROR}
_FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH_CAPPED: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
    RequestStatus.FINISHED_ERROR: "error",
}


class Request:
    """One request: its prompt, its outputs so far and the scheduler's bookkeeping.

    The scheduler's cursor is `num_computed_tokens`: how many of `all_token_ids`
    have their KV written (or scheduled to be, within the current step).
    """

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        max_tokens: int,
        arrival_time: float | None = None,
        priority: int = 0,
        eos_token_id: int | None = None,
        stop_token_ids=(),
        ignore_eos: bool = False,
    ):
        if not isinstance(request_id, str) or not request_id:
            raise ValueError(f"request_id must be a non-empty str, got {request_id!r}")
        # Copied first: an iterator would be consumed by the checks below.
        if not isinstance(prompt_token_ids, (str, bytes)) and hasattr(prompt_token_ids, "__iter__"):
            prompt_token_ids = list(prompt_token_ids)
        if not isinstance(prompt_token_ids, list) or not prompt_token_ids:
            raise ValueError(f"prompt_token_ids of request {request_id!r} must be a non-empty list of ints")
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt_token_ids):
            raise TypeError(f"prompt_token_ids of request {request_id!r} must hold ints (token ids)")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens of request {request_id!r} must be an int >= 1, got {max_tokens!r}")
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"priority of request {request_id!r} must be an int, got {priority!r}")
        if eos_token_id is not None and (isinstance(eos_token_id, bool) or not isinstance(eos_token_id, int)):
            raise TypeError(f"eos_token_id of request {request_id!r} must be an int or None, got {eos_token_id!r}")
        if not isinstance(stop_token_ids, (str, bytes)) and hasattr(stop_token_ids, "__iter__"):
            stop_token_ids = tuple(stop_token_ids)  # an iterator would be consumed by the check
        if not isinstance(stop_token_ids, tuple) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in stop_token_ids):
            raise TypeError(f"stop_token_ids of request {request_id!r} must be a collection of ints, "
                            f"got {stop_token_ids!r}")
        if arrival_time is not None and (isinstance(arrival_time, bool)
                                         or not isinstance(arrival_time, (int, float))):
            raise TypeError(f"arrival_time of request {request_id!r} must be a number, got {arrival_time!r}")
        if not isinstance(ignore_eos, bool):
            raise TypeError(f"ignore_eos of request {request_id!r} must be a bool, got {ignore_eos!r}")
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.num_prompt_tokens = len(self.prompt_token_ids)
        self.all_token_ids = list(self.prompt_token_ids)
        self.max_tokens = max_tokens
        # Prompt plus output tokens at which it stops for length (the scheduler also caps it at max_model_len).
        self.length_limit = self.num_prompt_tokens + max_tokens
        # Set by the scheduler (Scheduler._set_plain_token_bounds): while len(all_token_ids) is below
        # plain_append_below, appending one token that is not in finish_token_ids neither stops the
        # request nor completes a block to hash, so update_from_output appends it with two tests.
        # 0 (never plain) until the scheduler sets it; a stale bound is low (block_hashes only grow).
        self.plain_append_below = 0
        self.finish_token_ids: frozenset[int] = frozenset()
        self.arrival_time = time.time() if arrival_time is None else float(arrival_time)
        self.priority = priority
        self.eos_token_id = None if ignore_eos else eos_token_id
        self.stop_token_ids = frozenset(stop_token_ids)
        self.ignore_eos = ignore_eos

        self.status = RequestStatus.WAITING
        self.stop_reason: int | None = None  # the stop token that finished it
        self.num_computed_tokens = 0
        self.spec_token_ids: list[int] = []  # draft tokens to verify in the next step
        self.num_preemptions = 0
        # Whether its last scheduled step ended inside the prompt (vLLM's
        # is_prefill_chunk): such a step sampled nothing.
        self.is_prefill_chunk = False
        # Owned by the KV cache manager.
        self.block_ids: list[int] = []
        self.num_cached_blocks = 0  # leading blocks already registered in the prefix cache
        self.block_hashes: list[bytes] = []  # chained hash of every full block of tokens
        # Set by the KV cache manager after each allocation, reset when it frees the request: a
        # running step from a cursor <= no_alloc_start to an end <= no_alloc_end takes, releases
        # and caches no page, so schedule() skips allocate_slots (which would return []). Both
        # bounds are conservative: beyond them allocate_slots decides, as before.
        self.no_alloc_end = -1
        self.no_alloc_start = -1
        # Hybrid models: the per-group block tables (vLLM's group order) once every group holds
        # one; the lists are live and keep their identity until the request is freed.
        self.group_tables: tuple[list[int], ...] | None = None
        # A hybrid model's GDN state row (see StateSlotPool), owned by the scheduler.
        self.state_slot: int | None = None
        # The attention prefix hit beyond the GDN hit at the last cache lookup (0: none):
        # align-mode chunks stop there so that its state gets cached (vLLM's name).
        self.shared_prefix_boundary = 0
        # Hybrid prefix caching: why the last prefix-cache lookup's hit stopped where it did
        # (gdn_checkpoints.HIT_REASONS; "" before any lookup or without caching).
        self.prefix_hit_reason = ""

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens."""
        return len(self.all_token_ids)

    @property
    def num_tokens_with_spec(self) -> int:
        """Tokens plus the draft tokens waiting to be verified."""
        return len(self.all_token_ids) + len(self.spec_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.all_token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.all_token_ids[self.num_prompt_tokens :]

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished

    def __lt__(self, other: "Request") -> bool:
        # Order of the priority policy's waiting heap, as in vLLM.
        return (self.priority, self.arrival_time, self.request_id) < (
            other.priority,
            other.arrival_time,
            other.request_id,
        )

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, status={self.status.name}, "
            f"computed={self.num_computed_tokens}/{self.num_tokens})"
        )
