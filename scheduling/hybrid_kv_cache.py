"""KV cache of a hybrid (GDN + full attention) model: vLLM 0.33's one-pool layout with per-group block tables.

One block pool serves G GDN ("mamba") groups and one full-attention group, in
that order (vLLM's get_kv_cache_groups order for Qwen3.5; the order decides
which blocks are freed, and so evicted, first). Each group gives a request its
own block ids. A GDN page holds that group's conv and recurrent state.

Three modes, the first two as vLLM's MambaSpec.mamba_cache_mode:

- "none" (no prefix caching): a GDN page spans max_model_len tokens, so a
  request holds one page per GDN group, plus num_speculative_tokens pages.
- "align" (prefix caching): GDN pages have the attention block size B and GDN
  block p holds the state after exactly (p + 1) * B tokens. Older state pages
  are released as the request advances (at most 2 + speculative live pages per
  group); with prefix_cache_retention_interval 0 (the engine's default) a state
  page stays in the cache only at the prompt's replay boundary and at a
  shared-prefix junction. Attention blocks are always cached.
- "chunk" (prefix caching, past vLLM): GDN pages are held as in "none" mode
  and GDN states are cached as checkpoints every checkpoint_granularity tokens
  in a pool of their own (gdn_checkpoints.py); a hit is the longest prefix with
  its attention blocks cached and a checkpoint at its end.

Prefix-cache keys carry the group id (one byte after the block hash), so the
same prefix is cached separately in every group.

With an MTP (EAGLE-style) drafter (num_speculative_tokens > 0) and caching, as
vLLM's coordinator with use_eagle: a hit must be followed by one more matching
attention block, which is then dropped (recomputed), because the drafter's KV at
a block's last position was computed from the next block's first token; the GDN
states are kept one block lower to match (vLLM's replay_boundaries).
"""

from dataclasses import dataclass, field

from .block_pool import NULL_BLOCK, BlockPool
from .gdn_checkpoints import GdnCheckpointPool
from .kv_cache_manager import update_block_hashes
from .request import Request


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _group_key(block_hash: bytes, group: int) -> bytes:
    return block_hash + bytes((group,))


CHUNK_TOKENS = 64  # the GDN chunk kernel's chunk: checkpoints are emitted at its chunk ends


def _hit_reason(request: Request, hit_tokens: int, attention_tokens: int, usable_tokens: int, step: int,
                evicted: bool) -> str:
    """Why a hybrid prefix hit stopped at hit_tokens (see gdn_checkpoints.HIT_REASONS): the next
    boundary (hit_tokens + step) lacks attention blocks, lies past the MTP drop, lost its
    checkpoint to eviction, or never had one; "full" when no boundary is left before the last token."""
    if hit_tokens + step > request.num_tokens - 1:
        return "full"
    if attention_tokens < hit_tokens + step:
        return "no_attention_block"
    if usable_tokens < hit_tokens + step:
        return "mtp_block_drop"
    return "evicted" if evicted else "no_gdn_checkpoint"


@dataclass
class PrefixHit:
    """A prefix-cache hit of a hybrid model, as find_longest_cache_hit returns it.

    attention: the attention blocks of the hit, one per B tokens.
    gdn: per GDN group, the one state block at the hit's end (block index
        num_tokens // B - 1); empty when there is no hit.
    num_tokens: tokens covered (a multiple of B).
    """

    attention: list[int] = field(default_factory=list)
    gdn: list[int] = field(default_factory=list)
    num_tokens: int = 0
    checkpoint: int | None = None  # "chunk" mode: the checkpoint slot the hit's GDN states are read from

    def __bool__(self) -> bool:
        return self.num_tokens > 0


