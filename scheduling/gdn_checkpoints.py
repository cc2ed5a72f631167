"""GDN state checkpoints of the "chunk" prefix-caching mode: a bounded pool keyed by prefix hash, with its eviction rule.

In mode "chunk" the attention block stays the block size asked for and a
hybrid model's GDN states are cached as checkpoints at every multiple of the
checkpoint granularity (64 tokens, the chunk kernel's own chunk, or the least
common multiple with the block size): the state of every GDN layer (conv and
recurrent, float32) after exactly b tokens of a prefix. A checkpoint is much
larger than the KV of the tokens it covers, so checkpoints live in a pool of
their own with a fixed number of slots (a share of the memory budget), not in
the block pool.

Eviction, when a new checkpoint needs a slot and none is free: ordinary
checkpoints (boundaries inside a prompt) go first, least recently used first;
then the kept ones (a prompt's last boundary, which a resend or a longer
sibling hits, and a junction where two requests' prefixes diverged, which the
next request sharing the prefix hits), least recently used first. A slot that
a hit of the current step reads is never evicted in that step.
"""

from collections import OrderedDict

# Why a prefix hit stopped where it did (per request, and counted engine-wide).
HIT_REASONS = (
    "full",  # the hit reached the last boundary before the prompt's last token: nothing more to hit
    "no_attention_block",  # the attention blocks of the next boundary are not cached
    "no_gdn_checkpoint",  # attention blocks are cached past it, but no GDN state was kept at the next boundary
    "evicted",  # a GDN checkpoint at the next boundary existed and was evicted
    "mtp_block_drop",  # the MTP/EAGLE drafter's one-block drop put the next boundary out of reach
)


class GdnCheckpointPool:
    """Slots for GDN checkpoints: prefix hash -> slot, with the eviction rule of the module docstring.

    num_slots: slots in the pool (>= 1). Slot ids are [0, num_slots): a row of the
    engine's checkpoint tensors.
    """

    EVICTED_MEMORY = 1 << 16  # evicted hashes remembered (to tell "evicted" from "never kept")

    def __init__(self, num_slots: int):
        if isinstance(num_slots, bool) or not isinstance(num_slots, int) or num_slots < 1:
            raise ValueError(f"GdnCheckpointPool: num_slots must be an int >= 1, got {num_slots!r}")
        self.num_slots = num_slots
        self.slot_of: dict[bytes, int] = {}
        self.hash_of: list[bytes | None] = [None] * num_slots
        self.free: list[int] = list(range(num_slots - 1, -1, -1))  # popped from the end: slot 0 first
        # Least recently used first, per class.
        self.ordinary: OrderedDict[int, None] = OrderedDict()
        self.kept: OrderedDict[int, None] = OrderedDict()
        self.pinned: set[int] = set()  # read by a hit of the current step
        self.reserved_this_step: list[bytes] = []  # saved by the current step (dropped if it fails)
        self.evicted: OrderedDict[bytes, None] = OrderedDict()
        self.num_saved = 0
        self.num_evicted = 0

    def __len__(self) -> int:
        return len(self.slot_of)

    def new_step_starts(self) -> None:
        self.pinned.clear()
        self.reserved_this_step.clear()

    def drop_step_reservations(self) -> None:
        """Forget the checkpoints the current step reserved: the step failed, so the states its forward
        wrote into their slots may be half-written, and no later hit may load them. Their slots go back
        to the free list (what their reservation evicted stays evicted: a later miss, never a wrong hit)."""
        for key in self.reserved_this_step:
            slot = self.slot_of.pop(key, None)
            if slot is None:
                continue
            self.hash_of[slot] = None
            self.ordinary.pop(slot, None)
            self.kept.pop(slot, None)
            self.pinned.discard(slot)
            self.free.append(slot)
            self.num_saved -= 1
        self.reserved_this_step.clear()

    def lookup(self, key: bytes) -> int | None:
        return self.slot_of.get(key)

    def was_evicted(self, key: bytes) -> bool:
        return key in self.evicted

    def use(self, slot: int) -> None:
        """A hit reads the slot in this step: most recently used, and not evicted before the step runs."""
        for queue in (self.ordinary, self.kept):
            if slot in queue:
                queue.move_to_end(slot)
        self.pinned.add(slot)

    def keep(self, key: bytes) -> None:
        """Move a cached checkpoint to the kept class (it became a prompt end or a junction)."""
        slot = self.slot_of.get(key)
        if slot is not None and slot in self.ordinary:
            del self.ordinary[slot]
            self.kept[slot] = None

    def reserve(self, key: bytes, kept: bool) -> int | None:
        """A slot to write the checkpoint of ``key`` into during this step (evicting if needed); None if
        every slot is pinned. The caller checked that ``key`` is not cached."""
        if self.free:
            slot = self.free.pop()
        else:
            slot = self._victim()
            if slot is None:
                return None
            self._evict(slot)
        self.slot_of[key] = slot
        self.hash_of[slot] = key
        self.evicted.pop(key, None)
        (self.kept if kept else self.ordinary)[slot] = None
        self.pinned.add(slot)  # written in this step: a later save of the same step must not take it
        self.reserved_this_step.append(key)
        self.num_saved += 1
        return slot

    def _victim(self) -> int | None:
        for queue in (self.ordinary, self.kept):
            for slot in queue:
                if slot not in self.pinned:
                    return slot
        return None

    def _evict(self, slot: int) -> None:
        key = self.hash_of[slot]
        del self.slot_of[key]
        self.hash_of[slot] = None
        self.ordinary.pop(slot, None)
        self.kept.pop(slot, None)
        self.evicted[key] = None
        if len(self.evicted) > self.EVICTED_MEMORY:
            self.evicted.popitem(last=False)
        self.num_evicted += 1


