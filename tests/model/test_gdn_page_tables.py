"""``GdnPageTables.lay_out`` on hand-built steps: which page each request's GDN state is read from and
written to, and which copies are planned first, in every mode (none, align, align with speculation).

The engine tests see these plans only through the generated tokens, and several wrong plans give the same
tokens (a copy into a page nobody reads, a copy of a state onto itself); here the plan itself is checked.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from qwen_ops.model.worker.gdn_pages import GdnPageTables

BLOCK = 4
CACHES = SimpleNamespace(num_blocks=64)


def _out(scheduled: dict[str, int], computed: dict[str, int], tables: dict[str, list[list[int]]], *,
         finished=(), preempted=(), resumed=(), k: int = 0):
    """The fields of a SchedulerOutput that lay_out reads."""
    return SimpleNamespace(num_scheduled_tokens=scheduled, num_computed_tokens=computed,
                           group_block_ids={r: tuple(t) for r, t in tables.items()},
                           finished_req_ids=set(finished), preempted_req_ids=set(preempted),
                           resumed_req_ids=list(resumed), num_speculative_tokens=k)


def _meta(req_ids: list[str], num_decodes: int = 0, k: int = 0, accepted: list[int] | None = None):
    """The fields of a StepMetadata that lay_out reads and sets; verify rows marked as the speculative
    decoder marks them (a spec_state_indices tensor of [num_decodes, 1 + k])."""
    spec = torch.zeros(num_decodes, 1 + k, dtype=torch.int32) if k else None
    acc = torch.tensor(accepted, dtype=torch.int32) if accepted is not None else None
    return SimpleNamespace(req_ids=req_ids, num_decodes=num_decodes, spec_state_indices=spec,
                           num_accepted_tokens=acc, state_indices=None)


def test_none_mode_reads_and_writes_the_first_page_of_every_group():
    pages = GdnPageTables(num_gdn_groups=2, block_size=BLOCK, align=False)
    tables = {"a": [[5], [9]], "b": [[6], [10]]}
    rows = pages.lay_out(_out({"a": 3, "b": 1}, {"a": 0, "b": 7}, tables), _meta(["b", "a"], 1), CACHES)
    assert rows.state_rows.tolist() == [[6, 5], [10, 9]]  # in the step's row order, per group
    assert rows.copies == [] and rows.spec_rows is None


def test_none_mode_verify_rows_write_token_t_to_page_t():
    pages = GdnPageTables(num_gdn_groups=1, block_size=BLOCK, align=False, num_speculative_tokens=2)
    tables = {"a": [[5, 7, 8]]}
    rows = pages.lay_out(_out({"a": 3}, {"a": 9}, tables, k=2), _meta(["a"], 1, k=2, accepted=[2]), CACHES)
    assert rows.state_rows.tolist() == [[5]]
    assert rows.spec_rows.tolist() == [[[5, 7, 8]]]


class TestAlignWithSpeculation:
    """Align mode with k = 2: the window of 1 + k pages from the state column ceil((computed + scheduled) /
    B) - 1; a moved column copies the state after the accepted tokens into the new column first."""

    TABLE = [[11, 12, 13, 14, 15, 16, 17]]

    def _pages(self):
        return GdnPageTables(num_gdn_groups=1, block_size=BLOCK, align=True, num_speculative_tokens=2)

    def test_a_fresh_request_without_a_hit_copies_nothing(self):
        pages = self._pages()
        rows = pages.lay_out(_out({"a": 6}, {"a": 0}, {"a": self.TABLE}, k=2), _meta(["a"]), CACHES, {})
        assert rows.state_rows.tolist() == [[12]]  # column ceil(6 / 4) - 1 = 1
        assert rows.copies == []  # no state yet: nothing to carry over (not the table's last page)

    def test_a_prefix_hit_starts_from_the_cached_column(self):
        pages = self._pages()
        rows = pages.lay_out(_out({"a": 5}, {"a": 4}, {"a": self.TABLE}, k=2), _meta(["a"]), CACHES, {})
        assert rows.state_rows.tolist() == [[13]]  # column ceil(9 / 4) - 1 = 2
        assert rows.copies == [(0, 11, 13)]  # the hit's state sits in column (4 - 1) // 4 = 0

    def test_a_moved_column_copies_the_accepted_state_and_resets_the_count(self):
        pages = self._pages()
        accepted = {}
        pages.lay_out(_out({"a": 6}, {"a": 0}, {"a": self.TABLE}, k=2), _meta(["a"]), CACHES, accepted)
        meta = _meta(["a"], 1, k=2, accepted=[3])
        accepted["a"] = 3
        rows = pages.lay_out(_out({"a": 3}, {"a": 6}, {"a": self.TABLE}, k=2), meta, CACHES, accepted)
        # Column 1 -> ceil(9 / 4) - 1 = 2: the state after the 3 accepted tokens is page 2 of the old window
        # [12, 13, 14], copied to the new window's first page 13; the row then starts there.
        assert rows.copies == [(0, 14, 13)]
        assert rows.spec_rows.tolist() == [[[13, 14, 15]]]
        assert accepted["a"] == 1 and meta.num_accepted_tokens.tolist() == [1]

    def test_a_column_that_stays_copies_nothing(self):
        pages = self._pages()
        accepted = {}
        pages.lay_out(_out({"a": 6}, {"a": 0}, {"a": self.TABLE}, k=2), _meta(["a"]), CACHES, accepted)
        accepted["a"] = 1
        pages.lay_out(_out({"a": 3}, {"a": 6}, {"a": self.TABLE}, k=2), _meta(["a"], 1, k=2, accepted=[1]),
                      CACHES, accepted)
        accepted["a"] = 2
        meta = _meta(["a"], 1, k=2, accepted=[2])
        rows = pages.lay_out(_out({"a": 3}, {"a": 7}, {"a": self.TABLE}, k=2), meta, CACHES, accepted)
        assert rows.copies == []  # still column ceil(10 / 4) - 1 = 2
        assert accepted["a"] == 2 and meta.num_accepted_tokens.tolist() == [2]  # the row starts at page 1
        assert rows.spec_rows.tolist() == [[[13, 14, 15]]]

    def test_a_preempted_request_forgets_its_old_window(self):
        pages = self._pages()
        accepted = {}
        pages.lay_out(_out({"a": 9}, {"a": 0}, {"a": self.TABLE}, k=2), _meta(["a"]), CACHES, accepted)
        # Preempted: the pages of its old window went back to the pool, so none may be a copy's source.
        pages.lay_out(_out({}, {}, {}, preempted=["a"], k=2), _meta([]), CACHES, accepted)
        new_table = [[21, 22, 23, 24, 25]]
        rows = pages.lay_out(_out({"a": 5}, {"a": 4}, {"a": new_table}, resumed=["a"], k=2), _meta(["a"]),
                             CACHES, accepted)
        assert rows.copies == [(0, 21, 23)]  # from the resumed hit's column 0, as a fresh request
        assert rows.state_rows.tolist() == [[23]]
