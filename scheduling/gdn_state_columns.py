"""Where a hybrid model's GDN states live each step: the state page per group, and the copies before the step.

The model runner's half of vLLM 0.33's align mode (its ``preprocess_mamba``): a
request's running GDN state sits in the column of its last scheduled token,
cdiv(num_computed + num_scheduled, B) - 1, of each GDN group's block table. When
that column changes, the state is copied from the previous step's column (or,
for a request just admitted with a prefix hit, from the hit's cached state block)
into the new one before the step runs; the step then updates it in place. So a
chunk ending on a block boundary leaves in GDN block p exactly the state after
(p + 1) * B tokens, which is what the scheduler caches. Without prefix caching
("none" mode) the state stays in each group's one page and nothing is copied.
"""

from dataclasses import dataclass

from .scheduler import SchedulerOutput


@dataclass
class GdnStateStep:
    """One step's GDN state addressing.

    state_blocks: per scheduled request (batch order), per GDN group, the block
        that holds its state during and after the step.
    copies: (group, source block, destination block) to copy, conv and recurrent
        state alike, before the step, in order.
    """

    state_blocks: dict[str, tuple[int, ...]]
    copies: list[tuple[int, int, int]]


class GdnStateColumns:
    """Follows each request's GDN state column from step to step (one per model runner).

    num_gdn_groups: the scheduler's num_gdn_groups; block_size: its block_size.
    align: whether the scheduler runs align mode (prefix caching on).
    """

    def __init__(self, num_gdn_groups: int, block_size: int, align: bool):
        if num_gdn_groups < 1:
            raise ValueError(f"GdnStateColumns: num_gdn_groups must be >= 1, got {num_gdn_groups}")
        self.num_gdn_groups = num_gdn_groups
        self.block_size = block_size
        self.align = align
        self._column: dict[str, int] = {}

    def forget(self, request_id: str) -> None:
        """Drop a request's column (it finished or was rolled back, or ran outside the scheduler, as the warm-up)."""
        self._column.pop(request_id, None)

    def plan(self, out: SchedulerOutput) -> GdnStateStep:
        """The state blocks of every request of the step and the copies to make first."""
        if out.num_speculative_tokens:
            # Rejected drafts leave the state past the accepted tokens; vLLM corrects that with an
            # accepted-token offset into the conv state, which is not modelled here.
            raise ValueError("GdnStateColumns: speculative decoding (num_speculative_tokens > 0) is not supported")
        if not out.group_block_ids and out.num_scheduled_tokens:
            raise ValueError("GdnStateColumns: the scheduler output has no group_block_ids (not a hybrid model)")
        # Finished, preempted and resumed requests start over (vLLM's cleanup_mamba_state_idx).
        for request_id in (*out.finished_req_ids, *out.preempted_req_ids, *out.resumed_req_ids):
            self._column.pop(request_id, None)
        size, groups = self.block_size, self.num_gdn_groups
        state_blocks, copies = {}, []
        for request_id, num_scheduled in out.num_scheduled_tokens.items():
            tables = out.group_block_ids[request_id][:groups]
            if not self.align:
                state_blocks[request_id] = tuple(table[0] for table in tables)
                continue
            computed = out.num_computed_tokens[request_id]
            previous = self._column.get(request_id, (computed - 1) // size)  # -1: no state yet
            current = -(-(computed + num_scheduled) // size) - 1
            self._column[request_id] = current
            state_blocks[request_id] = tuple(table[current] for table in tables)
            if previous != -1 and previous != current:
                copies.extend((g, table[previous], table[current]) for g, table in enumerate(tables))
        return GdnStateStep(state_blocks, copies)
