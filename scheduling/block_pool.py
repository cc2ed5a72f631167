"""The pool of physical KV blocks: reference counts, the free queue and the prefix-cache index."""

from collections import OrderedDict

NULL_BLOCK = 0  # reserved: pads block tables, never owned by a request


class BlockPool:
    """Hands out KV block ids and takes them back.

    The free queue is ordered: blocks are taken from its front. Freed blocks that
    carry a prefix-cache hash go to the back (least recently used is evicted
    first); blocks without one go to the front, to be reused at once. A free
    block with a hash is still a cache entry until it is taken again.
    """

    def __init__(self, num_blocks: int, enable_caching: bool):
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.ref_cnt = [0] * num_blocks
        self.block_hash: list[bytes | None] = [None] * num_blocks
        # OrderedDict as a queue with O(1) removal from the middle (a cache hit
        # on a free block takes it out of the queue).
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))
        # hash -> blocks holding that content, oldest first. Two requests that
        # compute the same prefix at once each get their own block.
        self.cached: dict[bytes, dict[int, None]] = {}
        # Blocks registered since begin_step(): their contents are written by that step, so a failed step's
        # registrations are taken back (drop_step_registrations) before anyone can hit them.
        self.registered_in_step: list[int] = []

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    def allocate(self, num: int) -> list[int]:
        """Take `num` blocks from the front of the free queue, evicting their cache entries."""
        if num > len(self.free_queue):
            raise ValueError(f"cannot allocate {num} blocks, only {len(self.free_queue)} are free")
        popitem = self.free_queue.popitem
        blocks = [popitem(last=False)[0] for _ in range(num)]
        for block in blocks:
            if self.block_hash[block] is not None:
                self._uncache(block)
            self.ref_cnt[block] = 1
        return blocks

    def touch(self, blocks: list[int]) -> None:
        """Add a reference to cache-hit blocks, taking free ones out of the free queue."""
        for block in blocks:
            if self.ref_cnt[block] == 0:
                del self.free_queue[block]
            self.ref_cnt[block] += 1

    def free(self, blocks_in_eviction_order) -> None:
        """Drop one reference to each block; blocks reaching zero become free."""
        evict_first, evict_last = [], []
        for block in blocks_in_eviction_order:
            self.ref_cnt[block] -= 1
            if self.ref_cnt[block] == 0:
                if self.enable_caching and self.block_hash[block] is not None:
                    evict_last.append(block)
                else:
                    evict_first.append(block)
        queue = self.free_queue
        for block in reversed(evict_first):  # keep their order at the front
            queue[block] = None
            queue.move_to_end(block, last=False)
        for block in evict_last:
            queue[block] = None

    def cache_block(self, block: int, block_hash: bytes) -> None:
        """Register a full block under the hash of its content (and prefix)."""
        if self.block_hash[block] is not None:
            return
        self.block_hash[block] = block_hash
        self.cached.setdefault(block_hash, {})[block] = None
        self.registered_in_step.append(block)

    def begin_step(self) -> None:
        """A step starts: registrations from now on are its own."""
        self.registered_in_step.clear()

    def drop_step_registrations(self) -> None:
        """Unregister every block registered since begin_step() (a failed step: their contents may be
        half-written). A block registered and then evicted in the step has no hash left, or one the step
        registered again; either way it is dropped. The blocks stay with their owners; freed, they go to
        the front of the free queue, as blocks without a hash do."""
        for block in self.registered_in_step:
            if self.block_hash[block] is not None:
                self._uncache(block)
        self.registered_in_step.clear()

    def reclaim_all(self) -> None:
        """Make every block free again; only when no request holds one. Blocks that are not free then
        (taken from the free queue by a step that raised before giving them to a request) are given back,
        uncached; cached free blocks keep their entries."""
        queue = self.free_queue
        for block in range(1, self.num_blocks):
            if self.ref_cnt[block] != 0 or block not in queue:
                if self.block_hash[block] is not None:
                    self._uncache(block)
                self.ref_cnt[block] = 0
                queue[block] = None
                queue.move_to_end(block, last=False)

    def lookup(self, block_hash: bytes) -> int | None:
        """Return the oldest block cached under `block_hash`, or None."""
        holders = self.cached.get(block_hash)
        return next(iter(holders)) if holders else None

    def _uncache(self, block: int) -> None:
        block_hash = self.block_hash[block]
        holders = self.cached[block_hash]
        del holders[block]
        if not holders:
            del self.cached[block_hash]
        self.block_hash[block] = None