class PrefixCacheStats:
    """Engine-wide prefix-cache figures of a hybrid model, counted at each request's first admission.

    requests, prompt_tokens, hit_tokens: admitted requests, their prompt tokens and the tokens
    their hits covered; reasons: how many hits stopped for each of HIT_REASONS; checkpoints_saved,
    checkpoints_evicted, checkpoints_cached: the "chunk" mode's checkpoint pool (0 in other modes).
    """

    def __init__(self, pool: GdnCheckpointPool | None = None):
        self.pool = pool
        self.requests = 0
        self.prompt_tokens = 0
        self.hit_tokens = 0
        self.reasons = dict.fromkeys(HIT_REASONS, 0)

    def record(self, num_prompt_tokens: int, hit_tokens: int, reason: str) -> None:
        self.requests += 1
        self.prompt_tokens += num_prompt_tokens
        self.hit_tokens += hit_tokens
        if reason:
            self.reasons[reason] += 1

    def as_dict(self) -> dict:
        pool = self.pool
        return {
            "requests": self.requests, "prompt_tokens": self.prompt_tokens, "hit_tokens": self.hit_tokens,
            "hit_rate": self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0,
            "reasons": dict(self.reasons),
            "checkpoints_saved": pool.num_saved if pool is not None else 0,
            "checkpoints_evicted": pool.num_evicted if pool is not None else 0,
            "checkpoints_cached": len(pool) if pool is not None else 0,
        }

    def summary(self) -> str:
        """One line: hit tokens of prompt tokens, and the stop reasons that occurred."""
        d = self.as_dict()
        reasons = ", ".join(f"{k}={v}" for k, v in d["reasons"].items() if v)
        line = (f"prefix cache: {d['hit_tokens']}/{d['prompt_tokens']} prompt tokens hit "
                f"({100 * d['hit_rate']:.1f}%) over {d['requests']} requests; hits stopped: {reasons or '-'}")
        if self.pool is not None:
            line += (f"; GDN checkpoints saved={d['checkpoints_saved']} evicted={d['checkpoints_evicted']} "
                     f"cached={d['checkpoints_cached']}/{self.pool.num_slots}")
        return line
