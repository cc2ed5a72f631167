"""Per-request KV block tables on top of the block pool, with prefix caching."""

import hashlib
from array import array

from .block_pool import BlockPool
from .request import Request

_ROOT_HASH = hashlib.sha256(b"qwen_ops prefix cache root").digest()


def hash_block(parent_hash: bytes, token_ids) -> bytes:
    """Chained hash of one full block: it identifies the block's tokens and everything before them.

    SHA-256 rather than Python's hash(): a collision would hand one request
    another's KV, and 64-bit hashes of integers are easy to collide on purpose.
    """
    return hashlib.sha256(parent_hash + array("q", token_ids).tobytes()).digest()


def update_block_hashes(request: Request, block_size: int) -> None:
    """Append the chained hash of every newly completed full block of the request's tokens."""
    hashes, tokens = request.block_hashes, request.all_token_ids
    start = len(hashes) * block_size
    while start + block_size <= len(tokens):
        parent = hashes[-1] if hashes else _ROOT_HASH
        hashes.append(hash_block(parent, tokens[start : start + block_size]))
        start += block_size


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    """Gives each request the blocks its tokens need, reusing cached prefixes when enabled."""

    def __init__(self, num_blocks: int, block_size: int, max_model_len: int, enable_caching: bool):
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.pool = BlockPool(num_blocks, enable_caching)

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    def new_step_starts(self) -> None:
        self.pool.begin_step()

    def update_block_hashes(self, request: Request) -> None:
        """Hash every newly completed full block of the request's tokens."""
        if self.enable_caching:
            update_block_hashes(request, self.block_size)

    def get_computed_blocks(self, request: Request) -> tuple[list[int], int]:
        """Longest run of cached full blocks at the start of the request, and its token count.

        The hit stops short of the last token: that token must be computed to get
        the logits of the next one.
        """
        if not self.enable_caching:
            return [], 0
        max_blocks = (request.num_tokens - 1) // self.block_size
        hits = []
        for block_hash in request.block_hashes[:max_blocks]:
            block = self.pool.lookup(block_hash)
            if block is None:
                break  # hashes are chained: no later block can hit either
            hits.append(block)
        return hits, len(hits) * self.block_size

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        cached_blocks: list[int] = (),
        num_lookahead_tokens: int = 0,
        whole_prompt_must_fit: bool = False,
    ) -> list[int] | None:
        """Give the request slots for `num_new_tokens` more tokens plus lookahead; None if they do not fit.

        cached_blocks: prefix-cache hits adopted by a newly admitted request.
        whole_prompt_must_fit: refuse unless all the request's tokens would fit,
            not only this step's (the admission gate for a new request).
        """
        block_size = self.block_size
        if not cached_blocks and not whole_prompt_must_fit:
            # Fast path, taken by almost every decode step (it runs once per running
            # request per step): the blocks held already have room for the new slots.
            end = request.num_computed_tokens + num_new_tokens
            if end + num_lookahead_tokens <= len(request.block_ids) * block_size:
                if self.enable_caching and end // block_size > request.num_cached_blocks:
                    # A block may have just completed (cache_blocks checks): register it.
                    self.cache_blocks(request, min(end, len(request.all_token_ids)))
                    self._set_no_alloc_window(request, num_lookahead_tokens)
                return []
        num_computed = min(request.num_computed_tokens + len(cached_blocks) * block_size, self.max_model_len)
        free = self.pool.num_free_blocks
        if whole_prompt_must_fit:
            whole = min(request.num_tokens, self.max_model_len)
            if self._num_blocks_to_allocate(request, whole, cached_blocks) > free:
                return None
        num_slots = min(num_computed + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        if self._num_blocks_to_allocate(request, num_slots, cached_blocks) > free:
            return None

        if cached_blocks:
            self.pool.touch(cached_blocks)
            request.block_ids.extend(cached_blocks)
            request.num_cached_blocks = len(request.block_ids)
        num_new_blocks = _cdiv(num_slots, self.block_size) - len(request.block_ids)
        new_blocks = self.pool.allocate(num_new_blocks) if num_new_blocks > 0 else []
        request.block_ids.extend(new_blocks)
        if self.enable_caching:
            # Register blocks as soon as they are scheduled, so that a request with
            # the same prefix admitted later in this very step already hits them.
            # Draft tokens may be rejected: only known tokens are cached.
            self.cache_blocks(request, min(num_computed + num_new_tokens, request.num_tokens))
        self._set_no_alloc_window(request, num_lookahead_tokens)
        return new_blocks

    def _set_no_alloc_window(self, request: Request, num_lookahead_tokens: int) -> None:
        """Bound the steps whose allocate_slots(request, n, (), num_lookahead_tokens) would take the fast
        path and register nothing (see Request.no_alloc_end; the scheduler's lookahead never changes):
        room in the blocks held, lookahead included, and (caching)
        no block past the registered ones completed. The bounds only grow with the state they
        read until free() resets them, so a stale bound is low (safe), never high."""
        size = self.block_size
        end = len(request.block_ids) * size - num_lookahead_tokens
        if self.enable_caching:
            end = min(end, (request.num_cached_blocks + 1) * size - 1)
        request.no_alloc_end = end
        request.no_alloc_start = end

    def _num_blocks_to_allocate(self, request: Request, num_tokens: int, cached_blocks) -> int:
        held = len(request.block_ids) + len(cached_blocks)
        num_new = max(_cdiv(num_tokens, self.block_size) - held, 0)
        if not cached_blocks:
            return num_new
        # Cache hits that sit in the free queue leave it when adopted, so they
        # count against the free blocks like new ones.
        return num_new + sum(1 for block in cached_blocks if self.pool.ref_cnt[block] == 0)

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        """Register the request's full blocks among its first `num_tokens` tokens in the prefix cache."""
        num_full = min(num_tokens // self.block_size, len(request.block_hashes))
        if num_full <= request.num_cached_blocks:
            return  # the usual decode step: no block completed
        for i in range(request.num_cached_blocks, num_full):
            self.pool.cache_block(request.block_ids[i], request.block_hashes[i])
        request.num_cached_blocks = max(request.num_cached_blocks, num_full)

    def free(self, request: Request) -> None:
        """Return all the request's blocks, tail first so that the tail is evicted first."""
        self.pool.free(reversed(request.block_ids))
        request.block_ids = []  # a new list: block tables handed out earlier stay intact
        request.num_cached_blocks = 0
        request.no_alloc_end = request.no_alloc_start = -1
