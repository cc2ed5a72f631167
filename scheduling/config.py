"""Scheduler configuration and the default batch limits vLLM derives from device memory."""

import math
from dataclasses import dataclass

POLICIES = ("fcfs", "priority")
MAMBA_CACHE_MODES = ("none", "align", "chunk")


@dataclass(frozen=True)
class SchedulerConfig:
    """Limits and switches of the token-budget scheduler (vLLM V1 names and defaults).

    max_num_batched_tokens: tokens scheduled in one step, all requests together.
    max_num_seqs: requests running at once.
    block_size: tokens per KV block.
    num_blocks: KV blocks in the pool, including the reserved null block 0.
    max_model_len: longest sequence (prompt plus outputs).
    enable_chunked_prefill: split prompts across steps to fit the budget.
    enable_prefix_caching: reuse full KV blocks of identical prefixes.
    policy: "fcfs" or "priority" (smaller priority value first).
    long_prefill_token_threshold: cap on one request's tokens per step (0: no cap).
    reserve_full_prompt: admit a request only if its whole prompt fits in free
        blocks, not only its first chunk (vLLM's scheduler_reserve_full_isl).
    num_speculative_tokens: draft tokens per step.
    num_gdn_groups: GDN ("mamba") KV cache groups of a hybrid model (0: pure
        attention). vLLM's one-pool layout: every group gives a request its own
        pages from the same block pool, G GDN groups then one attention group
        (vLLM's get_kv_cache_groups order). Without prefix caching a request holds
        one page per GDN group (plus num_speculative_tokens); with it ("align"
        mode) GDN page p holds the state after exactly (p + 1) * block_size tokens.
        block_size is then the final (page-size-raised) block size.
    use_eagle: the drafter (MTP, EAGLE) keeps KV of its own at every position,
        computed from the next token, so a prefix hit stops one matched block
        short and align mode keeps GDN states one block lower (vLLM's
        SpeculativeConfig.use_eagle(): True for "mtp"/"eagle", False for
        "ngram"). Needs num_speculative_tokens > 0 and num_gdn_groups > 0.
    num_lookahead_tokens: KV slots reserved past the scheduled tokens for a
        drafter that writes KV of its own there (vLLM's
        VllmConfig.num_lookahead_tokens). None resolves it as vLLM does from
        what the config knows of the drafter: num_speculative_tokens for an
        EAGLE/MTP drafter (use_eagle) and 0 for an ngram one on a hybrid model
        (use_eagle=False there says the drafter is not EAGLE-style); an
        attention-only config, where use_eagle is not offered, keeps a draft
        model's num_speculative_tokens. An int sets it.
    mamba_cache_mode: how a hybrid model caches GDN states (vLLM's
        CacheConfig.mamba_cache_mode spelling). "none": no prefix caching of
        GDN states (needs enable_prefix_caching=False); "align": vLLM 0.33's
        mode above; "chunk": the attention block stays block_size and GDN
        states are kept as checkpoints every checkpoint_granularity tokens
        in a pool of num_gdn_checkpoints slots outside the block pool (see
        gdn_checkpoints.py); GDN pages are then held as in "none" mode. None
        (the default) picks vLLM's: "align" with prefix caching on a hybrid
        model, else "none".
    num_gdn_checkpoints: slots of the "chunk" mode's checkpoint pool (>= 1 there).
    gdn_checkpoint_tokens: the chunk kernel's chunk (64); checkpoints sit at
        multiples of lcm(gdn_checkpoint_tokens, block_size).
    """

    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    num_blocks: int
    max_model_len: int
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    policy: str = "fcfs"
    long_prefill_token_threshold: int = 0
    reserve_full_prompt: bool = True
    num_speculative_tokens: int = 0
    num_gdn_groups: int = 0
    use_eagle: bool = False
    num_lookahead_tokens: int | None = None
    mamba_cache_mode: str | None = None
    num_gdn_checkpoints: int = 0
    gdn_checkpoint_tokens: int = 64

    def __post_init__(self):
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size", "max_model_len"):
            _require_int(name, getattr(self, name), minimum=1)
        _require_int("num_blocks", self.num_blocks, minimum=2)  # null block + one usable
        for name in ("long_prefill_token_threshold", "num_speculative_tokens", "num_gdn_groups",
                     "num_gdn_checkpoints"):
            _require_int(name, getattr(self, name), minimum=0)
        if self.num_lookahead_tokens is not None:
            _require_int("num_lookahead_tokens", self.num_lookahead_tokens, minimum=0)
            if self.num_lookahead_tokens > self.num_speculative_tokens:
                raise ValueError(f"num_lookahead_tokens ({self.num_lookahead_tokens}) must be <= "
                                 f"num_speculative_tokens ({self.num_speculative_tokens}): a drafter writes KV "
                                 "for the tokens it drafts")
        for name in ("enable_chunked_prefill", "enable_prefix_caching", "reserve_full_prompt", "use_eagle"):
            if type(getattr(self, name)) is not bool:  # "no" or 0 would read as a silent True/False
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        # The same consistency checks vLLM's SchedulerConfig makes.
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_model_len ({self.max_model_len}) when enable_chunked_prefill is False"
            )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_num_seqs ({self.max_num_seqs})"
            )
        if self.long_prefill_token_threshold > self.max_model_len:
            raise ValueError(
                f"long_prefill_token_threshold ({self.long_prefill_token_threshold}) must be "
                f"<= max_model_len ({self.max_model_len})"
            )
        if self.num_speculative_tokens >= self.max_num_batched_tokens:
            raise ValueError(
                f"num_speculative_tokens ({self.num_speculative_tokens}) must be < "
                f"max_num_batched_tokens ({self.max_num_batched_tokens})"
            )
        if self.use_eagle and (self.num_speculative_tokens == 0 or self.num_gdn_groups == 0):
            # The attention-only manager does not drop the drafter's block; a hybrid model is what needs it.
            raise ValueError(f"use_eagle=True needs num_speculative_tokens > 0 and num_gdn_groups > 0, got "
                             f"{self.num_speculative_tokens} and {self.num_gdn_groups}")
        if self.num_gdn_groups > 255:  # group ids are one byte of the prefix-cache key
            raise ValueError(f"num_gdn_groups must be <= 255, got {self.num_gdn_groups}")
        self._check_mamba_cache_mode()
        if self.gdn_cache_mode == "align" and not self.enable_chunked_prefill:
            # Align mode saves GDN states only at block-aligned chunk ends, so it must be
            # free to clip chunks (vLLM refuses the same combination).
            raise ValueError(
                "enable_prefix_caching on a hybrid model (num_gdn_groups > 0) needs "
                "enable_chunked_prefill=True: GDN states are cached at block-aligned chunk ends"
            )

    def _check_mamba_cache_mode(self) -> None:
        if self.mamba_cache_mode is not None and self.mamba_cache_mode not in MAMBA_CACHE_MODES:
            raise ValueError(f"mamba_cache_mode must be one of {MAMBA_CACHE_MODES} or None, got "
                             f"{self.mamba_cache_mode!r}")
        mode = self.gdn_cache_mode
        if mode != "none" and not self.num_gdn_groups:
            raise ValueError(f"mamba_cache_mode={mode!r} needs a hybrid model (num_gdn_groups > 0)")
        if self.num_gdn_groups and (mode != "none") != self.enable_prefix_caching:
            raise ValueError(f"mamba_cache_mode={mode!r} does not go with enable_prefix_caching="
                             f"{self.enable_prefix_caching}: 'none' is the mode without prefix caching, "
                             "'align' and 'chunk' the modes with it")
        _require_int("gdn_checkpoint_tokens", self.gdn_checkpoint_tokens, minimum=1)
        if mode == "chunk" and self.num_gdn_checkpoints < 1:
            raise ValueError("mamba_cache_mode='chunk' needs num_gdn_checkpoints >= 1 (the checkpoint pool's "
                             f"slots), got {self.num_gdn_checkpoints}")

    @property
    def lookahead_tokens(self) -> int:
        """num_lookahead_tokens, None resolved (see the class docstring)."""
        if self.num_lookahead_tokens is not None:
            return self.num_lookahead_tokens
        drafter_writes_kv = self.use_eagle or not self.num_gdn_groups
        return self.num_speculative_tokens if drafter_writes_kv else 0

    @property
    def gdn_cache_mode(self) -> str:
        """mamba_cache_mode, None resolved as vLLM does: "align" with prefix caching on a hybrid model,
        else "none"."""
        if self.mamba_cache_mode is not None:
            return self.mamba_cache_mode
        return "align" if self.num_gdn_groups and self.enable_prefix_caching else "none"

    @property
    def checkpoint_granularity(self) -> int:
        """Tokens between two GDN checkpoints in "chunk" mode: lcm(gdn_checkpoint_tokens, block_size)."""
        return math.lcm(self.gdn_checkpoint_tokens, self.block_size)

    @property
    def num_usable_blocks(self) -> int:
        """Blocks that requests can own: all but the null block 0."""
        return self.num_blocks - 1

    @property
    def is_hybrid(self) -> bool:
        """Whether requests also hold GDN state pages (num_gdn_groups > 0)."""
        return self.num_gdn_groups > 0

    @property
    def gdn_block_size(self) -> int:
        """Tokens per GDN page as the scheduler counts them: block_size in align mode,
        max_model_len otherwise (one state page per request)."""
        return self.block_size if self.gdn_cache_mode == "align" else self.max_model_len


def _require_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def default_batch_limits(memory_gib: float, device_name: str, usage: str) -> tuple[int, int]:
    """Return (max_num_batched_tokens, max_num_seqs) as vLLM 0.33 picks them by default.

    memory_gib: device memory in GiB, as the engine reads it from the device.
    device_name: the device's name; an A100 keeps the small limits whatever its memory.
    usage: "server" (OpenAI API server) or "offline" (the LLM class).
    """
    if usage not in ("server", "offline"):
        raise ValueError(f"usage must be 'server' or 'offline', got {usage!r}")
    if isinstance(memory_gib, bool) or not isinstance(memory_gib, (int, float)):
        raise TypeError(f"memory_gib must be a number of GiB, got {memory_gib!r}")
    if not memory_gib >= 0:  # also refuses NaN
        raise ValueError(f"memory_gib must be a number >= 0 (not NaN), got {memory_gib}")
    if not isinstance(device_name, str):
        raise TypeError(f"device_name must be a str, got {device_name!r}")
    if memory_gib >= 160:
        return 16384, 1024
    if memory_gib >= 70 and "a100" not in device_name.lower():
        return (8192 if usage == "server" else 16384), 1024
    return (2048 if usage == "server" else 8192), 256
