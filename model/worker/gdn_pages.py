"""Where each GDN layer reads and writes its states in a step: the pool pages of its group (vLLM's one-pool layout).

The scheduler gives every request a block table per GDN group
(``SchedulerOutput.group_block_ids``). A GDN layer's state row is the block id
of its group's page (``kv_cache.allocate_caches(gdn_in_pages=True)``), so the
ops keep their contract (a pool and per-request state indices) while the
scheduler's pages are the states' memory.

* "none" mode (no prefix caching): a group's table holds one page per request
  (1 + k with k speculative tokens): the state row is ``table[0]``; a
  speculative verify row writes its token t's state to ``table[t]``
  (``gdn_spec_state_indices``).
* "align" mode (prefix caching): the state sits in the column of the request's
  last scheduled token; when that column changes the state is copied from the
  previous column, or from the prefix hit's cached state page, before the step
  (vLLM's ``preprocess_mamba``; ``scheduling.GdnStateColumns`` plans it). A
  chunk ending on a block boundary so leaves in page p the state after
  (p + 1) * B tokens, which the scheduler caches for later hits.
* align mode with MTP speculation (k > 0), as vLLM's ``preprocess_mamba`` /
  ``postprocess_mamba`` with ``num_speculative_blocks``: a request's state
  window is the 1 + k pages from its state column ``cdiv(num_computed +
  num_scheduled, B) - 1`` on (a verify row writes its token t's state to page
  t of the window and starts from page ``num_accepted - 1``). When the column
  moves, the state after the accepted tokens (page ``num_accepted - 1`` of the
  previous window) is copied to the new column first and the row starts from
  it (``num_accepted`` reset to 1). vLLM's ``postprocess_mamba`` also copies,
  after a verify step, the state at a block boundary the accepted tokens
  crossed into that block's page, for its cache; the scheduler here caches GDN
  pages only at the prompt's replay boundaries and shared-prefix junctions
  (retention interval 0), which prefill chunks reach, never a verify step, so
  that copy would never be read and is not made.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...ops import _validate as check
from ...scheduling import SchedulerOutput, StepMetadata
from ...scheduling.gdn_state_columns import GdnStateColumns
from .kv_cache import ModelCaches


@dataclass
class GdnStepRows:
    """One step's GDN state addressing, checked against the pool.

    state_rows: [G, N] int32, each group's state page of every request, in the step's row order.
    spec_rows: [G, num_decodes, 1 + k] int32 for speculative verify rows (None without speculation).
    copies: (group, source page, destination page) to copy before the step (align mode).
    """

    state_rows: torch.Tensor
    spec_rows: torch.Tensor | None
    copies: list[tuple[int, int, int]]


class GdnPageTables:
    """One per model runner: each step's per-group state rows, and the copies align mode makes first.

    num_gdn_groups: the scheduler's; block_size: its block size; align: prefix caching on;
    num_speculative_tokens: k (MTP speculation).
    """

    def __init__(self, num_gdn_groups: int, block_size: int, align: bool, num_speculative_tokens: int = 0):
        self.num_gdn_groups = num_gdn_groups
        self.block_size = block_size
        self.rows = 1 + num_speculative_tokens
        self.columns = GdnStateColumns(num_gdn_groups, block_size, align) if align and not num_speculative_tokens \
            else None
        # Align mode with speculation: request -> (state column, its window of 1 + k pages per group).
        self.windows: dict[str, tuple[int, list[list[int]]]] | None = \
            {} if align and num_speculative_tokens else None

    def forget(self, request_id: str) -> None:
        """Drop a request's state column: it finished, was rolled back by a failed step, or ran outside the
        scheduler (the warm-up)."""
        if self.columns is not None:
            self.columns.forget(request_id)
        if self.windows is not None:
            self.windows.pop(request_id, None)

    def lay_out(self, out: SchedulerOutput, meta: StepMetadata, caches: ModelCaches,
                num_accepted: dict[str, int] | None = None) -> GdnStepRows:
        """The step's state rows per group in ``meta``'s row order and its copies, checked against the pool
        (nothing is written: ``copy_states`` makes the copies). Points ``meta.state_indices`` and
        ``meta.spec_state_indices`` at group 0's rows, so that ``StepMetadata.validate`` checks them as the
        ops would. num_accepted: the speculative decoder's accepted counts (align mode with speculation
        resets a moved row's to 1, here and in ``meta``)."""
        groups, req_ids = self.num_gdn_groups, meta.req_ids
        tables = out.group_block_ids
        copies = []
        if self.windows is not None:
            rows, copies = self._spec_windows(out, meta, num_accepted)
        elif self.columns is not None:
            step = self.columns.plan(out)
            rows = [[step.state_blocks[r][g] for r in req_ids] for g in range(groups)]
            copies = step.copies
        else:
            rows = [[tables[r][g][0] for r in req_ids] for g in range(groups)]
        state_rows = torch.tensor(rows, dtype=torch.int32).view(groups, len(req_ids))
        meta.state_indices = state_rows[0]
        for g in range(1, groups):
            check.indices("GdnPageTables", f"group {g} state rows", state_rows[g], caches.num_blocks,
                          allow_padding=False)
        spec_rows = None
        if meta.spec_state_indices is not None:  # set by the speculative decoder: verify rows of 1 + k tokens
            nd, width = meta.num_decodes, self.rows
            if self.windows is not None:
                spec = [[self.windows[r][1][g] for r in req_ids[:nd]] for g in range(groups)]
            else:
                spec = [[tables[r][g][:width] for r in req_ids[:nd]] for g in range(groups)]
            spec_rows = torch.tensor(spec, dtype=torch.int32).view(groups, nd, width)
            meta.spec_state_indices = spec_rows[0]
            for g in range(1, groups):
                check.indices("GdnPageTables", f"group {g} speculative state rows", spec_rows[g].reshape(-1),
                              caches.num_blocks, allow_padding=False)
        if copies:
            pages = torch.tensor([c[1:] for c in copies], dtype=torch.int64)
            check.indices("GdnPageTables", "copy destinations", pages[:, 1], caches.num_blocks, allow_padding=False)
            if int(pages[:, 0].min()) < 1 or int(pages[:, 0].max()) >= caches.num_blocks:
                raise ValueError(f"GdnPageTables: copy sources must be pages in [1, {caches.num_blocks}), got "
                                 f"{pages[:, 0].tolist()}")
        return GdnStepRows(state_rows, spec_rows, copies)

    def _spec_windows(self, out: SchedulerOutput, meta: StepMetadata, num_accepted: dict[str, int]):
        """Align mode with speculation: each request's state column and window, and the copies of states
        whose column moved (from the page of the last accepted token, vLLM's accepted-token bias)."""
        size, groups, width = self.block_size, self.num_gdn_groups, self.rows
        for request_id in (*out.finished_req_ids, *out.preempted_req_ids, *out.resumed_req_ids):
            self.windows.pop(request_id, None)  # they start over (vLLM's cleanup_mamba_state_idx)
        rows, copies = [[] for _ in range(groups)], []
        for i, request_id in enumerate(meta.req_ids):
            tables = out.group_block_ids[request_id][:groups]
            computed = out.num_computed_tokens[request_id]
            current = -(-(computed + out.num_scheduled_tokens[request_id]) // size) - 1
            window = [table[current:current + width] for table in tables]
            previous = self.windows.get(request_id)
            if previous is None:  # new or resumed: the state (a prefix hit's, or none) ends at the cursor
                column = (computed - 1) // size
                if column != -1 and column != current:
                    copies.extend((g, table[column], table[current]) for g, table in enumerate(tables))
            elif previous[0] != current:
                bias = num_accepted.get(request_id, 1) - 1
                copies.extend((g, previous[1][g][bias], window[g][0]) for g in range(groups))
                num_accepted[request_id] = 1
                if i < meta.num_decodes and meta.num_accepted_tokens is not None:
                    meta.num_accepted_tokens[i] = 1
            self.windows[request_id] = (current, window)
            for g in range(groups):
                rows[g].append(window[g][0])
        return rows, copies


def copy_states(caches: ModelCaches, copies: list[tuple[int, int, int]]) -> None:
    """Copy conv and recurrent states from page ``source`` to page ``destination`` in every GDN pool
    (``copies``: (group, source, destination); the pools are shared across groups, and a page belongs to
    one group, so copying in every pool is the same as copying in the group's layers)."""
    device = next(iter(caches.ssm_states.values())).device
    sources = torch.tensor([c[1] for c in copies], dtype=torch.long, device=device)
    destinations = torch.tensor([c[2] for c in copies], dtype=torch.long, device=device)
    seen = set()
    for pools in (caches.conv_states, caches.ssm_states):
        for pool in pools.values():
            if id(pool) in seen:
                continue
            seen.add(id(pool))
            pool.index_copy_(0, destinations, pool.index_select(0, sources))