class _GdnGroup:
    """One GDN group's block tables (vLLM's MambaManager, without fine-grained hits or checkpoints)."""

    def __init__(self, group_id: int, pool: BlockPool, block_size: int, align: bool, num_spec_blocks: int):
        self.group_id = group_id
        self.pool = pool
        self.block_size = block_size
        self.align = align
        self.num_spec_blocks = num_spec_blocks
        self.tables: dict[str, list[int]] = {}
        self.num_cached: dict[str, int] = {}
        # Align-mode bookkeeping, per request.
        self.last_state_index: dict[str, int] = {}  # the state column of the previous step
        self.num_retired: dict[str, int] = {}  # leading columns already released
        self.allocated: set[str] = set()  # requests past their first allocation
        self.cached_this_step: set[bytes] = set()

    def table(self, request_id: str) -> list[int]:
        return self.tables.setdefault(request_id, [])

    def num_blocks_to_allocate(self, request_id: str, num_tokens: int, num_tokens_main: int, hit_block) -> int:
        """Blocks this group would take now (it may be negative in align mode, as in vLLM)."""
        held = len(self.tables.get(request_id, ()))
        if not self.align:
            return max(_cdiv(num_tokens + self.block_size * self.num_spec_blocks, self.block_size) - held, 0)
        hit_len = 0
        evictable = 0
        if hit_block is not None:
            block, hit_len = hit_block
            if self.pool.block_hash[block] in self.cached_this_step:
                # A state cached in this very step is not computed yet: the request waits a step.
                return self.pool.num_blocks + 1
            evictable = int(self.pool.ref_cnt[block] == 0)
        # Lookahead slots are for draft models, which have no GDN layers: only the main tokens count.
        num_new = _cdiv(num_tokens_main, self.block_size) + self.num_spec_blocks - hit_len - held
        if num_new > 0:
            cap = 1 if request_id in self.allocated else 1 + self.num_spec_blocks
            num_new = min(num_new, cap)
        return num_new + evictable

    def add_hit(self, request_id: str, block: int, num_hit_blocks: int) -> None:
        """Adopt the hit's state block: the columns before it stay null."""
        table = self.table(request_id)
        self.pool.touch([block])
        table.extend([NULL_BLOCK] * (num_hit_blocks - 1))
        table.append(block)
        self.num_cached[request_id] = len(table)

    def allocate(self, request_id: str, num_tokens: int, num_tokens_main: int) -> list[int]:
        table = self.table(request_id)
        if not self.align:
            num_new = _cdiv(num_tokens + self.block_size * self.num_spec_blocks, self.block_size) - len(table)
            if num_new <= 0:
                return []
            new = self.pool.allocate(num_new)
            table.extend(new)
            return new
        spec = self.num_spec_blocks
        num_required = _cdiv(num_tokens_main, self.block_size) + spec
        if num_required <= len(table):
            self.allocated.add(request_id)
            return []
        prev_len = len(table)
        was_allocated = request_id in self.allocated
        if was_allocated:
            self.last_state_index[request_id] = prev_len - 1 - spec  # the running state column
        elif prev_len > 0:
            self.last_state_index[request_id] = prev_len - 1  # a hit's state column
        num_skipped = num_required - spec - 1
        if prev_len < num_skipped:
            table.extend([NULL_BLOCK] * (num_skipped - prev_len))
        if was_allocated:
            # Speculative pages left behind by the new state column move to the end.
            for index in range(prev_len - spec, prev_len):
                if index >= num_skipped:
                    break
                table.append(table[index])
                table[index] = NULL_BLOCK
        num_new = max(num_required - len(table), 0)
        new = self.pool.allocate(num_new)
        returned = table[prev_len:] + new
        table.extend(new)
        self.allocated.add(request_id)
        return returned

    def remove_skipped(self, request_id: str, num_processed: int) -> None:
        """Release state columns no longer needed: all before the last computed token's column
        and, in align mode, the previous step's state column once the state moved on."""
        if num_processed - 1 <= 0:
            return
        table = self.table(request_id)
        last = min((num_processed - 1) // self.block_size, len(table))
        if self.align:
            first = self.num_retired.get(request_id, 0)
            if first < last:
                freed = [table[i] for i in range(last - 1, first - 1, -1) if table[i] != NULL_BLOCK]
                for i in range(first, last):
                    table[i] = NULL_BLOCK
                if freed:
                    self.pool.free(freed)
                self.num_retired[request_id] = last
            state = self.last_state_index.get(request_id)
            if state is not None and state < _cdiv(num_processed, self.block_size) - 1 and table[state] != NULL_BLOCK:
                self.pool.free([table[state]])
                table[state] = NULL_BLOCK
        elif last > 0:
            freed = []
            for i in range(last - 1, -1, -1):
                if table[i] == NULL_BLOCK:
                    break
                freed.append(table[i])
                table[i] = NULL_BLOCK
            if freed:
                self.pool.free(freed)

    def cache(self, request: Request, num_tokens: int, boundaries: list[int]) -> None:
        """Cache the state columns among the first num_tokens tokens that a later hit can reach."""
        request_id = request.request_id
        num_cached = self.num_cached.get(request_id, 0)
        num_full = min(num_tokens, len(request.block_hashes) * self.block_size) // self.block_size
        if num_cached >= num_full:
            return
        table = self.tables[request_id]
        # Retention interval 0: only the columns ending at a reachable boundary.
        keep = {b // self.block_size - 1 for b in boundaries}
        for i in range(num_cached, num_full):
            block = table[i]
            if block == NULL_BLOCK or i not in keep:
                continue
            if self.pool.block_hash[block] is None:
                key = _group_key(request.block_hashes[i], self.group_id)
                self.pool.cache_block(block, key)
                self.cached_this_step.add(key)
        self.num_cached[request_id] = num_full

    def free(self, request_id: str) -> None:
        table = self.tables.pop(request_id, [])
        self.num_cached.pop(request_id, None)
        self.last_state_index.pop(request_id, None)
        self.num_retired.pop(request_id, None)
        self.allocated.discard(request_id)
        self.pool.free([b for b in reversed(table) if b != NULL_BLOCK])


class HybridKVCacheManager:
    """Block tables of a hybrid model's groups over one pool; the scheduler's view of vLLM's coordinator.

    The attention group's table is request.block_ids (what the attention ops
    read); the GDN groups' tables are request.gdn_block_ids, one list per group.
    """

    def __init__(self, num_blocks: int, block_size: int, max_model_len: int, enable_caching: bool,
                 num_gdn_groups: int, num_speculative_tokens: int, use_eagle: bool = False,
                 mode: str | None = None, num_checkpoints: int = 0, checkpoint_granularity: int = 64):
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.num_gdn_groups = num_gdn_groups
        self.mode = mode or ("align" if enable_caching else "none")
        align = self.mode == "align"
        self.pool = BlockPool(num_blocks, enable_caching)
        gdn_block_size = block_size if align else max_model_len
        self.gdn_groups = [_GdnGroup(g, self.pool, gdn_block_size, align, num_speculative_tokens)
                           for g in range(num_gdn_groups)]
        self.attention_group = num_gdn_groups  # its group id: after the GDN groups
        # "chunk" mode: GDN states are cached in a checkpoint pool, not in GDN pages.
        self.checkpoints = GdnCheckpointPool(num_checkpoints) if self.mode == "chunk" else None
        self.checkpoint_granularity = checkpoint_granularity
        # Read for every running request every step: bound once.
        self._group_tables = [group.tables for group in self.gdn_groups]
        self._group_num_cached = [group.num_cached for group in self.gdn_groups] if align else []
        # vLLM's use_eagle: an MTP drafter keeps its own KV on the attention blocks (see the module docstring);
        # it changes only what prefix caching hits and keeps.
        self.use_eagle = enable_caching and use_eagle

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    def new_step_starts(self) -> None:
        self.pool.begin_step()
        for group in self.gdn_groups:
            group.cached_this_step.clear()
        if self.checkpoints is not None:
            self.checkpoints.new_step_starts()

    def update_block_hashes(self, request: Request) -> None:
        if self.enable_caching:
            update_block_hashes(request, self.block_size)

    def block_ids_per_group(self, request: Request) -> tuple[list[int], ...]:
        """The request's block tables in vLLM's group order: GDN groups, then attention."""
        tables = request.group_tables
        if tables is not None:
            return tables
        request_id = request.request_id
        tables = (*[tables[request_id] if request_id in tables else [] for tables in self._group_tables],
                  request.block_ids)
        if all(request_id in tables for tables in self._group_tables):
            # Every group holds its live table now: they keep their identity until free().
            request.group_tables = tables
        return tables

    # ----------------------------------------------------------------- hits

    def get_computed_blocks(self, request: Request) -> tuple[PrefixHit, int]:
        """The longest prefix with attention blocks cached and a GDN state cached at its end.

        Attention scans left to right; the GDN groups then scan right to left up
        to the attention hit and need only the one state block at the boundary.
        Sets request.shared_prefix_boundary to the attention hit when the GDN
        hit is shorter (a shared prefix whose state is not cached yet). With
        use_eagle the hit stops one matched attention block short (vLLM's drop
        of the EAGLE/MTP drafter's last block), and so does the boundary.
        """
        request.shared_prefix_boundary = 0
        if not self.enable_caching:
            return PrefixHit(), 0
        if self.checkpoints is not None:
            return self._checkpoint_hit(request)
        size, hashes, lookup = self.block_size, request.block_hashes, self.pool.lookup
        attention = []
        for block_hash in hashes[: (request.num_tokens - 1) // size]:
            block = lookup(_group_key(block_hash, self.attention_group))
            if block is None:
                break
            attention.append(block)
        gdn, num_hit_blocks = [], 0
        usable = len(attention) - 1 if self.use_eagle else len(attention)  # the block after the hit must match
        for i in range(usable - 1, -1, -1):
            blocks = []
            for group in range(self.num_gdn_groups):
                block = lookup(_group_key(hashes[i], group))
                if block is None:
                    break
                blocks.append(block)
            if len(blocks) == self.num_gdn_groups:
                gdn, num_hit_blocks = blocks, i + 1
                break
        if num_hit_blocks < usable:
            request.shared_prefix_boundary = usable * size
        hit = PrefixHit(attention[:num_hit_blocks], gdn, num_hit_blocks * size)
        request.prefix_hit_reason = _hit_reason(request, hit.num_tokens, len(attention) * size, usable * size, size,
                                                evicted=False)
        return hit, hit.num_tokens

    def _checkpoint_hit(self, request: Request) -> tuple[PrefixHit, int]:
        """"chunk" mode: the longest prefix whose attention blocks are cached and which ends at a GDN
        checkpoint (a multiple of checkpoint_granularity); with use_eagle one matched attention block
        short. The attention hit floored to the granularity, when longer, is the request's junction
        (its checkpoint there is kept when saved)."""
        size, gran, hashes = self.block_size, self.checkpoint_granularity, request.block_hashes
        lookup, key = self.pool.lookup, self.attention_group
        attention = []
        for block_hash in hashes[: (request.num_tokens - 1) // size]:
            block = lookup(_group_key(block_hash, key))
            if block is None:
                break
            attention.append(block)
        usable = max(len(attention) - 1, 0) if self.use_eagle else len(attention)
        hit_tokens, slot = 0, None
        for boundary in range(usable * size // gran * gran, 0, -gran):
            slot = self.checkpoints.lookup(hashes[boundary // size - 1])
            if slot is not None:
                hit_tokens = boundary
                break
        junction = usable * size // gran * gran
        if junction > hit_tokens:
            request.shared_prefix_boundary = junction
        next_boundary = hit_tokens + gran
        evicted = (next_boundary // size <= len(hashes)
                   and self.checkpoints.was_evicted(hashes[next_boundary // size - 1]))
        request.prefix_hit_reason = _hit_reason(request, hit_tokens, len(attention) * size, usable * size, gran,
                                                evicted)
        hit = PrefixHit(attention[: hit_tokens // size], [], hit_tokens, slot)
        return hit, hit_tokens

    def plan_checkpoints(self, request: Request, start: int, num_new: int) -> list[tuple[int, int]]:
        """"chunk" mode: the checkpoints a step of ``num_new`` tokens from ``start`` saves, as (tokens
        from the step's start, slot). A boundary b is saved when it is a multiple of the granularity,
        its attention blocks are hashed (known tokens), its state is at hand in the step (a chunk end of
        the kernel, b - start a multiple of gdn_checkpoint_tokens, or the step's end, the state the step
        leaves in the request's row: so a chunk that started off the grid, or is shorter than a kernel
        chunk, still saves the boundary it ends on), and it is not cached yet. The prompt's last
        reachable boundary and the request's junction are kept (see gdn_checkpoints.py)."""
        size, gran, pool = self.block_size, self.checkpoint_granularity, self.checkpoints
        end = min(start + num_new, len(request.block_hashes) * size)
        first = (start // gran + 1) * gran
        if first > end:
            return []
        last_prompt = (request.num_prompt_tokens - 1) // size * size - (size if self.use_eagle else 0)
        kept = {max(last_prompt, 0) // gran * gran, request.shared_prefix_boundary}
        saves = []
        for boundary in range(first, end + 1, gran):
            if (boundary - start) % CHUNK_TOKENS and boundary != start + num_new:
                continue  # neither a chunk end of the kernel in this step (an unaligned start) nor its end
            key = request.block_hashes[boundary // size - 1]
            if pool.lookup(key) is not None:
                if boundary in kept:
                    pool.keep(key)
                continue
            slot = pool.reserve(key, kept=boundary in kept)
            if slot is not None:
                saves.append((boundary - start, slot))
        return saves

    # ----------------------------------------------------------- allocation

    def _num_blocks_to_allocate(self, request: Request, num_tokens: int, num_tokens_main: int,
                                hit: PrefixHit) -> int:
        request_id = request.request_id
        num_hit_blocks = len(hit.attention)
        total = 0
        for g, group in enumerate(self.gdn_groups):
            hit_block = (hit.gdn[g], num_hit_blocks) if hit.gdn else None
            total += group.num_blocks_to_allocate(request_id, num_tokens, num_tokens_main, hit_block)
        held = len(request.block_ids) + num_hit_blocks
        total += max(_cdiv(num_tokens, self.block_size) - held, 0)
        return total + sum(1 for block in hit.attention if self.pool.ref_cnt[block] == 0)

    def allocate_slots(self, request: Request, num_new_tokens: int, hit: PrefixHit | None = None,
                       num_lookahead_tokens: int = 0, whole_prompt_must_fit: bool = False) -> list[int] | None:
        """Give the request pages for num_new_tokens more tokens in every group; None if they do not fit.

        Returns the attention group's new blocks (the GDN groups' tables are
        read from block_ids_per_group()).
        """
        if not hit and not whole_prompt_must_fit:
            # Fast path, taken by almost every decode step: no group needs a block or releases one.
            end = request.num_computed_tokens + num_new_tokens
            if end + num_lookahead_tokens <= len(request.block_ids) * self.block_size and \
                    self._gdn_groups_need_nothing(request, end):
                if self.enable_caching and not self._nothing_to_cache(request, min(end, len(request.all_token_ids))):
                    self.cache_blocks(request, min(end, len(request.all_token_ids)))
                    self._set_no_alloc_window(request, num_lookahead_tokens)
                return []
        hit = hit or PrefixHit()
        num_computed = min(request.num_computed_tokens + hit.num_tokens, self.max_model_len)
        free = self.pool.num_free_blocks
        if whole_prompt_must_fit:
            whole = min(request.num_tokens, self.max_model_len)
            if self._num_blocks_to_allocate(request, whole, whole, hit) > free:
                return None
        num_tokens_main = num_computed + num_new_tokens
        num_slots = min(num_tokens_main + num_lookahead_tokens, self.max_model_len)
        # Released before the check (as vLLM does), whether or not the request fits.
        for group in self.gdn_groups:
            group.remove_skipped(request.request_id, num_computed)
        if self._num_blocks_to_allocate(request, num_slots, num_tokens_main, hit) > self.pool.num_free_blocks:
            return None
        request_id = request.request_id
        if hit:
            if hit.checkpoint is not None:
                self.checkpoints.use(hit.checkpoint)  # read at the step's start: not evicted before
            for group, block in zip(self.gdn_groups, hit.gdn):
                group.add_hit(request_id, block, len(hit.attention))
            self.pool.touch(hit.attention)
            request.block_ids.extend(hit.attention)
            request.num_cached_blocks = len(request.block_ids)
        for group in self.gdn_groups:
            group.allocate(request_id, num_slots, num_tokens_main)
        num_new_blocks = _cdiv(num_slots, self.block_size) - len(request.block_ids)
        new_blocks = self.pool.allocate(num_new_blocks) if num_new_blocks > 0 else []
        request.block_ids.extend(new_blocks)
        # Draft tokens may be rejected: only known tokens are cached.
        self.cache_blocks(request, min(num_computed + num_new_tokens, request.num_tokens))
        self._set_no_alloc_window(request, num_lookahead_tokens)
        return new_blocks

    def _set_no_alloc_window(self, request: Request, num_lookahead_tokens: int) -> None:
        """Bound the steps whose allocate_slots(request, n, None, num_lookahead_tokens) would take the
        fast path and register nothing (see Request.no_alloc_end): the conditions of
        _gdn_groups_need_nothing and _nothing_to_cache solved for the step's end and, in align
        mode, its start. Each bound only grows with the state it reads (tables, retired and
        cached columns, attention blocks) until free() resets it, so a stale bound is low (safe)."""
        size, request_id = self.block_size, request.request_id
        end = len(request.block_ids) * size - num_lookahead_tokens
        start = end  # no bound of its own: a step's start is below its end
        if self.gdn_groups:
            group = self.gdn_groups[0]  # all GDN groups evolve alike (see _gdn_groups_need_nothing)
            table = group.tables.get(request_id)
            spec = group.num_spec_blocks
            if table is None or (not group.align and len(table) < 1 + spec) or (
                    group.align and request_id not in group.allocated):
                request.no_alloc_end = request.no_alloc_start = -1
                return
            if group.align:
                gdn_size = group.block_size
                end = min(end, (len(table) - spec) * gdn_size)  # no new state column
                retired = group.num_retired.get(request_id, 0)
                if retired < len(table):  # no column to retire before the step's start
                    start = min(start, (retired + 1) * gdn_size)
                state = group.last_state_index.get(request_id)
                if state is not None and table[state] != NULL_BLOCK:  # the previous state still needed
                    start = min(start, (state + 1) * gdn_size)
                start = max(start, 1)  # a cursor of 0 or 1 releases nothing
        if self.enable_caching:
            num_full = request.num_cached_blocks
            for num_cached in self._group_num_cached:
                num_full = min(num_full, num_cached.get(request_id, 0))
            end = min(end, (num_full + 1) * size - 1)  # no block past the registered ones completes
        request.no_alloc_end, request.no_alloc_start = end, start

    def _gdn_groups_need_nothing(self, request: Request, num_tokens_main: int) -> bool:
        """Whether a running request's step leaves every GDN table as it is (no page taken or
        released). All GDN groups evolve alike (only their block ids differ): group 0 decides."""
        if not self.gdn_groups:
            return True
        group, request_id = self.gdn_groups[0], request.request_id
        table = group.tables.get(request_id)
        if table is None:
            return False
        size, spec = group.block_size, group.num_spec_blocks
        if not group.align:
            return len(table) >= 1 + spec  # its one page per group (plus the speculative ones) is held
        if request_id not in group.allocated:
            return False
        if _cdiv(num_tokens_main, size) + spec > len(table):
            return False
        processed = request.num_computed_tokens
        if processed - 1 <= 0:
            return True
        if group.num_retired.get(request_id, 0) < min((processed - 1) // size, len(table)):
            return False
        state = group.last_state_index.get(request_id)
        return state is None or state >= _cdiv(processed, size) - 1 or table[state] == NULL_BLOCK

    def _nothing_to_cache(self, request: Request, num_tokens: int) -> bool:
        """Whether cache_blocks(request, num_tokens) would return without registering anything (the
        usual decode step, no block completed): the same test as its groups' early returns, in one place."""
        num_full = min(num_tokens // self.block_size, len(request.block_hashes))
        if num_full > request.num_cached_blocks:
            return False
        request_id = request.request_id
        for num_cached in self._group_num_cached:
            if num_cached.get(request_id, 0) < num_full:
                return False
        return True

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        """Register the full blocks of every group among the first num_tokens tokens (block-aligned)."""
        if not self.enable_caching:
            return
        num_tokens -= num_tokens % self.block_size
        if self.use_eagle:
            # vLLM's replay_boundaries with use_eagle: a resend and a longer sibling hit one block lower.
            size, n = self.block_size, request.num_prompt_tokens
            boundaries = sorted({max((n - 1) // size * size - size, 0), max(n // size * size - size, 0)})
        else:
            boundaries = [request.num_prompt_tokens - 1]
        if request.shared_prefix_boundary:
            boundaries.append(request.shared_prefix_boundary)
        for group in self.gdn_groups:
            if group.align:  # "chunk" mode caches checkpoints instead (plan_checkpoints)
                group.cache(request, num_tokens, boundaries)
        num_full = min(num_tokens // self.block_size, len(request.block_hashes))
        if num_full <= request.num_cached_blocks:
            return
        for i in range(request.num_cached_blocks, num_full):
            self.pool.cache_block(request.block_ids[i], _group_key(request.block_hashes[i], self.attention_group))
        request.num_cached_blocks = num_full

    def free(self, request: Request) -> None:
        """Return every group's blocks, group by group in vLLM's order, each tail first."""
        for group in self.gdn_groups:
            group.free(request.request_id)
        self.pool.free(reversed(request.block_ids))
        request.block_ids = []
        request.num_cached_blocks = 0
        request.no_alloc_end = request.no_alloc_start = -1
        request.group_tables = None
